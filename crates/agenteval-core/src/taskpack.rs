//! A finished task's files as one packed file, `tasks/<id>.tar.gz`, and reading a task's files
//! whichever layout its bundle has (packs since schema 1.1, a folder per task before).
//!
//! Why one gzip'd tar per task: a task folder of five small files costs some 30 KB of disk
//! (a block per file and one for the folder) for 11 KB of text, and five objects on S3. One
//! compressed file is one block (~4 KB), one object, one manifest entry, and one atomic rename
//! publishes it; a tar is what anyone can open without agenteval (`tar xzf`). `result.json` is
//! its first entry, so the seal reads a result without inflating the rest.

use std::io::Read as _;

use crate::traits::BundleStore;
use crate::{Error, ErrorKind, Result, RunId, TaskId, layout};

/// What a pack may inflate to: a hostile bundle's pack must not expand into memory unbounded.
pub const UNPACKED_LIMIT: u64 = 1 << 30;

/// Packs a task's files, in the order given (callers put `result.json` first). Names are
/// relative paths like bundle paths (`artifacts/patch.diff`).
pub fn pack(files: &[(&str, &[u8])]) -> Result<Vec<u8>> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let size: usize = files.iter().map(|(_, b)| b.len() + 1024).sum();
    let mut tar = tar::Builder::new(Vec::with_capacity(size + 1024));
    for (name, bytes) in files {
        crate::traits::check_bundle_path(name)?;
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(now);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, name, *bytes).map_err(|e| Error::io(format!("packing {name}"), e))?;
    }
    let tar = tar.into_inner().map_err(|e| Error::io("packing a task", e))?;
    Ok(gzip(&tar))
}

thread_local! {
    /// One compressor per thread, reset between packs: making one allocates and clears some
    /// 300 KB of tables, which was a fifth of a worker's time at a pack per task.
    static DEFLATE: std::cell::RefCell<flate2::Compress> =
        std::cell::RefCell::new(flate2::Compress::new(flate2::Compression::fast(), false));
}

/// `bytes` as one gzip member (RFC 1952: a header, raw deflate, CRC-32 and size).
fn gzip(bytes: &[u8]) -> Vec<u8> {
    const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let mut out = Vec::with_capacity(bytes.len() / 3 + 64);
    out.extend_from_slice(&HEADER);
    DEFLATE.with(|d| {
        let mut d = d.borrow_mut();
        d.reset();
        loop {
            let read = d.total_in() as usize;
            if out.capacity() - out.len() < 1024 {
                out.reserve(out.capacity().max(4096));
            }
            let status =
                d.compress_vec(&bytes[read..], &mut out, flate2::FlushCompress::Finish).expect("deflate of memory");
            if status == flate2::Status::StreamEnd {
                break;
            }
        }
    });
    let mut crc = flate2::Crc::new();
    crc.update(bytes);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out
}

/// A task's files, read from its pack or its folder.
#[derive(Debug, Default, Clone)]
pub struct TaskFiles {
    files: Vec<(String, Vec<u8>)>,
    /// Read from a pack (`tasks/<id>.tar.gz`) rather than a folder.
    pub packed: bool,
}

impl TaskFiles {
    /// Files read from a task folder, by name.
    pub fn from_files(files: Vec<(String, Vec<u8>)>) -> Self {
        TaskFiles { files, packed: false }
    }

    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.files.iter().find(|(n, _)| n == name).map(|(_, b)| b.as_slice())
    }

    /// Every file, in the pack's order (a folder's: sorted).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.files.iter().map(|(n, b)| (n.as_str(), b.as_slice()))
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.files.iter().map(|(n, _)| n.as_str())
    }
}

