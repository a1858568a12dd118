//! The uids agents run as when the worker is root: each task attempt leases one of agenteval's
//! own range ([`FIRST`] to [`FIRST`] + [`COUNT`] − 1), held by a lock on a file of
//! [`LEASE_DIR`] for as long as the attempt lives, so no two live tasks on a machine, of any run
//! or worker, share a uid: one agent cannot signal, read or connect to another's processes,
//! files or sockets. A dead worker's leases end with it (the kernel drops its locks).

use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

/// The first uid of agenteval's range: far above the uids of people (1000–60000), of system
/// services and of the subordinate ranges rootless containers get (from 100000, 65536 each),
/// and below 2^31, which some tools read as a signed number.
pub const FIRST: u32 = 1_800_000_000;
/// How many uids the range holds: how many task attempts can run on one machine at once.
pub const COUNT: u32 = 65_536;

/// Where the leases' lock files live (root's alone).
pub const LEASE_DIR: &str = "/run/agenteval/uids";

/// A uid of agenteval's range, this attempt's until dropped.
#[derive(Debug)]
pub struct Lease {
    pub uid: u32,
    _lock: Flock<std::fs::File>,
}

/// Whether `uid` is one of agenteval's leased uids.
pub fn is_leased_uid(uid: u32) -> bool {
    (FIRST..FIRST + COUNT).contains(&uid)
}

/// A free uid of the range: `Ok(None)` when this process is not root (its agents run as its own
/// user: nothing to give). A uid some process still runs as (a leftover of a task whose worker
/// was killed) is passed over.
pub fn lease() -> Result<Option<Lease>, super::ConfineError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    lease_in(Path::new(LEASE_DIR)).map(Some).map_err(super::ConfineError)
}

fn lease_in(dir: &Path) -> Result<Lease, String> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let busy = uids_in_use();
    let start = start_offset();
    for i in 0..COUNT {
        let uid = FIRST + (start + i) % COUNT;
        if busy.contains(&uid) {
            continue;
        }
        let path: PathBuf = dir.join(uid.to_string());
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        if let Ok(lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            return Ok(Lease { uid, _lock: lock });
        }
    }
    Err(format!("every uid of agenteval's range ({FIRST}-{}) is in use on this machine", FIRST + COUNT - 1))
}

/// Where to start looking: spread over the range, so that workers starting together rarely
/// try the same uids first.
fn start_offset() -> u32 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    (nanos ^ std::process::id().wrapping_mul(2_654_435_761)) % COUNT
}

/// The uids of agenteval's range some process runs as now.
fn uids_in_use() -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut uids: Vec<u32> = procs
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
        .filter_map(|e| {
            use std::os::unix::fs::MetadataExt as _;
            std::fs::metadata(e.path()).ok().map(|m| m.uid())
        })
        .filter(|u| is_leased_uid(*u))
        .collect();
    uids.sort_unstable();
    uids.dedup();
    uids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_leases_never_share_a_uid_and_a_dropped_one_is_free_again() {
        let dir = tempfile::tempdir().unwrap();
        let a = lease_in(dir.path()).unwrap();
        let b = lease_in(dir.path()).unwrap();
        assert_ne!(a.uid, b.uid);
        assert!(is_leased_uid(a.uid) && is_leased_uid(b.uid));
        let uid = a.uid;
        drop(a);
        let again = Flock::lock(
            std::fs::OpenOptions::new().write(true).open(dir.path().join(uid.to_string())).unwrap(),
            FlockArg::LockExclusiveNonblock,
        );
        assert!(again.is_ok(), "the lock went with the lease");
    }

    #[test]
    fn the_range_is_above_people_and_below_signed_overflow() {
        assert!(FIRST > 231_072 && u64::from(FIRST) + u64::from(COUNT) < 1 << 31);
        assert!(!is_leased_uid(65534) && !is_leased_uid(0) && is_leased_uid(FIRST + COUNT - 1));
    }
}
