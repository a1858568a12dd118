//! The launcher every command of the agent starts through in a task container: a 608-byte static
//! program (`launch/x86_64.S`, no libc, so it runs in any image) that sets `no_new_privs`, drops
//! one capability (`CAP_MKNOD`) from the bounding, permitted, effective and inheritable sets, and
//! executes the command. Every other process of the container (PID 1, the image's services, the
//! hold, the tests) keeps that capability, so the kernel's own check refuses the agent, and all it
//! starts, the memory, variables and files of those processes (`/proc/PID/mem`, `environ`,
//! `root`, `fd`, `ptrace`, `process_vm_*`): the capabilities of a process reached that way must be
//! a subset of its reacher's. Processes the agent started stay its own to reach.
//!
//! The launcher is mounted read-only from this machine, so an agent cannot replace it for its next
//! command; it is mounted only where the engine shares this machine's files (a local socket), and
//! built for x86-64 only: elsewhere commands start as before and `docs/security.md` says so.

use std::path::{Path, PathBuf};

/// Where the launcher is in a task container.
pub(crate) const IN_CONTAINER: &str = "/.agenteval-launch";

/// `CAP_MKNOD`: in Docker's default set and needed by no agent (device nodes are the engine's).
pub(crate) const DROPPED: u32 = 27;

/// The launcher, assembled and linked from `launch/x86_64.S` (`as` then
/// `ld -static -nostdlib -N -s --build-id=none`; the unit test below checks they still agree).
#[cfg(target_arch = "x86_64")]
const PROGRAM: Option<&[u8]> = Some(include_bytes!("launch/x86_64.elf"));
#[cfg(not(target_arch = "x86_64"))]
const PROGRAM: Option<&[u8]> = None;

/// The command that runs `inner` as the agent: through the launcher, which finds no program by
/// `PATH` itself, so `env` does, once the capability is gone.
pub(crate) fn wrap(inner: Vec<String>) -> Vec<String> {
    [IN_CONTAINER.to_string(), DROPPED.to_string(), "/usr/bin/env".to_string()].into_iter().chain(inner).collect()
}

/// The launcher written on this machine for the engine to mount, where the engine shares this
/// machine's files; `None` (commands start as before) elsewhere or when it cannot be written.
pub(crate) fn host_file(engine_root: Option<&str>) -> Option<PathBuf> {
    let program = PROGRAM?;
    if !local_engine(std::env::var("DOCKER_HOST").ok().as_deref(), engine_root) {
        return None;
    }
    match write_once(program) {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::warn!("agenteval's launcher could not be written ({e}): an agent's commands start without it");
            None
        }
    }
}

/// Whether a bind mount's source on this machine is what the engine mounts: its socket is
/// local, and its data root is a folder here (not an engine beside this one's container).
fn local_engine(docker_host: Option<&str>, engine_root: Option<&str>) -> bool {
    let local_socket = docker_host.is_none_or(|h| h.is_empty() || h.starts_with("unix://"));
    local_socket && engine_root.is_some_and(|r| Path::new(r).is_dir())
}

/// The launcher, in a folder of this user's that no one else can write, written once per content.
fn write_once(program: &[u8]) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
    static WRITTEN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if let Some(p) = WRITTEN.get() {
        return Ok(p.clone());
    }
    let uid = nix::unistd::geteuid().as_raw();
    let dir = std::env::temp_dir().join(format!("agenteval-launch-{uid}"));
    // Made with its mode at once (the umask only takes bits away): a second worker finding it a
    // moment later never sees it writable by others.
    match std::fs::DirBuilder::new().mode(0o755).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    // A folder someone else made, or can write, could hold their program under our name.
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::other(format!("{} is not this user's alone", dir.display())));
    }
    let digest = hex::encode(&<sha2::Sha256 as sha2::Digest>::digest(program)[..8]);
    let path = dir.join(format!("launch-{digest}"));
    if std::fs::read(&path).ok().as_deref() != Some(program) {
        let part = dir.join(format!(".launch-{digest}.{}", std::process::id()));
        std::fs::write(&part, program)?;
        std::fs::set_permissions(&part, std::fs::Permissions::from_mode(0o755))?;
        std::fs::rename(&part, &path)?;
    }
    Ok(WRITTEN.get_or_init(|| path).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_engine_that_shares_this_machine_s_files_mounts_it() {
        let here = std::env::temp_dir();
        let here = here.to_str();
        assert!(local_engine(None, here));
        assert!(local_engine(Some("unix:///var/run/docker.sock"), here));
        assert!(!local_engine(Some("tcp://10.0.0.2:2376"), here));
        assert!(!local_engine(None, Some("/no/such/engine/root")));
        assert!(!local_engine(None, None));
        assert_eq!(
            wrap(vec!["timeout".into(), "bash".into()])[..4],
            ["/.agenteval-launch", "27", "/usr/bin/env", "timeout"]
        );
    }

    /// The launcher drops the capability from every set and sets `no_new_privs` before the
    /// program runs with its arguments; a bad capability or a missing program is an exit code.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_launcher_drops_its_capability_and_runs_the_program() {
        let dir = tempfile::tempdir().unwrap();
        let launcher = dir.path().join("launch");
        std::fs::write(&launcher, PROGRAM.unwrap()).unwrap();
        std::fs::set_permissions(&launcher, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let run = |args: &[&str]| std::process::Command::new(&launcher).args(args).output().unwrap();
        let out = run(&[
            "27",
            "/bin/sh",
            "-c",
            "grep -E '^(CapBnd|CapPrm|CapEff|NoNewPrivs)' /proc/self/status; echo \"$0 $1\"",
            "a",
            "b",
        ]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(text.contains("NoNewPrivs:\t1"), "{text}");
        assert!(text.ends_with("a b\n"), "the program's arguments: {text}");
        for line in text.lines().filter(|l| l.starts_with("Cap")) {
            let mask = u64::from_str_radix(line.split_whitespace().last().unwrap(), 16).unwrap();
            assert_eq!(mask & (1 << DROPPED), 0, "{line}");
        }
        assert_eq!(run(&["64", "/bin/true"]).status.code(), Some(126), "no such capability");
        assert_eq!(run(&["2x", "/bin/true"]).status.code(), Some(126), "not a number");
        assert_eq!(run(&["27"]).status.code(), Some(126), "no program");
        assert_eq!(run(&["27", "/no/such/program"]).status.code(), Some(127));
        assert_eq!(run(&["27", "/bin/sh", "-c", "exit 3"]).status.code(), Some(3));
    }

    /// The program is what its source assembles to, where this machine has the assembler.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_launcher_is_built_from_its_source() {
        let have =
            |tool: &str| std::process::Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success());
        if !have("as") || !have("ld") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/launch/x86_64.S");
        let object = dir.path().join("launch.o");
        let linked = dir.path().join("launch");
        let ok = |c: &mut std::process::Command| assert!(c.status().unwrap().success(), "{c:?}");
        ok(std::process::Command::new("as").arg("-o").arg(&object).arg(&source));
        ok(std::process::Command::new("ld")
            .args(["-static", "-nostdlib", "-N", "-s", "--build-id=none", "-o"])
            .arg(&linked)
            .arg(&object));
        assert!(
            std::fs::read(&linked).unwrap() == PROGRAM.unwrap(),
            "launch/x86_64.elf is not what launch/x86_64.S builds"
        );
    }
}
