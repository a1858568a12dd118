//! Files across the link as tar archives: packed from a file or a folder's contents, and
//! unpacked with only plain files and folders at relative paths, within a cap, so that what an
//! environment sends back (the agent's files) can neither leave the folder it lands in nor
//! outgrow what the worker allowed.

use std::io::Read as _;
use std::path::{Component, Path};

use agenteval_core::{Error, ErrorKind, Result};

/// A tar of `from`: a file as one entry of its own name, or a folder's contents. Links are
/// kept as links (never followed out of `from`).
pub(crate) fn pack(from: &Path) -> Result<(Vec<u8>, Option<String>)> {
    let meta = std::fs::symlink_metadata(from).map_err(|e| Error::io(format!("reading {}", from.display()), e))?;
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    let name = if meta.is_dir() {
        b.append_dir_all(".", from).map_err(|e| Error::io(format!("packing {}", from.display()), e))?;
        None
    } else {
        let name = from.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "file".into());
        b.append_path_with_name(from, &name).map_err(|e| Error::io(format!("packing {}", from.display()), e))?;
        Some(name)
    };
    let bytes = b.into_inner().map_err(|e| Error::io(format!("packing {}", from.display()), e))?;
    Ok((bytes, name))
}

/// Unpacks `bytes` into `into` (made if missing): plain files and folders at relative paths
/// only, their modes without set-id bits, `max_bytes` of content in all; anything else is
/// skipped, and past the cap the copy is refused (`Invalid`).
pub(crate) fn unpack(bytes: impl std::io::Read, into: &Path, max_bytes: u64) -> Result<()> {
    let io = |e: std::io::Error| Error::io(format!("unpacking into {}", into.display()), e);
    std::fs::create_dir_all(into).map_err(io)?;
    let mut archive = tar::Archive::new(bytes);
    let mut total: u64 = 0;
    for entry in archive.entries().map_err(io)? {
        let mut entry = entry.map_err(io)?;
        let path = entry.path().map_err(io)?.into_owned();
        if path.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
            continue;
        }
        let dest = into.join(&path);
        let mode = entry.header().mode().unwrap_or(0o644) & 0o777;
        match entry.header().entry_type() {
            tar::EntryType::Directory => std::fs::create_dir_all(&dest).map_err(io)?,
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                total += entry.header().size().unwrap_or(0);
                if total > max_bytes {
                    return Err(Error::new(
                        ErrorKind::Invalid,
                        format!("the copy is larger than the {max_bytes} bytes allowed"),
                    ));
                }
                if let Some(parent) = dest.parent() {
                    std::fs::create_dir_all(parent).map_err(io)?;
                }
                // A link planted at the destination is replaced, never written through.
                if std::fs::symlink_metadata(&dest).is_ok_and(|m| !m.is_dir()) {
                    std::fs::remove_file(&dest).map_err(io)?;
                }
                let mut content = Vec::new();
                (&mut entry).take(max_bytes.saturating_add(1)).read_to_end(&mut content).map_err(io)?;
                std::fs::write(&dest, &content).map_err(io)?;
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(mode)).map_err(io)?;
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_and_a_file_round_trip() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("a/b")).unwrap();
        std::fs::write(src.path().join("a/b/c.txt"), "c").unwrap();
        let (bytes, name) = pack(src.path()).unwrap();
        assert_eq!(name, None);
        let out = tempfile::tempdir().unwrap();
        unpack(&bytes[..], out.path(), 100).unwrap();
        assert_eq!(std::fs::read_to_string(out.path().join("a/b/c.txt")).unwrap(), "c");
        let (bytes, name) = pack(&src.path().join("a/b/c.txt")).unwrap();
        assert_eq!(name.as_deref(), Some("c.txt"));
        let out = tempfile::tempdir().unwrap();
        unpack(&bytes[..], out.path(), 100).unwrap();
        assert_eq!(std::fs::read_to_string(out.path().join("c.txt")).unwrap(), "c");
    }

    #[test]
    fn an_archive_cannot_leave_its_folder_plant_a_link_or_outgrow_its_cap() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o4755);
        h.set_entry_type(tar::EntryType::Regular);
        // `set_path` refuses `..`: written raw, as a hostile archive would be.
        h.as_gnu_mut().unwrap().name[..9].copy_from_slice(b"../escape");
        h.set_cksum();
        b.append(&h, &b"x"[..]).unwrap();
        let mut l = tar::Header::new_gnu();
        l.set_entry_type(tar::EntryType::Symlink);
        l.set_size(0);
        b.append_link(&mut l, "link", "/etc/passwd").unwrap();
        let mut f = tar::Header::new_gnu();
        f.set_size(1);
        f.set_mode(0o4755);
        b.append_data(&mut f, "setuid", &b"y"[..]).unwrap();
        let bytes = b.into_inner().unwrap();
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        unpack(&bytes[..], &out, 100).unwrap();
        assert!(!root.path().join("escape").exists(), "nothing lands outside");
        assert!(std::fs::symlink_metadata(out.join("link")).is_err(), "no link is made");
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(out.join("setuid")).unwrap().permissions().mode() & 0o7777, 0o755);
        let err = unpack(&bytes[..], &root.path().join("small"), 0).unwrap_err();
        assert!(err.to_string().contains("larger than the 0 bytes"), "{err}");
    }
}
