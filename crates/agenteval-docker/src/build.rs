//! Building a task's image from its `environment/` folder, once per distinct content: the tag
//! is a hash of the folder (its Dockerfile after the base-image override, and every file), so
//! tasks, repetitions and runs that share a folder share the image; concurrent workers wait on
//! one lock file per tag, and the one that finds the image already built reuses it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agenteval_core::{Error, ErrorKind, Result, RunId};
use bollard::Docker;
use bollard::query_parameters::BuildImageOptionsBuilder;
use futures::StreamExt;
use sha2::{Digest as _, Sha256};

use crate::LABEL_MANAGED;

/// Build output lines an error quotes: the last ones, where the failure is.
const ERROR_LINES: usize = 15;
/// Largest build context sent to the engine.
const MAX_CONTEXT_BYTES: u64 = 512 << 20;

/// One folder's image: its tag, and the context to build it from.
#[derive(Debug)]
pub struct ImageBuild {
    pub tag: String,
    dockerfile: Vec<u8>,
    files: Vec<(PathBuf, PathBuf)>,
}

/// `dockerfile` with the image of every `FROM` that does not name an earlier stage replaced by
/// `base` (a mirror, or a local image on a machine without a registry).
pub fn rebase(dockerfile: &str, base: &str) -> String {
    let mut stages: Vec<String> = Vec::new();
    let mut out = String::with_capacity(dockerfile.len());
    for line in dockerfile.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first().is_some_and(|w| w.eq_ignore_ascii_case("FROM")) {
            let mut rest: Vec<&str> = words[1..].to_vec();
            let flags: Vec<&str> = rest.iter().take_while(|w| w.starts_with("--")).copied().collect();
            rest.drain(..flags.len());
            if let Some(image) = rest.first().copied() {
                let alias = match rest.as_slice() {
                    [_, as_, name, ..] if as_.eq_ignore_ascii_case("as") => Some(name.to_string()),
                    _ => None,
                };
                let image = if stages.iter().any(|s| s.eq_ignore_ascii_case(image)) { image } else { base };
                let mut parts = vec!["FROM"];
                parts.extend(flags);
                parts.push(image);
                let alias_words;
                if let Some(a) = &alias {
                    alias_words = ["AS", a.as_str()];
                    parts.extend(alias_words);
                    stages.push(a.clone());
                }
                out.push_str(&parts.join(" "));
                out.push('\n');
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The files of `dir`, sorted, as (absolute path, path in the context).
fn files_of(dir: &Path) -> Result<Vec<(PathBuf, PathBuf)>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries =
            std::fs::read_dir(&d).map_err(|e| Error::io(format!("reading the task's folder {}", d.display()), e))?;
        for e in entries {
            let e = e.map_err(|e| Error::io(format!("reading {}", d.display()), e))?;
            let p = e.path();
            let t = e.file_type().map_err(|e| Error::io(format!("reading {}", p.display()), e))?;
            if t.is_dir() {
                todo.push(p);
            } else if t.is_file() {
                let rel = p.strip_prefix(dir).expect("below the folder").to_path_buf();
                out.push((p, rel));
            }
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// The content hash of a build context: the Dockerfile as it will be built and every other file
/// with its path and mode.
pub fn context_hash(dockerfile: &[u8], files: &[(PathBuf, PathBuf)]) -> Result<String> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut h = Sha256::new();
    h.update(b"Dockerfile\0");
    h.update((dockerfile.len() as u64).to_le_bytes());
    h.update(dockerfile);
    for (abs, rel) in files {
        if rel == Path::new("Dockerfile") {
            continue;
        }
        let bytes = std::fs::read(abs).map_err(|e| Error::io(format!("reading {}", abs.display()), e))?;
        let mode = std::fs::metadata(abs).map(|m| m.permissions().mode()).unwrap_or(0o644);
        h.update(rel.to_string_lossy().as_bytes());
        h.update(b"\0");
        h.update(mode.to_le_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(hex::encode(h.finalize()))
}

impl ImageBuild {
    pub fn new(context: &Path, base_image: Option<&str>) -> Result<Self> {
        let path = context.join("Dockerfile");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::io(format!("reading the task's Dockerfile {}", path.display()), e))?;
        let dockerfile = match base_image {
            Some(base) => rebase(&text, base),
            None => text,
        }
        .into_bytes();
        let files = files_of(context)?;
        let hash = context_hash(&dockerfile, &files)?;
        Ok(ImageBuild { tag: format!("agenteval-env:{}", &hash[..16]), dockerfile, files })
    }

    /// The context as a tar stream, the Dockerfile replaced by the one to build.
    fn tar(&self) -> Result<Vec<u8>> {
        let mut b = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(self.dockerfile.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        b.append_data(&mut header, "Dockerfile", self.dockerfile.as_slice())
            .map_err(|e| Error::io("packing the build context", e))?;
        let mut total = self.dockerfile.len() as u64;
        for (abs, rel) in &self.files {
            if rel == Path::new("Dockerfile") {
                continue;
            }
            total += std::fs::metadata(abs).map(|m| m.len()).unwrap_or(0);
            if total > MAX_CONTEXT_BYTES {
                return Err(Error::invalid(format!(
                    "the task's environment folder holds more than {} MiB",
                    MAX_CONTEXT_BYTES >> 20
                )));
            }
            b.append_path_with_name(abs, rel).map_err(|e| Error::io(format!("packing {}", abs.display()), e))?;
        }
        b.into_inner().map_err(|e| Error::io("packing the build context", e))
    }

    /// The image, built unless it already is, and what was done (`built in …`, `reused`, or
    /// why it was built again). One build per tag at a time on this machine: workers that need
    /// the same image wait for the first to build it. An image is reused only when its id is
    /// the one agenteval recorded when it built the tag (`records`): a tag that now names
    /// anything else (a container committed over it, an image tagged over it) is built again.
    pub async fn ensure(&self, docker: &Docker, run: &RunId, timeout: Duration) -> Result<(String, String)> {
        let reused = || (self.tag.clone(), format!("image {} reused", self.tag));
        let current = || async { docker.inspect_image(&self.tag).await.ok().and_then(|i| i.id) };
        let recorded = Records::open().and_then(|r| r.get(&self.tag));
        if let (Some(id), Some(want)) = (current().await, &recorded)
            && &id == want
        {
            return Ok(reused());
        }
        let lock = lock_file(&self.tag).await?;
        let recorded = Records::open().and_then(|r| r.get(&self.tag));
        let found = current().await;
        let out = if found.is_some() && found == recorded {
            Ok(reused())
        } else {
            // Not what agenteval built: untagged (the image itself stays, for whoever made it)
            // and built again.
            let why = match (&found, &recorded) {
                (Some(id), Some(want)) => Some(format!("its id {id} is not the {want} agenteval built")),
                (Some(id), None) => Some(format!("agenteval has no record of building it (id {id})")),
                _ => None,
            };
            if why.is_some() {
                let options = bollard::query_parameters::RemoveImageOptionsBuilder::default().noprune(true).build();
                let _ = docker.remove_image(&self.tag, Some(options), None).await;
            }
            let started = std::time::Instant::now();
            let built = tokio::time::timeout(timeout, self.build(docker, run)).await.unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Io,
                    format!("building image {} took more than {} s", self.tag, timeout.as_secs()),
                ))
            });
            let secs = started.elapsed().as_secs_f64();
            match built {
                Ok(()) => {
                    if let (Some(id), Some(records)) = (current().await, Records::open()) {
                        records.put(&self.tag, &id);
                    }
                    let again = why.map(|w| format!(" again: {w}")).unwrap_or_default();
                    Ok((self.tag.clone(), format!("image {} built in {secs:.1} s{again}", self.tag)))
                }
                Err(e) => Err(e),
            }
        };
        drop(lock);
        out
    }

    async fn build(&self, docker: &Docker, run: &RunId) -> Result<()> {
        let body = self.tar()?;
        let labels = std::collections::HashMap::from([
            (LABEL_MANAGED.to_string(), "1".to_string()),
            ("agenteval.built_for".to_string(), run.to_string()),
        ]);
        let options = BuildImageOptionsBuilder::default().t(&self.tag).rm(true).forcerm(true).labels(&labels).build();
        let mut stream = docker.build_image(options, None, Some(bollard::body_full(body.into())));
        let mut lines: std::collections::VecDeque<String> = std::collections::VecDeque::new();
        let keep = |text: &str, lines: &mut std::collections::VecDeque<String>| {
            for l in text.lines().map(str::trim_end).filter(|l| !l.is_empty()) {
                if lines.len() == ERROR_LINES {
                    lines.pop_front();
                }
                lines.push_back(l.to_string());
            }
        };
        while let Some(item) = stream.next().await {
            match item {
                Ok(info) => {
                    if let Some(s) = &info.stream {
                        keep(s, &mut lines);
                    }
                    if let Some(e) = info.error_detail.and_then(|d| d.message) {
                        keep(&e, &mut lines);
                        return Err(build_failed(&self.tag, &lines));
                    }
                }
                Err(e) => {
                    keep(&e.to_string(), &mut lines);
                    return Err(build_failed(&self.tag, &lines));
                }
            }
        }
        if docker.inspect_image(&self.tag).await.is_err() {
            return Err(build_failed(&self.tag, &lines));
        }
        Ok(())
    }
}

/// Whether `tag` is an image agenteval made here and its id is still the one it recorded.
pub(crate) async fn is_recorded(docker: &Docker, tag: &str) -> bool {
    let current = docker.inspect_image(tag).await.ok().and_then(|i| i.id);
    current.is_some() && current == Records::open().and_then(|r| r.get(tag))
}

/// Records `tag`'s current id as agenteval's own (an image it just made).
pub(crate) async fn record(docker: &Docker, tag: &str) {
    if let (Some(id), Some(records)) = (docker.inspect_image(tag).await.ok().and_then(|i| i.id), Records::open()) {
        records.put(tag, &id);
    }
}

/// The ids of the images agenteval built, by tag: one file a tag in a folder of this user's alone
/// (`<tmp>/agenteval-images-<uid>`, mode 0700), so no agent and no other user can vouch for an
/// image.
struct Records {
    dir: PathBuf,
}

impl Records {
    /// The folder, made if needed; `None` when it cannot be trusted (another user's, or open to
    /// others) or made.
    fn open() -> Option<Records> {
        use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
        let uid = nix::unistd::geteuid().as_raw();
        let dir = std::env::temp_dir().join(format!("agenteval-images-{uid}"));
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        let m = std::fs::symlink_metadata(&dir).ok()?;
        (m.is_dir() && m.uid() == uid && m.permissions().mode() & 0o077 == 0).then_some(Records { dir })
    }

    fn path(&self, tag: &str) -> PathBuf {
        self.dir.join(tag.replace([':', '/'], "-"))
    }

    fn get(&self, tag: &str) -> Option<String> {
        std::fs::read_to_string(self.path(tag)).ok().map(|s| s.trim().to_string())
    }

    fn put(&self, tag: &str, id: &str) {
        let path = self.path(tag);
        let tmp = path.with_extension("tmp");
        if std::fs::write(&tmp, id).and_then(|()| std::fs::rename(&tmp, &path)).is_err() {
            tracing::warn!("could not record the id of image {tag}; it will be built again next time");
        }
    }
}

fn build_failed(tag: &str, lines: &std::collections::VecDeque<String>) -> Error {
    let tail: Vec<&str> = lines.iter().map(String::as_str).collect();
    Error::new(ErrorKind::Io, format!("the task's image {tag} did not build:\n{}", tail.join("\n")))
}

/// An exclusive lock on `<tmp>/agenteval-build-<tag>.lock`, held until dropped; taken in a
/// blocking thread (another worker may hold it for a whole build).
async fn lock_file(tag: &str) -> Result<nix::fcntl::Flock<std::fs::File>> {
    let name = format!("agenteval-build-{}.lock", tag.replace([':', '/'], "-"));
    let path = std::env::temp_dir().join(name);
    tokio::task::spawn_blocking(move || {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        let _ = f.flush();
        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| Error::new(ErrorKind::Io, format!("locking {}: {e}", path.display())))
    })
    .await
    .map_err(|e| Error::new(ErrorKind::Internal, format!("the build lock's thread: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_image_replaces_every_from_but_a_stage() {
        let d = "FROM rust:1 AS build\nRUN make\nFROM --platform=linux/amd64 debian:bookworm-slim\nCOPY --from=build /x /x\nfrom build as again\n";
        let r = rebase(d, "local/base");
        assert_eq!(
            r,
            "FROM local/base AS build\nRUN make\nFROM --platform=linux/amd64 local/base\nCOPY --from=build /x /x\nFROM build AS again\n"
        );
    }

    #[test]
    fn the_tag_follows_the_content_not_the_folder() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for d in [&a, &b] {
            std::fs::write(d.path().join("Dockerfile"), "FROM x\nCOPY f /f\n").unwrap();
            std::fs::write(d.path().join("f"), "same").unwrap();
        }
        let tag = |d: &Path| ImageBuild::new(d, None).unwrap().tag;
        assert_eq!(tag(a.path()), tag(b.path()), "two folders with one content share an image");
        std::fs::write(b.path().join("f"), "other").unwrap();
        assert_ne!(tag(a.path()), tag(b.path()), "a changed file is another image");
        let rebased = ImageBuild::new(a.path(), Some("y")).unwrap().tag;
        assert_ne!(rebased, tag(a.path()), "another base is another image");
    }
}
