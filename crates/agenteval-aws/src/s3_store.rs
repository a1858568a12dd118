//! `BundleStore` on S3: `s3://bucket/prefix/<run_id>/<path>`, the same layout as on disk.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agenteval_core::traits::{Appender, BundleStore, check_bundle_path, range_of};
use agenteval_core::{Error, ErrorKind, Result, RunId};
use async_trait::async_trait;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, CompletedMultipartUpload, CompletedPart};

use crate::sdk::{AwsClients, classify, status_of};

/// Objects above this size are uploaded in parts.
const MULTIPART_THRESHOLD: usize = 16 * 1024 * 1024;
/// Part size for multipart uploads (S3's minimum is 5 MiB).
const PART_SIZE: usize = 8 * 1024 * 1024;
/// How often a streamed file (a trace) is rewritten while it grows. S3 cannot append, so a
/// worker killed on Fargate loses at most this much of its trace.
const APPEND_FLUSH: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct S3BundleStore {
    clients: Arc<AwsClients>,
    bucket: String,
    /// Key prefix without leading or trailing `/` (may be empty).
    prefix: String,
}

/// Splits `s3://bucket/some/prefix` into bucket and prefix.
pub fn parse_s3_uri(uri: &str) -> Result<(String, String)> {
    let rest = uri.strip_prefix("s3://").ok_or_else(|| Error::invalid(format!("`{uri}` is not an s3:// URI")))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(Error::invalid(format!("`{uri}` names no bucket")));
    }
    Ok((bucket.to_string(), prefix.trim_matches('/').to_string()))
}

impl S3BundleStore {
    pub fn new(clients: Arc<AwsClients>, bucket: impl Into<String>, prefix: impl Into<String>) -> Self {
        S3BundleStore { clients, bucket: bucket.into(), prefix: prefix.into().trim_matches('/').to_string() }
    }

    /// A store for a bundle root URI (`s3://bucket/prefix`).
    pub fn from_uri(clients: Arc<AwsClients>, uri: &str) -> Result<Self> {
        let (bucket, prefix) = parse_s3_uri(uri)?;
        Ok(Self::new(clients, bucket, prefix))
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    fn run_prefix(&self, run: &RunId) -> String {
        if self.prefix.is_empty() { format!("{run}/") } else { format!("{}/{run}/", self.prefix) }
    }

    /// `<prefix>/.shared/<key>`: beside the runs, never one of them.
    fn shared_key(&self, key: &str) -> Result<String> {
        check_bundle_path(key)?;
        let base = if self.prefix.is_empty() { String::new() } else { format!("{}/", self.prefix) };
        Ok(format!("{base}{}/{key}", agenteval_core::traits::SHARED_FOLDER))
    }

    fn key(&self, run: &RunId, path: &str) -> Result<String> {
        check_bundle_path(path)?;
        Ok(format!("{}{path}", self.run_prefix(run)))
    }

    async fn put_multipart(&self, key: &str, bytes: &[u8]) -> Result<()> {
        let mut upload = Multipart::start(self, key).await?;
        let result: Result<()> = async {
            for chunk in bytes.chunks(PART_SIZE) {
                upload.send_part(chunk).await?;
            }
            upload.complete(bytes.len() as u64).await
        }
        .await;
        if result.is_err() {
            upload.abort().await;
        }
        result
    }

    /// One object's bytes.
    async fn get_key(&self, key: &str) -> Result<Vec<u8>> {
        let what = format!("reading s3://{}/{key}", self.bucket);
        let out = self.clients.s3.get_object().bucket(&self.bucket).key(key).send().await.map_err(|e| {
            if e.as_service_error().is_some_and(|s| s.is_no_such_key()) {
                Error::not_found(format!("{what}: no such object"))
            } else {
                classify(&what, e)
            }
        })?;
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| Error::with_source(ErrorKind::Transient, format!("{what}: {e}"), e))?;
        Ok(body.into_bytes().to_vec())
    }

    /// Every object under `prefix`: full keys (with `delimiter`, the common prefixes instead),
    /// sorted, across as many ListObjectsV2 pages as there are.
    async fn list_keys(&self, prefix: &str, delimiter: Option<&str>) -> Result<Vec<String>> {
        Ok(self.list_objects(prefix, delimiter).await?.into_iter().map(|(k, _)| k).collect())
    }

