//! A preset's files, fetched on the worker (which reaches the package registries, with its own
//! npm and pip configuration: proxy, CA, mirror) into a cache folder kept between runs, once per
//! preset, version and Python: what a task's container, which may have no internet, is given.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::presets::{AGENT_DIR, Package, Preset};

/// The cache's layout: a change to how a preset's files are laid out (its wrapper) is a new
/// folder, never a stale one reused.
pub const LAYOUT: u32 = 1;
/// Lines of an installer's output an error quotes: the last ones, where the failure is.
const TAIL_LINES: usize = 12;

pub use agenteval_core::cache_dir;

/// The last lines of an installer's output.
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim_end).filter(|l| !l.is_empty()).collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
}

/// The folder holding `preset`'s files at `version` (for the image's Python `python`, `3.11`),
/// laid out as they go under the agent's folder in the image; fetched unless the cache has it.
/// One fetch per folder at a time on this machine.
pub(crate) async fn fetch(
    preset: &Preset,
    version: &str,
    python: Option<&str>,
    timeout: Duration,
) -> Result<PathBuf, String> {
    let name = match python {
        Some(py) => format!("{}-{version}-py{py}-l{LAYOUT}", preset.name),
        None => format!("{}-{version}-l{LAYOUT}", preset.name),
    };
    // One folder's name, never a path: what went into it came from a config and an image.
    if name.starts_with('.')
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._+-".contains(&b))
        || name.contains("..")
    {
        return Err(format!("`{name}` cannot name a folder of the agent cache"));
    }
    let root = cache_dir().join("agents");
    std::fs::create_dir_all(&root).map_err(|e| format!("making the agent cache {}: {e}", root.display()))?;
    let dest = root.join(&name);
    let lock = root.join(format!("{name}.lock"));
    let _held = lock_file(lock).await?;
    if dest.join(".complete").is_file() {
        return Ok(dest);
    }
    let _ = std::fs::remove_dir_all(&dest);
    let work = tempfile::tempdir_in(&root).map_err(|e| format!("a folder in {}: {e}", root.display()))?;
    let fetched = tokio::time::timeout(timeout, fetch_into(preset, version, python, work.path())).await;
    match fetched {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(format!("fetching {} {version} took more than {} s", preset.name, timeout.as_secs())),
    }
    std::fs::write(work.path().join(".complete"), b"").map_err(|e| format!("marking the fetch complete: {e}"))?;
    let kept = work.keep();
    std::fs::rename(&kept, &dest).map_err(|e| format!("moving the fetched agent to {}: {e}", dest.display()))?;
    Ok(dest)
}

async fn fetch_into(preset: &Preset, version: &str, python: Option<&str>, into: &Path) -> Result<(), String> {
    match preset.package {
        Package::NpmBinary { platform, files, .. } => {
            let spec = platform.replace("{version}", version);
            let dest = into.to_string_lossy().into_owned();
            let out = run("npm", &["pack", &spec, "--pack-destination", &dest, "--silent"], into).await?;
            let tgz = out.lines().rev().map(str::trim).find(|l| l.ends_with(".tgz")).map(|l| into.join(l));
            let tgz = tgz.filter(|p| p.is_file()).ok_or_else(|| format!("`npm pack {spec}` left no tarball: {out}"))?;
            unpack(&tgz, files, into)?;
            let _ = std::fs::remove_file(&tgz);
            Ok(())
        }
        Package::Pip { package, module, call, bin } => {
            let py = python.ok_or("a Python package needs the image's Python version")?;
            let site = into.join("site");
            let target = site.to_string_lossy().into_owned();
            let pinned = format!("{package}=={version}");
            let mut args = vec![
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-input",
                "--no-compile",
                "--target",
                &target,
                "--only-binary=:all:",
                "--implementation",
                "cp",
                "--python-version",
                py,
            ];
            for p in ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64", "linux_x86_64"] {
                args.extend(["--platform", p]);
            }
            args.push(&pinned);
            run("python3", &args, into).await?;
            let wrapper = format!(
                "#!/bin/sh\n# {package} {version}, installed by agenteval for the image's python3.\nexec python3 -s -B -c 'import sys; sys.path.insert(0, \"{AGENT_DIR}/site\"); sys.argv[0] = \"{bin}\"; from {module} import {call}; sys.exit({call}())' \"$@\"\n"
            );
            write_exec(&into.join("bin").join(bin), wrapper.as_bytes())
        }
    }
}

