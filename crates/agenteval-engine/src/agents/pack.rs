//! `agent.pack: true`: the `command` agent's folder travels inside the run. At submit it is
//! packed into one reproducible archive (sorted entries, no owners or times, modes reduced to
//! 0644/0755) stored as `agent/<sha256>.tar.gz` in the run's bundle; each worker fetches it,
//! checks its sha256 and unpacks it once into a folder of its own, which becomes the agent's
//! `workdir`. So the agent under test is the same files on a laptop and on Fargate, and its
//! hash in `metadata.json` says which files ran.

use std::path::Path;

use agenteval_core::config::{AgentConfig, PackedAgent, RunConfig};
use agenteval_core::traits::{BundleStore, Resolver};
use agenteval_core::{Error, ErrorKind, Result, RunId};

pub use crate::environments::files::{MAX_PACK_BYTES, archive};
use sha2::{Digest, Sha256};

/// Where an archive lives in its run's bundle.
pub fn archive_path(sha256: &str) -> String {
    format!("agent/{sha256}.tar.gz")
}

/// At submit, before anything is created: the archive of the agent's folder when the config
/// asks for one and its run has none yet (a rerun keeps its run's). Every reason to refuse the
/// folder (the cases inside it, a link out of it, its size) is found here.
pub async fn archive_for(config: &RunConfig) -> Result<Option<Vec<u8>>> {
    let AgentConfig::Command { pack: true, packed: None, workdir, .. } = &config.agent else { return Ok(None) };
    let dir = workdir.clone().ok_or_else(|| Error::internal("a loaded command agent has its folder"))?;
    // What the sandbox hides from an agent (the cases and their answers, the bundles, the
    // index, the secrets file, the tests) must not reach it inside its own folder either: nor
    // any case's tests, solution, starting folder or repository, wherever they sit.
    let mut hidden = crate::isolation::sandbox::hidden_paths(config);
    hidden.extend(benchmark_paths(config).await?);
    let bytes = tokio::task::spawn_blocking(move || archive(&dir, &hidden))
        .await
        .map_err(|e| Error::internal(format!("packing the agent: {e}")))??;
    Ok(Some(bytes))
}

/// Every folder or file a benchmark's tasks name: each task's tests, solution, starting folder
/// and local repository (canonical paths).
async fn benchmark_paths(config: &RunConfig) -> Result<Vec<std::path::PathBuf>> {
    let benchmark = crate::benchmarks::benchmark_from_config(&config.benchmark)?;
    let mut paths = Vec::new();
    benchmark
        .for_each_task(config.benchmark.filter(), &mut |t| {
            let env = t.environment.as_ref();
            let named = t.tests.iter().filter_map(|s| s.dir.clone()).chain(t.solution.clone());
            let named = named
                .chain(env.and_then(|e| e.context.clone()))
                .chain(env.and_then(|e| e.repo.clone()).map(std::path::PathBuf::from).filter(|p| p.is_absolute()));
            paths.extend(named.map(|p| p.canonicalize().unwrap_or(p)));
            Ok(())
        })
        .await?;
    paths.sort();
    paths.dedup();
    Ok(paths)
}

/// Stores the archive in the run and records it in `config` and `resolved`; returns the sha256
/// of the agent the run's workers run (its run's archive for a rerun).
pub async fn store_for_run(
    archive: Option<Vec<u8>>,
    config: &mut RunConfig,
    resolved: &mut serde_json::Value,
    store: &dyn BundleStore,
    run: &RunId,
) -> Result<Option<String>> {
    let AgentConfig::Command { packed, .. } = &mut config.agent else { return Ok(None) };
    let Some(bytes) = archive else { return Ok(packed.as_ref().map(|p| p.sha256.clone())) };
    let sha256 = hex::encode(Sha256::digest(&bytes));
    store.put(run, &archive_path(&sha256), &bytes).await?;
    let p = PackedAgent { sha256: sha256.clone(), bundle: store.bundle_uri(run), bytes: bytes.len() as u64 };
    resolved["agent"]["packed"] = serde_json::to_value(&p).expect("serializes");
    *packed = Some(p);
    Ok(Some(sha256))
}