    /// `list_keys` with each object's size, as the listing gives it.
    async fn list_objects(&self, prefix: &str, delimiter: Option<&str>) -> Result<Vec<(String, Option<u64>)>> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .clients
                .s3
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_delimiter(delimiter.map(str::to_string))
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| classify(&format!("listing s3://{}/{prefix}", self.bucket), e))?;
            if delimiter.is_some() {
                out.extend(page.common_prefixes().iter().filter_map(|p| p.prefix().map(|p| (p.to_string(), None))));
            } else {
                out.extend(
                    page.contents()
                        .iter()
                        .filter_map(|o| o.key().map(|k| (k.to_string(), o.size().map(|s| s.max(0) as u64)))),
                );
            }
            match page.next_continuation_token() {
                Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_string()),
                _ => break,
            }
        }
        out.sort();
        Ok(out)
    }

    /// The keys of `key`'s parts (`<key>.parts/000001`, …), in order.
    async fn part_keys(&self, key: &str) -> Result<Vec<String>> {
        self.list_keys(&format!("{key}.parts/"), None).await
    }

    /// Deletes `key`'s parts.
    async fn delete_parts(&self, key: &str) -> Result<()> {
        for p in self.part_keys(key).await? {
            self.clients
                .s3
                .delete_object()
                .bucket(&self.bucket)
                .key(&p)
                .send()
                .await
                .map_err(|e| classify(&format!("deleting s3://{}/{p}", self.bucket), e))?;
        }
        Ok(())
    }

    async fn put_key(&self, key: &str, bytes: &[u8]) -> Result<()> {
        if bytes.len() > MULTIPART_THRESHOLD {
            return self.put_multipart(key, bytes).await;
        }
        self.clients
            .s3
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .checksum_algorithm(ChecksumAlgorithm::Crc32)
            .body(ByteStream::from(bytes.to_vec()))
            .send()
            .await
            .map_err(|e| classify(&format!("writing s3://{}/{key}", self.bucket), e))?;
        Ok(())
    }
}

#[async_trait]
impl BundleStore for S3BundleStore {
    fn bundle_uri(&self, run: &RunId) -> String {
        format!("s3://{}/{}", self.bucket, self.run_prefix(run).trim_end_matches('/'))
    }

    /// A server-side copy, then the source deleted: no bytes pass through this process.
    async fn rename(&self, run: &RunId, from: &str, to: &str) -> Result<()> {
        let (src, dst) = (self.key(run, from)?, self.key(run, to)?);
        self.clients
            .s3
            .copy_object()
            .bucket(&self.bucket)
            .copy_source(format!("{}/{src}", self.bucket))
            .key(&dst)
            .send()
            .await
            .map_err(|e| classify(&format!("copying s3://{}/{src} to {dst}", self.bucket), e))?;
        self.clients
            .s3
            .delete_object()
            .bucket(&self.bucket)
            .key(&src)
            .send()
            .await
            .map_err(|e| classify(&format!("deleting s3://{}/{src}", self.bucket), e))?;
        Ok(())
    }

    async fn delete(&self, run: &RunId, path: &str) -> Result<()> {
        let key = self.key(run, path)?;
        // S3 answers a delete of a missing key with success, as the trait wants.
        self.clients
            .s3
            .delete_object()
            .bucket(&self.bucket)
            .key(&key)
            .send()
            .await
            .map_err(|e| classify(&format!("deleting s3://{}/{key}", self.bucket), e))?;
        Ok(())
    }

    async fn put(&self, run: &RunId, path: &str, bytes: &[u8]) -> Result<()> {
        let key = self.key(run, path)?;
        self.put_key(&key, bytes).await
    }

    async fn get_shared(&self, key: &str) -> Result<Vec<u8>> {
        self.get_key(&self.shared_key(key)?).await
    }

    async fn put_shared(&self, key: &str, bytes: &[u8]) -> Result<()> {
        self.put_key(&self.shared_key(key)?, bytes).await
    }

    async fn get(&self, run: &RunId, path: &str) -> Result<Vec<u8>> {
        let key = self.key(run, path)?;
        match self.get_key(&key).await {
            // A run-long file whose controller did not finish it is its parts, joined.
            Err(e) if e.kind() == ErrorKind::NotFound && PARTED.contains(&path) => {
                let parts = self.part_keys(&key).await?;
                if parts.is_empty() {
                    return Err(e);
                }
                let mut out = Vec::new();
                for p in parts {
                    out.extend(self.get_key(&p).await?);
                }
                Ok(out)
            }
            other => other,
        }
    }