/// Runs an installer, its output kept; an error quotes its last lines.
async fn run(program: &str, args: &[&str], dir: &Path) -> Result<String, String> {
    let shown = format!("{program} {}", args.join(" "));
    let out = tokio::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("running `{shown}` on the worker: {e}"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        let code = out.status.code().map_or_else(|| "was killed".into(), |c| format!("exited {c}"));
        return Err(format!("`{shown}` {code}:\n{}", tail(&text)));
    }
    Ok(text)
}

/// The listed files of an npm tarball, at their places under `into`, executable.
fn unpack(tgz: &Path, files: &[(&str, &str)], into: &Path) -> Result<(), String> {
    use std::io::Read as _;
    let f = std::fs::File::open(tgz).map_err(|e| format!("reading {}: {e}", tgz.display()))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(f));
    let mut found = 0;
    let entries = archive.entries().map_err(|e| format!("reading {}: {e}", tgz.display()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| format!("reading {}: {e}", tgz.display()))?;
        let path = entry.path().map_err(|e| format!("reading {}: {e}", tgz.display()))?.to_string_lossy().into_owned();
        if let Some((_, to)) = files.iter().find(|(from, _)| *from == path) {
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).map_err(|e| format!("reading {path} of {}: {e}", tgz.display()))?;
            write_exec(&into.join(to), &bytes)?;
            found += 1;
        }
    }
    if found < files.len() {
        let names: Vec<&str> = files.iter().map(|(f, _)| *f).collect();
        return Err(format!("{} does not hold {}", tgz.display(), names.join(", ")));
    }
    Ok(())
}

fn write_exec(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("making {}: {e}", dir.display()))?;
    }
    std::fs::write(path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("making {} executable: {e}", path.display()))
}

/// An exclusive lock on `path`, held until dropped; taken in a blocking thread (another worker
/// may hold it for a whole fetch or build).
pub(crate) async fn lock_file(path: PathBuf) -> Result<nix::fcntl::Flock<std::fs::File>, String> {
    tokio::task::spawn_blocking(move || {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("opening {}: {e}", path.display()))?;
        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| format!("locking {}: {e}", path.display()))
    })
    .await
    .map_err(|e| format!("the lock's thread: {e}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_listed_files_of_a_tarball_are_laid_out_executable() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = tempfile::tempdir().unwrap();
        let tgz = d.path().join("p.tgz");
        let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
            std::fs::File::create(&tgz).unwrap(),
            flate2::Compression::fast(),
        ));
        for (name, body) in [("package/bin/tool", "#!/bin/sh\n"), ("package/README.md", "hi")] {
            let mut h = tar::Header::new_gnu();
            h.set_size(body.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, name, body.as_bytes()).unwrap();
        }
        b.into_inner().unwrap().finish().unwrap();
        let out = d.path().join("out");
        unpack(&tgz, &[("package/bin/tool", "bin/tool")], &out).unwrap();
        let m = std::fs::metadata(out.join("bin/tool")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o755);
        assert!(!out.join("README.md").exists());
        let missing = unpack(&tgz, &[("package/bin/other", "bin/other")], &out).unwrap_err();
        assert!(missing.contains("package/bin/other"), "{missing}");
    }

    #[test]
    fn an_installers_error_keeps_its_last_lines() {
        let text: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        let t = tail(&text);
        assert!(t.starts_with("line 9\n") && t.ends_with("line 20"), "{t}");
    }
}
