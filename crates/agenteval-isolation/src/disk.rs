//! An agent's scratch folder held to `limits.max_disk_bytes`: measured while the agent runs and
//! once it has exited, with the kernel capping any single file (`RLIMIT_FSIZE`) in between.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Files and folders counted before a scratch folder is called full whatever their size: an
/// agent that makes millions of empty files fills a disk's inodes, and each one slows the count.
pub const MAX_ENTRIES: u64 = 1_000_000;

/// The exit code of a supervised program the kernel killed for writing a file past its
/// `RLIMIT_FSIZE` (128 + SIGXFSZ, as `reap::supervise` reports signals).
pub const KILLED_BY_FILE_SIZE: i32 = 128 + nix::sys::signal::Signal::SIGXFSZ as i32;

/// What a folder holds, links not followed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes allocated on disk (a sparse file counts what it really uses).
    pub bytes: u64,
    pub entries: u64,
}

/// Measures `dir`, stopping early once past `max_bytes` or [`MAX_ENTRIES`]. A folder the agent
/// made unreadable to hide what it holds is opened up again first: it runs as the worker's user,
/// or the worker is root.
pub fn usage(dir: &Path, max_bytes: u64) -> Usage {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let mut usage = Usage::default();
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
                match std::fs::read_dir(&d) {
                    Ok(e) => e,
                    Err(_) => continue,
                }
            }
            Err(_) => continue,
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            usage.bytes += meta.blocks() * 512;
            usage.entries += 1;
            if usage.bytes > max_bytes || usage.entries > MAX_ENTRIES {
                return usage;
            }
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    usage
}

/// Why `usage` is over the limit, if it is.
pub fn over(usage: Usage, max_bytes: u64) -> Option<String> {
    if usage.bytes > max_bytes {
        Some(format!("the scratch folder holds more than {max_bytes} bytes (limits.max_disk_bytes)"))
    } else if usage.entries > MAX_ENTRIES {
        Some(format!("the scratch folder holds more than {MAX_ENTRIES} files"))
    } else {
        None
    }
}

/// Watches one scratch folder. Each measurement waits at least ten times as long as the last
/// one took (and at least `PERIOD`), so a folder that is slow to count costs the worker a tenth
/// of a core at most.
pub struct Watch {
    dir: PathBuf,
    max_bytes: u64,
    next: tokio::time::Instant,
}

const PERIOD: Duration = Duration::from_millis(500);

impl Watch {
    pub fn new(dir: PathBuf, max_bytes: u64) -> Watch {
        Watch { dir, max_bytes, next: tokio::time::Instant::now() + PERIOD }
    }

    /// When the next measurement is due.
    pub fn due(&self) -> tokio::time::Instant {
        self.next
    }

    /// Measures now; why the folder is over its limit, if it is.
    pub async fn check(&mut self) -> Option<String> {
        let (dir, max) = (self.dir.clone(), self.max_bytes);
        let started = Instant::now();
        let usage = tokio::task::spawn_blocking(move || usage(&dir, max)).await.unwrap_or_default();
        self.next = tokio::time::Instant::now() + PERIOD.max(started.elapsed() * 10);
        over(usage, self.max_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_is_on_disk_below_the_folder_and_stops_early() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/data"), vec![7u8; 300_000]).unwrap();
        std::fs::write(dir.path().join("small"), b"x").unwrap();
        let u = usage(dir.path(), u64::MAX);
        assert_eq!(u.entries, 4);
        assert!(u.bytes >= 300_000, "{u:?}");
        assert!(over(u, 1 << 30).is_none());
        assert!(over(usage(dir.path(), 100_000), 100_000).unwrap().contains("max_disk_bytes"));
        // A sparse file counts the blocks it uses, not its length.
        let sparse = std::fs::File::create(dir.path().join("sparse")).unwrap();
        sparse.set_len(1 << 40).unwrap();
        assert!(usage(dir.path(), u64::MAX).bytes < 1 << 30);
    }

    #[test]
    fn a_folder_made_unreadable_is_still_counted() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let hidden = dir.path().join("hidden");
        std::fs::create_dir(&hidden).unwrap();
        std::fs::write(hidden.join("data"), vec![1u8; 200_000]).unwrap();
        std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o000)).unwrap();
        assert!(usage(dir.path(), u64::MAX).bytes >= 200_000);
    }

    #[test]
    fn a_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let big = tempfile::tempdir().unwrap();
        std::fs::write(big.path().join("data"), vec![1u8; 500_000]).unwrap();
        std::os::unix::fs::symlink(big.path(), dir.path().join("link")).unwrap();
        assert!(usage(dir.path(), u64::MAX).bytes < 100_000);
    }
}