    /// A ranged `GetObject` (parted files fall back to `get`).
    async fn read_range(&self, run: &RunId, path: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        if PARTED.contains(&path) {
            return Ok(range_of(&self.get(run, path).await?, offset, len).to_vec());
        }
        let key = self.key(run, path)?;
        if len == 0 {
            return if self.exists(run, path).await? {
                Ok(Vec::new())
            } else {
                Err(Error::not_found(format!("reading s3://{}/{key}: no such object", self.bucket)))
            };
        }
        let what = format!("reading s3://{}/{key}", self.bucket);
        let range = format!("bytes={offset}-{}", offset.saturating_add(len - 1));
        let out = match self.clients.s3.get_object().bucket(&self.bucket).key(&key).range(range).send().await {
            Ok(out) => out,
            // At or past the end of the object.
            Err(e) if status_of(&e) == Some(416) => return Ok(Vec::new()),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => {
                return Err(Error::not_found(format!("{what}: no such object")));
            }
            Err(e) => return Err(classify(&what, e)),
        };
        let bytes = out
            .body
            .collect()
            .await
            .map_err(|e| Error::with_source(ErrorKind::Transient, format!("{what}: {e}"), e))?;
        let mut bytes = bytes.into_bytes().to_vec();
        // A server that ignores the range sends the whole object.
        bytes.truncate(len.min(usize::MAX as u64) as usize);
        Ok(bytes)
    }

    /// Streams the object's body a piece at a time, so that a 60 MiB trace costs its pieces,
    /// not its size, in memory (parted files fall back to `get`).
    async fn read_chunks(&self, run: &RunId, path: &str, f: &mut (dyn for<'b> FnMut(&'b [u8]) + Send)) -> Result<u64> {
        if PARTED.contains(&path) {
            let bytes = self.get(run, path).await?;
            f(&bytes);
            return Ok(bytes.len() as u64);
        }
        let key = self.key(run, path)?;
        let what = format!("reading s3://{}/{key}", self.bucket);
        let out = self.clients.s3.get_object().bucket(&self.bucket).key(&key).send().await.map_err(|e| {
            if e.as_service_error().is_some_and(|s| s.is_no_such_key()) {
                Error::not_found(format!("{what}: no such object"))
            } else {
                classify(&what, e)
            }
        })?;
        let mut body = out.body;
        let mut total = 0u64;
        while let Some(piece) =
            body.try_next().await.map_err(|e| Error::with_source(ErrorKind::Transient, format!("{what}: {e}"), e))?
        {
            total += piece.len() as u64;
            f(&piece);
        }
        Ok(total)
    }

    async fn exists(&self, run: &RunId, path: &str) -> Result<bool> {
        let key = self.key(run, path)?;
        match self.clients.s3.head_object().bucket(&self.bucket).key(&key).send().await {
            Ok(_) => Ok(true),
            Err(e) if status_of(&e) == Some(404) => Ok(false),
            Err(e) => Err(classify(&format!("checking s3://{}/{key}", self.bucket), e)),
        }
    }

    async fn list(&self, run: &RunId, prefix: &str) -> Result<Vec<String>> {
        let base = self.run_prefix(run);
        let keys = self.list_keys(&format!("{base}{prefix}"), None).await?;
        Ok(keys.iter().filter_map(|k| k.strip_prefix(&base)).map(str::to_string).collect())
    }

    async fn list_sized(&self, run: &RunId, prefix: &str) -> Result<Vec<(String, Option<u64>)>> {
        let base = self.run_prefix(run);
        let keys = self.list_objects(&format!("{base}{prefix}"), None).await?;
        Ok(keys.into_iter().filter_map(|(k, size)| k.strip_prefix(&base).map(|p| (p.to_string(), size))).collect())
    }

    async fn join_parts(&self, run: &RunId) -> Result<()> {
        for path in PARTED {
            let key = self.key(run, path)?;
            let parts = self.part_keys(&key).await?;
            if parts.is_empty() {
                continue;
            }
            let mut whole = Vec::new();
            for p in &parts {
                whole.extend(self.get_key(p).await?);
            }
            self.put_key(&key, &whole).await?;
            self.delete_parts(&key).await?;
        }
        Ok(())
    }

    async fn list_runs(&self) -> Result<Vec<RunId>> {
        let base = if self.prefix.is_empty() { String::new() } else { format!("{}/", self.prefix) };
        let mut out: Vec<RunId> = self
            .list_keys(&base, Some("/"))
            .await?
            .iter()
            .filter_map(|p| p.strip_prefix(&base).map(|k| k.trim_end_matches('/')).and_then(|n| n.parse().ok()))
            .collect();
        out.sort();
        Ok(out)
    }

    async fn open_writer(&self, run: &RunId, path: &str) -> Result<Option<Box<dyn Appender>>> {
        let key = self.key(run, path)?;
        Ok(Some(Box::new(S3Writer { store: self.clone(), key, buf: Vec::new(), upload: None, size: 0 })))
    }

    async fn open_appender(&self, run: &RunId, path: &str) -> Result<Box<dyn Appender>> {
        let key = self.key(run, path)?;
        if PARTED.contains(&path) {
            // A file that grows for the whole run goes up as numbered parts of what is new, and
            // is joined once at the end: rewriting it every second would cost its whole size
            // each time. Parts a crashed controller left are gone first; `get` has joined them.
            self.delete_parts(&key).await?;
            return Ok(Box::new(S3PartAppender {
                store: self.clone(),
                key,
                buf: Vec::new(),
                sent: 0,
                parts: 0,
                last_flush: Instant::now(),
            }));
        }
        // No request yet: the first flush (or `finish`) replaces whatever an earlier attempt
        // left, which is what truncating a file does, one PUT cheaper per task.
        Ok(Box::new(S3Appender { store: self.clone(), key, buf: Vec::new(), last_flush: Instant::now(), dirty: true }))
    }
}