/// Visits a pack's entries in order, each checked to be a plain file at a safe relative path,
/// handing `f` its name and a reader of its bytes, until `f` returns `false`. Every reader of
/// packs is built on it, so they all refuse the same packs.
fn visit(bytes: &[u8], what: &str, f: &mut dyn FnMut(&str, &mut dyn std::io::Read) -> Result<bool>) -> Result<()> {
    let corrupt = corrupt_in(what);
    let gz = flate2::read::GzDecoder::new(bytes).take(UNPACKED_LIMIT);
    let mut archive = tar::Archive::new(gz);
    for entry in archive.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err(Error::corrupt(format!("{what}: holds something other than files")));
        }
        let name = entry.path().map_err(corrupt)?.to_string_lossy().into_owned();
        crate::traits::check_bundle_path(&name).map_err(|e| Error::corrupt(format!("{what}: {e}")))?;
        if !f(&name, &mut entry)? {
            break;
        }
    }
    Ok(())
}

fn corrupt_in(what: &str) -> impl Fn(std::io::Error) -> Error + Copy + '_ {
    move |e| Error::new(ErrorKind::Corrupt, format!("{what}: not a task pack ({e})"))
}

/// Walks a pack's entries, handing each to `f` (at most `cap` bytes of it) until it returns
/// `false`.
fn walk(bytes: &[u8], what: &str, cap: u64, f: &mut dyn FnMut(String, Vec<u8>) -> bool) -> Result<()> {
    visit(bytes, what, &mut |name, entry| {
        let mut data = Vec::new();
        entry.take(cap).read_to_end(&mut data).map_err(corrupt_in(what))?;
        Ok(f(name.to_string(), data))
    })
}

/// Every file of a pack. `what` names it in errors.
pub fn unpack(bytes: &[u8], what: &str) -> Result<TaskFiles> {
    let mut files = Vec::new();
    walk(bytes, what, UNPACKED_LIMIT, &mut |n, b| {
        files.push((n, b));
        true
    })?;
    Ok(TaskFiles { files, packed: true })
}

/// One file of a pack, reading no further than it (`result.json` is first).
pub fn unpack_one(bytes: &[u8], name: &str, what: &str) -> Result<Option<Vec<u8>>> {
    unpack_one_capped(bytes, name, what, UNPACKED_LIMIT)
}

/// [`unpack_one`], keeping at most `cap` bytes of the file (a caller that wants no more than
/// a limit asks for one byte over it, to tell).
pub fn unpack_one_capped(bytes: &[u8], name: &str, what: &str, cap: u64) -> Result<Option<Vec<u8>>> {
    if let Some(first) = first_file(bytes, name, cap) {
        return Ok(Some(first));
    }
    let mut found = None;
    walk(bytes, what, cap, &mut |n, b| {
        if n == name {
            found = Some(b);
            false
        } else {
            true
        }
    })?;
    Ok(found)
}

/// The pack's first file when it is `name`, a plain file as [`pack`] writes it (at most `cap`
/// bytes of it), inflated no further than its end. A reader of gzip inflates 32 KB at a time,
/// which is the whole pack of most tasks: the seal reads every result and wants none of the
/// rest. `None` for any other shape (another first file, a gzip header with extras, a header
/// that does not check out): the caller then walks the pack, which refuses what is wrong.
fn first_file(bytes: &[u8], name: &str, cap: u64) -> Option<Vec<u8>> {
    use miniz_oxide::inflate::TINFLStatus;
    use miniz_oxide::inflate::core::{DecompressorOxide, decompress, inflate_flags};
    const BLOCK: usize = 512;
    // ID1 ID2, deflate, no flags: the header `gzip` writes, 10 bytes.
    let body = bytes.get(10..).filter(|_| bytes.starts_with(&[0x1f, 0x8b, 8, 0]))?;
    let mut inflater = Box::<DecompressorOxide>::default();
    let (mut out, mut made, mut used) = (vec![0u8; 4 * BLOCK], 0usize, 0usize);
    // Inflates until `want` bytes are out; the whole output is kept, for back-references. The
    // buffer grows as the bytes come, never to what a header claims: a hostile pack's first
    // file may claim a gigabyte and hold nothing.
    let mut fill = |out: &mut Vec<u8>, want: usize| -> Option<()> {
        while made < want {
            if made == out.len() {
                let grown = out.len().saturating_mul(2).min(want);
                out.resize(grown, 0);
            }
            let end = out.len().min(want);
            let flags = inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
            let (status, read, wrote) = decompress(&mut inflater, body.get(used..)?, &mut out[..end], made, flags);
            (used, made) = (used + read, made + wrote);
            match status {
                TINFLStatus::HasMoreOutput | TINFLStatus::Done if made >= want => {}
                TINFLStatus::HasMoreOutput if wrote > 0 || read > 0 => {}
                _ => return None,
            }
        }
        Some(())
    };
    fill(&mut out, BLOCK)?;
    let header = tar::Header::from_byte_slice(&out[..BLOCK]);
    let sum: u32 =
        out[..BLOCK].iter().enumerate().map(|(i, b)| if (148..156).contains(&i) { 32 } else { u32::from(*b) }).sum();
    if header.cksum().ok()? != sum
        || header.entry_type() != tar::EntryType::Regular
        || header.path_bytes().as_ref() != name.as_bytes()
        || crate::traits::check_bundle_path(name).is_err()
    {
        return None;
    }
    let size = usize::try_from(header.entry_size().ok()?.min(cap)).ok()?;
    fill(&mut out, BLOCK.checked_add(size)?)?;
    out.truncate(BLOCK + size);
    out.drain(..BLOCK);
    Some(out)
}