/// On a worker: the packed agent's folder, fetched, checked and unpacked once per machine
/// (under the system's temporary folder); the config's agent then runs from it.
pub async fn unpack_for_worker(config: &mut RunConfig, resolver: &dyn Resolver) -> Result<()> {
    let AgentConfig::Command { packed: Some(p), workdir, .. } = &mut config.agent else { return Ok(()) };
    let dest = std::env::temp_dir().join("agenteval-agents").join(&p.sha256);
    // An unpacked folder is trusted by its name only when this user made it: on a shared
    // machine another user could have put other files under that name first.
    if dest.is_dir() && !made_by_us(&dest) {
        return Err(Error::new(
            ErrorKind::Corrupt,
            format!("{} belongs to another user: remove it, it is not this run's agent", dest.display()),
        ));
    }
    if !dest.is_dir() {
        let (store, run) = crate::resolve::store_from_bundle_uri(resolver, &p.bundle).await?;
        let bytes = store.get(&run, &archive_path(&p.sha256)).await?;
        let got = hex::encode(Sha256::digest(&bytes));
        if got != p.sha256 {
            return Err(Error::new(
                ErrorKind::Corrupt,
                format!("the packed agent {} has sha256 {got}: it is not what was submitted", archive_path(&p.sha256)),
            ));
        }
        let dest2 = dest.clone();
        tokio::task::spawn_blocking(move || unpack(&bytes, &dest2))
            .await
            .map_err(|e| Error::internal(format!("unpacking the agent: {e}")))??;
    }
    *workdir = Some(dest);
    Ok(())
}

/// Unpacks into a fresh folder beside `dest`, then renames it into place: a worker never sees a
/// half-unpacked agent, and two workers unpacking at once both end with the same files.
fn unpack(bytes: &[u8], dest: &Path) -> Result<()> {
    let parent = dest.parent().expect("a folder under the temporary folder");
    std::fs::create_dir_all(parent).map_err(|e| Error::io(format!("creating {}", parent.display()), e))?;
    let staging = tempfile::Builder::new()
        .prefix(".unpacking-")
        .tempdir_in(parent)
        .map_err(|e| Error::io(format!("creating a folder in {}", parent.display()), e))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    tar.set_preserve_permissions(true);
    // `unpack` refuses entries that would land outside the folder (`..`, absolute paths).
    tar.unpack(staging.path()).map_err(|e| Error::new(ErrorKind::Corrupt, format!("unpacking the agent: {e}")))?;
    // The agent runs as an unprivileged user: its folder must be readable to it.
    set_readable(staging.path())?;
    let staged = staging.keep();
    match std::fs::rename(&staged, dest) {
        Ok(()) => Ok(()),
        // Another worker put the same files there first.
        Err(_) if dest.is_dir() => {
            let _ = std::fs::remove_dir_all(&staged);
            Ok(())
        }
        Err(e) => Err(Error::io(format!("moving the agent into {}", dest.display()), e)),
    }
}

#[cfg(unix)]
fn made_by_us(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.uid() == nix::unistd::geteuid().as_raw())
}

#[cfg(unix)]
fn set_readable(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let set = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| Error::io(format!("setting the mode of {}", p.display()), e))
    };
    set(dir, 0o755)?;
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(format!("reading {}", dir.display()), e))?.flatten() {
        let p = e.path();
        if p.is_dir() {
            set_readable(&p)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_files_pack_to_the_same_bytes_and_unpack_whole() {
        let a = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(a.path().join("lib/__pycache__")).unwrap();
        std::fs::write(a.path().join("agent.py"), "print('hi')\n").unwrap();
        std::fs::write(a.path().join("lib/util.py"), "X = 1\n").unwrap();
        std::fs::write(a.path().join("lib/__pycache__/util.pyc"), "junk").unwrap();
        let one = archive(a.path(), &[]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::write(a.path().join("agent.py"), "print('hi')\n").unwrap();
        assert_eq!(one, archive(a.path(), &[]).unwrap(), "times do not change the archive");
        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("unpacked");
        unpack(&one, &dest).unwrap();
        assert_eq!(std::fs::read_to_string(dest.join("lib/util.py")).unwrap(), "X = 1\n");
        assert!(!dest.join("lib/__pycache__").exists(), "caches are not packed");
        std::fs::write(a.path().join("lib/util.py"), "X = 2\n").unwrap();
        assert_ne!(one, archive(a.path(), &[]).unwrap(), "a changed file changes the archive");
        // The benchmark's cases in the agent's folder would be its answers: refused.
        std::fs::write(a.path().join("cases.jsonl"), "{}").unwrap();
        let hidden = [a.path().join("cases.jsonl").canonicalize().unwrap()];
        let err = archive(a.path(), &hidden).unwrap_err().to_string();
        assert!(err.contains("hidden from agents"), "{err}");
    }

    #[test]
    fn a_link_out_of_the_folder_is_refused() {
        let a = tempfile::tempdir().unwrap();
        let secret = tempfile::NamedTempFile::new().unwrap();
        std::os::unix::fs::symlink(secret.path(), a.path().join("key")).unwrap();
        let err = archive(a.path(), &[]).unwrap_err().to_string();
        assert!(err.contains("links outside"), "{err}");
    }
}