/// A multipart upload under way: its parts appear as the object at `complete`, never before.
struct Multipart {
    store: S3BundleStore,
    key: String,
    upload_id: String,
    parts: Vec<CompletedPart>,
}

impl Multipart {
    async fn start(store: &S3BundleStore, key: &str) -> Result<Multipart> {
        let created = store
            .clients
            .s3
            .create_multipart_upload()
            .bucket(&store.bucket)
            .key(key)
            .checksum_algorithm(ChecksumAlgorithm::Crc32)
            .send()
            .await
            .map_err(|e| classify(&format!("uploading s3://{}/{key}", store.bucket), e))?;
        let upload_id = created.upload_id().ok_or_else(|| Error::internal("S3 returned no upload id"))?.to_string();
        Ok(Multipart { store: store.clone(), key: key.to_string(), upload_id, parts: Vec::new() })
    }

    fn what(&self) -> String {
        format!("uploading s3://{}/{}", self.store.bucket, self.key)
    }

    /// Uploads the next part (every part but the last must be at least 5 MiB).
    async fn send_part(&mut self, bytes: &[u8]) -> Result<()> {
        let n = self.parts.len() as i32 + 1;
        let part = self
            .store
            .clients
            .s3
            .upload_part()
            .bucket(&self.store.bucket)
            .key(&self.key)
            .upload_id(&self.upload_id)
            .part_number(n)
            .checksum_algorithm(ChecksumAlgorithm::Crc32)
            .body(ByteStream::from(bytes.to_vec()))
            .send()
            .await
            .map_err(|e| classify(&self.what(), e))?;
        self.parts.push(
            CompletedPart::builder()
                .part_number(n)
                .set_e_tag(part.e_tag().map(str::to_string))
                .set_checksum_crc32(part.checksum_crc32().map(str::to_string))
                .build(),
        );
        Ok(())
    }

    /// Makes the parts the object, `size` bytes in all.
    async fn complete(&mut self, size: u64) -> Result<()> {
        let s3 = &self.store.clients.s3;
        let done = s3
            .complete_multipart_upload()
            .bucket(&self.store.bucket)
            .key(&self.key)
            .upload_id(&self.upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder().set_parts(Some(std::mem::take(&mut self.parts))).build(),
            )
            .send()
            .await;
        match done {
            Ok(_) => Ok(()),
            // Some emulators answer 200 with a differently named XML root the SDK cannot
            // parse; the upload did complete, which the object's size confirms.
            Err(e) if status_of(&e) == Some(200) => {
                let head = s3
                    .head_object()
                    .bucket(&self.store.bucket)
                    .key(&self.key)
                    .send()
                    .await
                    .map_err(|e| classify(&self.what(), e))?;
                if head.content_length() == Some(size as i64) { Ok(()) } else { Err(classify(&self.what(), e)) }
            }
            Err(e) => Err(classify(&self.what(), e)),
        }
    }