/// One file of a pack handed to `f` in pieces as it inflates; its size, or `None` when the
/// pack has no such file.
pub fn unpack_chunks(
    bytes: &[u8],
    name: &str,
    what: &str,
    f: &mut (dyn for<'b> FnMut(&'b [u8]) + Send),
) -> Result<Option<u64>> {
    unpack_pieces(bytes, name, what, &mut |piece| {
        f(piece);
        true
    })
}

/// [`unpack_chunks`], stopping when `f` returns `false` (a reader that went away): the bytes
/// handed over so far, or `None` when the pack has no such file.
pub fn unpack_pieces(bytes: &[u8], name: &str, what: &str, f: &mut dyn FnMut(&[u8]) -> bool) -> Result<Option<u64>> {
    let mut found = None;
    visit(bytes, what, &mut |entry_name, entry| {
        if entry_name != name {
            return Ok(true);
        }
        let mut piece = vec![0u8; 64 << 10];
        let mut total = 0u64;
        loop {
            let n = entry.read(&mut piece).map_err(corrupt_in(what))?;
            if n == 0 || !f(&piece[..n]) {
                found = Some(total + n as u64);
                return Ok(false);
            }
            total += n as u64;
        }
    })?;
    Ok(found)
}

/// `tasks/<id>.tar.gz` → `<id>`, for a bundle path of a task pack.
pub fn task_of_pack(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("tasks/")?.strip_suffix(layout::PACK_SUFFIX)?;
    (!rest.is_empty() && !rest.contains('/')).then_some(rest)
}