    /// Drops the parts sent: no billable orphans are left behind.
    async fn abort(self) {
        let s3 = &self.store.clients.s3;
        let _ = s3
            .abort_multipart_upload()
            .bucket(&self.store.bucket)
            .key(&self.key)
            .upload_id(&self.upload_id)
            .send()
            .await;
    }
}

/// A file written in pieces (`open_writer`): up to one part is held; past it the file goes up
/// as a multipart upload, part by part, and appears whole at `finish`. A small file is one PUT.
/// Dropped unfinished, the upload is aborted.
struct S3Writer {
    store: S3BundleStore,
    key: String,
    buf: Vec<u8>,
    upload: Option<Multipart>,
    size: u64,
}

#[async_trait]
impl Appender for S3Writer {
    async fn append(&mut self, bytes: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(bytes);
        self.size += bytes.len() as u64;
        if self.buf.len() >= PART_SIZE {
            if self.upload.is_none() {
                self.upload = Some(Multipart::start(&self.store, &self.key).await?);
            }
            let part = std::mem::take(&mut self.buf);
            let upload = self.upload.as_mut().expect("started above");
            upload.send_part(&part).await?;
        }
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<()> {
        let Some(mut upload) = self.upload.take() else {
            return self.store.put_key(&self.key, &self.buf).await;
        };
        let result = async {
            if !self.buf.is_empty() {
                upload.send_part(&self.buf).await?;
            }
            upload.complete(self.size).await
        }
        .await;
        if result.is_err() {
            upload.abort().await;
        }
        result
    }
}

impl Drop for S3Writer {
    fn drop(&mut self) {
        if let Some(upload) = self.upload.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(upload.abort());
        }
    }
}

/// Files that grow for the whole run, appended as parts (see `S3PartAppender`).
const PARTED: &[&str] = &[agenteval_core::layout::SPANS, agenteval_core::layout::TELEMETRY];

/// A run-long file: each flush uploads only what is new as the next part
/// (`<key>.parts/000001`, …); `finish` writes the whole file once and deletes the parts.
struct S3PartAppender {
    store: S3BundleStore,
    key: String,
    buf: Vec<u8>,
    /// Bytes of `buf` already in parts.
    sent: usize,
    parts: u32,
    last_flush: Instant,
}

#[async_trait]
impl Appender for S3PartAppender {
    async fn append(&mut self, bytes: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(bytes);
        if self.last_flush.elapsed() >= APPEND_FLUSH && self.buf.len() > self.sent {
            let part = format!("{}.parts/{:06}", self.key, self.parts + 1);
            self.store.put_key(&part, &self.buf[self.sent..]).await?;
            self.parts += 1;
            self.sent = self.buf.len();
            self.last_flush = Instant::now();
        }
        Ok(())
    }

    async fn finish(self: Box<Self>) -> Result<()> {
        self.store.put_key(&self.key, &self.buf).await?;
        self.store.delete_parts(&self.key).await
    }
}

/// Buffers a growing object and rewrites it at most once per `APPEND_FLUSH` and on finish.
struct S3Appender {
    store: S3BundleStore,
    key: String,
    buf: Vec<u8>,
    last_flush: Instant,
    dirty: bool,
}

#[async_trait]
impl Appender for S3Appender {
    async fn append(&mut self, bytes: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(bytes);
        self.dirty = true;
        if self.last_flush.elapsed() >= APPEND_FLUSH {
            self.store.put_key(&self.key, &self.buf).await?;
            self.last_flush = Instant::now();
            self.dirty = false;
        }
        Ok(())
    }

    async fn finish(self: Box<Self>) -> Result<()> {
        if self.dirty {
            self.store.put_key(&self.key, &self.buf).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_uris_split_into_bucket_and_prefix() {
        assert_eq!(parse_s3_uri("s3://b/p/q/").unwrap(), ("b".into(), "p/q".into()));
        assert_eq!(parse_s3_uri("s3://b").unwrap(), ("b".into(), "".into()));
        assert!(parse_s3_uri("s3:///x").is_err());
        assert!(parse_s3_uri("/local").is_err());
    }

    /// How the canned S3 answers `CompleteMultipartUpload`, and what HEAD says afterwards.
    #[derive(Clone, Copy, PartialEq)]
    enum Complete {
        /// A well-formed result, as S3 sends it.
        WellFormed,
        /// 200 with a body the SDK cannot parse (as moto sends it); HEAD gives the right size.
        Unparseable,
        /// The same, but HEAD gives another size: the upload cannot be confirmed.
        UnparseableWrongSize,
    }

    /// An S3 client whose every request gets a canned answer; returns the store and the log of
    /// requests (`METHOD ?query`).
    fn canned(mode: Complete, size: usize) -> (S3BundleStore, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = log.clone();
        let http = aws_smithy_http_client::test_util::infallible_client_fn(move |req| {
            let query = req.uri().query().unwrap_or("").to_string();
            let method = req.method().to_string();
            seen.lock().unwrap().push(format!("{method} ?{query}"));
            let ok = |body: &str| http::Response::builder().status(200).body(body.to_string()).unwrap();
            match method.as_str() {
                "POST" if query.contains("uploads") => ok(
                    "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>U1</UploadId></InitiateMultipartUploadResult>",
                ),
                "PUT" => http::Response::builder().status(200).header("ETag", "\"etag\"").body(String::new()).unwrap(),
                "POST" => match mode {
                    Complete::WellFormed => ok(
                        "<CompleteMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><ETag>\"e-3\"</ETag></CompleteMultipartUploadResult>",
                    ),
                    _ => ok("<SomethingElse/>"),
                },
                "HEAD" => {
                    let len = if mode == Complete::UnparseableWrongSize { size - 1 } else { size };
                    http::Response::builder()
                        .status(200)
                        .header("Content-Length", len.to_string())
                        .body(String::new())
                        .unwrap()
                }
                "DELETE" => http::Response::builder().status(204).body(String::new()).unwrap(),
                _ => http::Response::builder().status(400).body(String::new()).unwrap(),
            }
        });
        let sdk = aws_config::SdkConfig::builder()
            .http_client(http)
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url("http://s3.canned")
            .credentials_provider(aws_sdk_s3::config::SharedCredentialsProvider::new(
                aws_sdk_s3::config::Credentials::new("a", "b", None, None, "test"),
            ))
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build();
        (S3BundleStore::new(AwsClients::from_sdk_config(&sdk), "b", "p"), log)
    }

    #[tokio::test]
    async fn a_multipart_upload_is_confirmed_by_s3_or_by_the_object_size() {
        let size = MULTIPART_THRESHOLD + 1;
        let bytes = vec![7u8; size];
        let run = RunId::new();
        let count = |log: &[String], what: &str| log.iter().filter(|l| l.starts_with(what)).count();

        // S3's own answer: no size check needed.
        let (store, log) = canned(Complete::WellFormed, size);
        store.put(&run, "big.bin", &bytes).await.expect("a well-formed completion");
        let log = log.lock().unwrap().clone();
        assert_eq!(count(&log, "PUT"), size.div_ceil(PART_SIZE), "{log:?}");
        assert_eq!((count(&log, "HEAD"), count(&log, "DELETE")), (0, 0), "{log:?}");

        // An answer the SDK cannot parse, but the object is there with its size.
        let (store, log) = canned(Complete::Unparseable, size);
        store.put(&run, "big.bin", &bytes).await.expect("confirmed by the size");
        let log = log.lock().unwrap().clone();
        assert_eq!((count(&log, "HEAD"), count(&log, "DELETE")), (1, 0), "{log:?}");

        // The size does not match: an error, and the parts are aborted.
        let (store, log) = canned(Complete::UnparseableWrongSize, size);
        let err = store.put(&run, "big.bin", &bytes).await.unwrap_err();
        assert!(err.to_string().contains("uploading s3://b/p/"), "{err}");
        let log = log.lock().unwrap().clone();
        assert_eq!((count(&log, "HEAD"), count(&log, "DELETE")), (1, 1), "{log:?}");
    }
}