/// A task's pack, or `None` when it has none (an older bundle, or an unfinished task).
async fn get_pack(store: &dyn BundleStore, run: &RunId, task: &TaskId) -> Result<Option<Vec<u8>>> {
    match store.get(run, &layout::task_pack(task)).await {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// One file of a finished task (`result.json`, `trace.jsonl`, `artifacts/patch.diff`, ...), from
/// its pack or, in an older bundle, its folder. `NotFound` when the task has no such file.
pub async fn read_task_file(store: &dyn BundleStore, run: &RunId, task: &TaskId, name: &str) -> Result<Vec<u8>> {
    if let Some(pack) = get_pack(store, run, task).await? {
        let what = layout::task_pack(task);
        return unpack_one(&pack, name, &what)?.ok_or_else(|| Error::not_found(format!("{what} holds no {name}")));
    }
    store.get(run, &layout::task_file(task, name)).await
}

/// [`read_task_file`], keeping at most `cap` bytes (what a reader that holds a hostile
/// bundle's file in memory asks for: one byte over its limit, to tell).
pub async fn read_task_file_capped(
    store: &dyn BundleStore,
    run: &RunId,
    task: &TaskId,
    name: &str,
    cap: u64,
) -> Result<Vec<u8>> {
    if let Some(pack) = get_pack(store, run, task).await? {
        let what = layout::task_pack(task);
        return unpack_one_capped(&pack, name, &what, cap)?
            .ok_or_else(|| Error::not_found(format!("{what} holds no {name}")));
    }
    store.read_range(run, &layout::task_file(task, name), 0, cap).await
}

/// [`read_task_file`] handed to `f` in pieces (a pack's file is inflated a piece at a time),
/// so a large trace is never held whole; returns its size.
pub async fn read_task_file_chunks(
    store: &dyn BundleStore,
    run: &RunId,
    task: &TaskId,
    name: &str,
    f: &mut (dyn for<'b> FnMut(&'b [u8]) + Send),
) -> Result<u64> {
    if let Some(pack) = get_pack(store, run, task).await? {
        let what = layout::task_pack(task);
        return unpack_chunks(&pack, name, &what, f)?
            .ok_or_else(|| Error::not_found(format!("{what} holds no {name}")));
    }
    store.read_chunks(run, &layout::task_file(task, name), f).await
}

/// Whether a task has its result: a pack, or (older bundles) a folder's `result.json`.
pub async fn has_result(store: &dyn BundleStore, run: &RunId, task: &TaskId) -> Result<bool> {
    Ok(store.exists(run, &layout::task_pack(task)).await?
        || store.exists(run, &layout::task_file(task, layout::TASK_RESULT)).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pack_gives_back_its_files_in_order_and_one_without_the_rest() {
        let files: Vec<(&str, &[u8])> = vec![
            ("result.json", b"{\"r\":1}"),
            ("trace.jsonl", b"{\"step\":0}\n"),
            (
                "artifacts/a/very/long/path/that/is/longer/than/a/hundred/characters/of/an/old/tar/header/to/hold/patch.diff",
                b"diff",
            ),
        ];
        let bytes = pack(&files).unwrap();
        let back = unpack(&bytes, "t").unwrap();
        assert!(back.packed);
        assert_eq!(back.names().collect::<Vec<_>>(), files.iter().map(|(n, _)| *n).collect::<Vec<_>>());
        assert_eq!(back.get("trace.jsonl"), Some(&b"{\"step\":0}\n"[..]));
        assert_eq!(unpack_one(&bytes, "result.json", "t").unwrap().unwrap(), b"{\"r\":1}");
        assert_eq!(unpack_one(&bytes, "nope", "t").unwrap(), None);
        let mut pieces = Vec::new();
        assert_eq!(unpack_chunks(&bytes, "trace.jsonl", "t", &mut |p| pieces.extend_from_slice(p)).unwrap(), Some(11));
        assert_eq!(pieces, b"{\"step\":0}\n");
        // A reader that stops after the first piece gets no more.
        let big = vec![b'x'; 300_000];
        let bytes = pack(&[("result.json", b"{}"), ("trace.jsonl", &big)]).unwrap();
        let mut calls = 0;
        let got = unpack_pieces(&bytes, "trace.jsonl", "t", &mut |_| {
            calls += 1;
            false
        })
        .unwrap();
        assert_eq!((calls, got.is_some_and(|n| n > 0 && n < 300_000)), (1, true));
        assert_eq!(unpack_pieces(&bytes, "nope", "t", &mut |_| true).unwrap(), None);
    }

    #[test]
    fn the_first_file_is_read_without_inflating_the_rest_and_any_other_shape_the_long_way() {
        let gz = |raw: &[u8]| {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            std::io::Write::write_all(&mut gz, raw).unwrap();
            gz.finish().unwrap()
        };
        let rest = vec![b'y'; 200_000];
        for n in [0usize, 1, 511, 512, 513, 4096, 40_000, 300_000] {
            let result: Vec<u8> = (0..n).map(|i| b"{}\"ab x"[i % 7]).collect();
            let bytes = pack(&[("result.json", &result), ("trace.jsonl", &rest)]).unwrap();
            assert_eq!(first_file(&bytes, "result.json", UNPACKED_LIMIT).as_deref(), Some(&result[..]), "{n} bytes");
            assert_eq!(unpack_one(&bytes, "result.json", "t").unwrap().unwrap(), result, "{n} bytes");
            let capped = first_file(&bytes, "result.json", 100).unwrap();
            assert_eq!(capped, result[..n.min(100)], "{n} bytes, capped");
            // Not the first file: the pack is walked, and still found.
            assert_eq!(first_file(&bytes, "trace.jsonl", UNPACKED_LIMIT), None);
            assert_eq!(unpack_one(&bytes, "trace.jsonl", "t").unwrap().unwrap(), rest);
            // Cut short: no fast answer (the walk then reads what there is).
            let cut = &bytes[..20];
            assert_eq!(first_file(cut, "result.json", UNPACKED_LIMIT), None, "{n} bytes, cut");
        }
        // A header that does not check out, or a gzip header with a name, is walked.
        let mut header = tar::Header::new_gnu();
        header.set_path("result.json").unwrap();
        header.set_size(2);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        let mut raw = header.as_bytes().to_vec();
        raw.extend_from_slice(b"{}");
        raw.resize(512 * 4, 0);
        assert_eq!(first_file(&gz(&raw), "result.json", UNPACKED_LIMIT).as_deref(), Some(&b"{}"[..]));
        // Claiming half a gigabyte and holding two bytes: nothing is made of the claim.
        let mut claims = header.clone();
        claims.set_size(1 << 29);
        claims.set_cksum();
        let mut lying = claims.as_bytes().to_vec();
        lying.extend_from_slice(b"{}");
        assert_eq!(first_file(&gz(&lying), "result.json", UNPACKED_LIMIT), None, "a size it does not hold");
        raw[0] = b'R';
        assert_eq!(first_file(&gz(&raw), "result.json", UNPACKED_LIMIT), None, "a bad checksum");
        assert_eq!(unpack_one(&gz(&raw), "result.json", "t").unwrap_err().kind(), ErrorKind::Corrupt);
        let named = flate2::GzBuilder::new().filename("p.tar");
        let mut enc = named.write(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut enc, &pack_raw(&[("result.json", b"{}")])).unwrap();
        let named = enc.finish().unwrap();
        assert_eq!(first_file(&named, "result.json", UNPACKED_LIMIT), None);
        assert_eq!(unpack_one(&named, "result.json", "t").unwrap().unwrap(), b"{}");
    }

    /// The tar `pack` would gzip.
    fn pack_raw(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&pack(files).unwrap()[..]).read_to_end(&mut back).unwrap();
        back
    }

    #[test]
    fn what_is_not_a_pack_or_escapes_it_is_corrupt() {
        let e = unpack(b"not gzip", "tasks/t1.tar.gz").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Corrupt);
        assert!(e.to_string().contains("tasks/t1.tar.gz"), "{e}");
        assert!(pack(&[("../x", b"")]).is_err());
        // A tar whose entry climbs out, made by hand (the builder refuses `..`).
        let mut header = tar::Header::new_gnu();
        header.as_gnu_mut().unwrap().name[..4].copy_from_slice(b"../x");
        header.set_size(0);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        let mut raw = header.as_bytes().to_vec();
        raw.extend_from_slice(&[0u8; 1024]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &raw).unwrap();
        let e = unpack(&gz.finish().unwrap(), "p").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
    }

    #[test]
    fn packs_are_gzip_any_tool_opens_and_the_compressor_is_reused_cleanly() {
        use std::io::Read as _;
        for n in [0usize, 10, 100_000, 3_000_000] {
            let data: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
            let packed = pack(&[("trace.jsonl", &data)]).unwrap();
            let mut tar = Vec::new();
            flate2::read::GzDecoder::new(&packed[..]).read_to_end(&mut tar).unwrap();
            assert_eq!(unpack(&packed, "t").unwrap().get("trace.jsonl").unwrap(), &data[..], "{n} bytes");
        }
    }

    #[test]
    fn pack_paths_name_their_task() {
        assert_eq!(task_of_pack("tasks/t1.tar.gz"), Some("t1"));
        assert_eq!(task_of_pack("tasks/t1/result.json"), None);
        assert_eq!(task_of_pack("tasks/.tar.gz"), None);
        assert_eq!(task_of_pack("jobs/j1/attempt-1/tasks/t1.tar.gz"), None);
    }
}
