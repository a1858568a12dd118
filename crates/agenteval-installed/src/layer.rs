//! The agent layer: a task's image plus the installed agent, made once by running the install in
//! a container of the image and saving it, tagged by the base image's id and the install's
//! content, and reused by every task, repetition and run on that image. Its time is the task's
//! `setup`, never the agent's.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agenteval_core::config::AgentConfig;
use agenteval_core::environment::{EnvSpec, ExecRequest};
use agenteval_core::model::{AgentFault, TaskSpec};
use agenteval_core::secret::Secret;
use agenteval_core::traits::Environment;
use agenteval_core::{Error, ErrorKind, Result, RunId};
use sha2::{Digest as _, Sha256};

use super::fetch;
use super::presets::{AGENT_DIR, Package, Preset};

/// How long an install may take unless `agent.install_timeout_seconds` says.
pub const DEFAULT_INSTALL_SECONDS: f64 = 1200.0;
/// Where a custom setup's script and files go in the install's container.
const SETUP_DIR: &str = "/installed-agent";
/// The file a layer's install leaves in the image: its key, so a container of the layer (a
/// fleet job in its task's layered image) knows the agent is there.
const MARKER: &str = "/etc/agenteval-agent-layer";

/// A layer that could not be made: the machine's failure (its engine, its disk), or the
/// install's own, which is the agent's fault (`agent.setup`, `agent.version`) and names it.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct LayerError {
    pub error: Error,
    /// Set when the install itself failed, not the machine.
    pub fault: Option<AgentFault>,
}

impl From<Error> for LayerError {
    fn from(error: Error) -> Self {
        LayerError { error, fault: None }
    }
}

/// What installs the agent.
#[derive(Debug, Clone)]
enum Source {
    Preset { preset: &'static Preset, version: String },
    Setup { script: PathBuf, files: Option<PathBuf> },
}

/// One agent layer to make (or find made): what it installs, with what, within what time.
#[derive(Debug, Clone)]
pub struct Layer {
    source: Source,
    env: Vec<(String, String)>,
    timeout: Duration,
}

/// A layer ready: its image, what getting it took, and the install's own output.
#[derive(Debug)]
pub struct Ready {
    pub image: String,
    pub note: String,
    pub output: String,
}

impl Layer {
    /// The layer an agent config asks for: a preset's, or its `setup`'s; none for an agent
    /// installed by nothing.
    pub fn of(config: &AgentConfig) -> Option<Layer> {
        let AgentConfig::Installed { preset, version, setup, setup_files, env, install_timeout_seconds, .. } = config
        else {
            return None;
        };
        let source = match (preset.as_deref().and_then(super::presets::find), setup) {
            (Some(p), _) => Source::Preset { preset: p, version: version.clone().unwrap_or_else(|| p.version.into()) },
            (None, Some(script)) => Source::Setup { script: script.clone(), files: setup_files.clone() },
            (None, None) => return None,
        };
        let secs = install_timeout_seconds.unwrap_or(DEFAULT_INSTALL_SECONDS).clamp(1.0, 86_400.0);
        let env = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        Some(Layer { source, env, timeout: Duration::from_secs_f64(secs) })
    }

    /// `codex 0.171.0`, or `agent.setup`.
    pub fn name(&self) -> String {
        match &self.source {
            Source::Preset { preset, version } => format!("{} {version}", preset.name),
            Source::Setup { .. } => "agent.setup".into(),
        }
    }

    /// What the layer's content is, for its tag: the preset, its version and the install it runs;
    /// or the setup script, its files, its environment (names and values: a changed value may
    /// change the install) and its secrets' names (never their values).
    // Version 2: layers made while containers had their own ENTRYPOINT (`sleep`) kept it.
    pub fn key(&self, secret_names: &[&str]) -> Result<String> {
        let mut h = Sha256::new();
        h.update(format!("agenteval-agent-layer-2\0{}\0", fetch::LAYOUT).as_bytes());
        match &self.source {
            Source::Preset { preset, version } => {
                h.update(format!("preset\0{}\0{version}\0{}\0", preset.name, preset.check).as_bytes());
            }
            Source::Setup { script, files } => {
                let text = std::fs::read(script).map_err(|e| Error::io(format!("reading {}", script.display()), e))?;
                h.update(b"setup\0");
                h.update((text.len() as u64).to_le_bytes());
                h.update(&text);
                if let Some(dir) = files {
                    folder_hash(dir, &mut h)?;
                }
            }
        }
        for (k, v) in &self.env {
            h.update(format!("env\0{k}\0{v}\0").as_bytes());
        }
        // Only a setup gets the secrets.
        if let Source::Setup { .. } = self.source {
            for k in secret_names {
                h.update(format!("secret\0{k}\0").as_bytes());
            }
        }
        Ok(hex::encode(h.finalize()))
    }

    /// Whether the layer can be built ahead of a run (`images build`): a preset's always; a
    /// setup's only when it needs no secrets (those come with the run).
    pub fn buildable_ahead(&self, secrets: usize) -> bool {
        matches!(self.source, Source::Preset { .. }) || secrets == 0
    }

    /// The layer's name on a fleet that runs each task in its own image: the base image's local
    /// tag with the layer's key (`agenteval-env:<hash>-agent-<key>`), known without an engine,
    /// so the controller names it at submit and `images build --push` pushes it as that.
    pub fn fleet_tag(&self, base: &str, secret_names: &[&str]) -> Result<String> {
        let key = self.key(secret_names)?;
        let (repo, tag) = base.rsplit_once(':').unwrap_or((base, "latest"));
        Ok(format!("{repo}:{tag}-agent-{}", &key[..16]))
    }

    /// The task's image with this agent installed: found, or made now (one maker per layer on
    /// this machine; the others wait and reuse it). An `Err` is the task's infrastructure
    /// failure, its message naming the install and its last lines of output.
    pub async fn ensure(
        &self,
        env: &Arc<dyn Environment>,
        run: &RunId,
        task: &TaskSpec,
        attempt: u32,
        spec: &EnvSpec,
        secrets: &[(String, Secret)],
    ) -> Result<Ready, LayerError> {
        let started = Instant::now();
        let Some((base, base_id)) = env.base_image(run, spec).await? else {
            return Err(Error::invalid(format!(
                "an installed agent needs tasks that run in a container, and {} environments have no images",
                env.kind()
            ))
            .into());
        };
        let names: Vec<&str> = secrets.iter().map(|(k, _)| k.as_str()).collect();
        let key = self.key(&names)?;
        let tag = format!("agenteval-agent:{}", &hex::encode(Sha256::digest(format!("{base_id}\0{key}")))[..16]);
        let reused = |tag: &str| Ready {
            image: tag.to_string(),
            note: format!("agent layer {} on {base}: image {tag} reused", self.name()),
            output: String::new(),
        };
        if env.has_image(&tag).await {
            return Ok(reused(&tag));
        }
        let lock = std::env::temp_dir().join(format!("agenteval-layer-{}.lock", tag.replace([':', '/'], "-")));
        let _held = fetch::lock_file(lock).await.map_err(|e| Error::new(ErrorKind::Io, e))?;
        if env.has_image(&tag).await {
            return Ok(reused(&tag));
        }
        let base_spec = EnvSpec { image: Some(base.clone()), context: None, ..spec.clone() };
        let made = tokio::time::timeout(self.timeout, self.make(env, run, task, attempt, &base_spec, secrets, &tag))
            .await
            .unwrap_or_else(|_| {
                Err(self.failed(format!("took more than {} s (agent.install_timeout_seconds)", self.timeout.as_secs())))
            })?;
        Ok(Ready {
            image: tag.clone(),
            note: format!(
                "agent layer {} on {base}: image {tag} built in {:.1} s",
                self.name(),
                started.elapsed().as_secs_f64()
            ),
            output: made,
        })
    }

    /// The task's image cannot run the preset at all: no version would install.
    fn unrunnable(&self, why: String) -> LayerError {
        let mut e = self.failed(why);
        e.fault = Some(AgentFault::ImageCannotRun);
        e
    }

    /// The install's failure, naming the field that fixes it.
    fn failed(&self, why: String) -> LayerError {
        let (field, fault) = match &self.source {
            Source::Preset { preset, version } => {
                (format!("preset {} at agent.version {version}", preset.name), AgentFault::InstallFailed)
            }
            Source::Setup { .. } => ("agent.setup".into(), AgentFault::SetupFailed),
        };
        let error = Error::new(ErrorKind::Io, format!("installing the agent ({field}) failed: {why}"));
        LayerError { error, fault: Some(fault) }
    }

    /// Runs the install in a container of the base image and saves it as `tag`; the install's
    /// output.
    #[allow(clippy::too_many_arguments)]
    async fn make(
        &self,
        env: &Arc<dyn Environment>,
        run: &RunId,
        task: &TaskSpec,
        attempt: u32,
        base: &EnvSpec,
        secrets: &[(String, Secret)],
        tag: &str,
    ) -> Result<String, LayerError> {
        // A preset's files come from the worker: its container needs no network. A custom setup
        // gets the task's network (an apt install).
        let spec = match &self.source {
            Source::Preset { .. } => EnvSpec { network: false, ..base.clone() },
            Source::Setup { .. } => base.clone(),
        };
        let handle = env.prepare(run, task, attempt, &spec).await?;
        let out = self.install(env, &handle, secrets).await;
        let saved = match out {
            Ok(output) => env.commit(&handle, tag).await.map(|()| output).map_err(LayerError::from),
            Err(e) => Err(e),
        };
        if let Err(e) = env.teardown(&handle).await {
            tracing::warn!("the agent install's container {} was not removed: {e}", handle.id);
        }
        saved
    }

    /// Checks that a prepared environment's image is the layer `key` names (a fleet job in its
    /// task's layered image): the agent is there, nothing to install.
    pub async fn verify_in(
        &self,
        env: &Arc<dyn Environment>,
        handle: &agenteval_core::environment::EnvHandle,
        key: &str,
    ) -> Result<(), LayerError> {
        let look = ExecRequest::new(format!("cat {MARKER} 2>/dev/null"), Duration::from_secs(30));
        let found = env.exec(handle, &look).await?;
        if found.ok() && found.stdout.trim() == key {
            return Ok(());
        }
        Err(self.failed(format!("the task's image was named as its agent layer {key}, and {MARKER} does not say so")))
    }

    /// The install run in an environment already prepared (a fleet job's own container, which
    /// has no image to layer): the install's output; `None` when the environment is this layer
    /// already.
    pub async fn install_in(
        &self,
        env: &Arc<dyn Environment>,
        handle: &agenteval_core::environment::EnvHandle,
        secrets: &[(String, Secret)],
    ) -> Result<Option<String>, LayerError> {
        let names: Vec<&str> = secrets.iter().map(|(k, _)| k.as_str()).collect();
        let key = self.key(&names)?;
        let look = ExecRequest::new(format!("cat {MARKER} 2>/dev/null"), Duration::from_secs(30));
        if env.exec(handle, &look).await.is_ok_and(|o| o.ok() && o.stdout.trim() == key) {
            return Ok(None);
        }
        let install = async { self.install(env, handle, secrets).await.map(Some) };
        tokio::time::timeout(self.timeout, install).await.unwrap_or_else(|_| {
            Err(self.failed(format!("took more than {} s (agent.install_timeout_seconds)", self.timeout.as_secs())))
        })
    }

    async fn install(
        &self,
        env: &Arc<dyn Environment>,
        handle: &agenteval_core::environment::EnvHandle,
        secrets: &[(String, Secret)],
    ) -> Result<String, LayerError> {
        let root = |command: String, env_vars: Vec<(String, String)>| ExecRequest {
            user: Some("0".into()),
            env: env_vars.into_iter().collect(),
            max_output_bytes: 1 << 20,
            ..ExecRequest::new(command, self.timeout)
        };
        let run_root = |command: String, env_vars: Vec<(String, String)>| {
            let req = root(command, env_vars);
            async move {
                let o = env.exec(handle, &req).await?;
                let text = format!("{}{}", o.stdout, o.stderr);
                if o.ok() {
                    Ok(text)
                } else if o.timed_out {
                    Err(self.failed("ran out of time".into()))
                } else {
                    let code = o.exit_code.map_or_else(|| "was killed".into(), |c| format!("exited {c}"));
                    Err(self.failed(format!("`{}` {code}:\n{}", req.command, fetch::tail(&text))))
                }
            }
        };
        let names: Vec<&str> = secrets.iter().map(|(k, _)| k.as_str()).collect();
        let mark = format!("printf %s {} > {MARKER}", self.key(&names)?);
        let output = match &self.source {
            Source::Preset { preset, version } => {
                let python = match preset.package {
                    Package::Pip { .. } => {
                        let probe = "python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'";
                        let v = run_root(probe.into(), Vec::new()).await.map_err(|_| {
                            self.unrunnable(format!(
                                "{} runs on Python, and the task's image has no python3",
                                preset.name
                            ))
                        })?;
                        // The image's answer names a folder of the cache: read strictly first.
                        Some(python_version(&v).ok_or_else(|| {
                            self.unrunnable(format!(
                                "the task's image's python3 answered `{}`, not a Python 3 version",
                                v.trim().chars().take(80).collect::<String>()
                            ))
                        })?)
                    }
                    Package::NpmBinary { .. } => None,
                };
                let files =
                    fetch::fetch(preset, version, python.as_deref(), self.timeout).await.map_err(|e| self.failed(e))?;
                env.copy_in(handle, &files, AGENT_DIR).await?;
                let check = format!(
                    "rm -f {AGENT_DIR}/.complete && chmod -R a+rX {AGENT_DIR} && export PATH={AGENT_DIR}/bin:$PATH && {}",
                    preset.check
                );
                run_root(check, Vec::new()).await
            }
            Source::Setup { script, files } => {
                if let Some(dir) = files {
                    env.copy_in(handle, dir, &format!("{SETUP_DIR}/files")).await?;
                }
                env.copy_in(handle, script, &format!("{SETUP_DIR}/setup.sh")).await?;
                let mut vars = self.env.clone();
                vars.extend(secrets.iter().map(|(k, s)| (k.clone(), s.expose().to_string())));
                run_root(format!("cd {SETUP_DIR} && bash {SETUP_DIR}/setup.sh"), vars).await
            }
        }?;
        run_root(mark, Vec::new()).await?;
        Ok(output)
    }
}

/// A `3.N` version as a task image's `python3` printed it, or `None` for anything else (it
/// becomes part of a cache path on this machine).
fn python_version(said: &str) -> Option<String> {
    let v = said.trim();
    let (major, minor) = v.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.len() <= 2 && s.bytes().all(|b| b.is_ascii_digit());
    (major == "3" && digits(minor)).then(|| v.to_string())
}

/// Every file below `dir` into `h`, by relative path, in a fixed order.
fn folder_hash(dir: &std::path::Path, h: &mut Sha256) -> Result<()> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| Error::io(format!("reading {}", d.display()), e))? {
            let p = e.map_err(|e| Error::io(format!("reading {}", d.display()), e))?.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
    for f in files {
        let bytes = std::fs::read(&f).map_err(|e| Error::io(format!("reading {}", f.display()), e))?;
        h.update(f.strip_prefix(dir).unwrap_or(&f).to_string_lossy().as_bytes());
        h.update(b"\0");
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_python_3_version_from_an_image_names_a_folder() {
        assert_eq!(python_version("3.11\n").as_deref(), Some("3.11"));
        for hostile in ["../../../etc", "3.11/../../x", "3", "2.7", "3.1 1", "3.1a", "3.123", "", "3.11\nmore"] {
            assert_eq!(python_version(hostile), None, "{hostile:?}");
        }
    }

    fn installed(yaml: &str) -> AgentConfig {
        let v: serde_json::Value = serde_json::from_str(yaml).unwrap();
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_layers_key_follows_its_content() {
        let codex = Layer::of(&installed(r#"{"kind": "installed", "preset": "codex"}"#)).unwrap();
        let other = Layer::of(&installed(r#"{"kind": "installed", "preset": "codex", "version": "0.170.0"}"#)).unwrap();
        assert_eq!(codex.name(), "codex 0.171.0");
        assert_ne!(codex.key(&[]).unwrap(), other.key(&[]).unwrap(), "another version is another layer");
        assert_eq!(codex.key(&[]).unwrap(), codex.key(&[]).unwrap());
        assert_eq!(codex.key(&[]).unwrap(), codex.key(&["TOKEN"]).unwrap(), "a preset never gets the secrets");

        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("setup.sh"), "echo one").unwrap();
        let setup =
            format!(r#"{{"kind": "installed", "command": "x", "setup": "{}"}}"#, d.path().join("setup.sh").display());
        let a = Layer::of(&installed(&setup)).unwrap().key(&[]).unwrap();
        std::fs::write(d.path().join("setup.sh"), "echo two").unwrap();
        let b = Layer::of(&installed(&setup)).unwrap().key(&[]).unwrap();
        assert_ne!(a, b, "an edited setup script is another layer");
        let with_secret = Layer::of(&installed(&setup)).unwrap().key(&["TOKEN"]).unwrap();
        assert_ne!(b, with_secret, "a setup's secret's name counts");
        assert!(Layer::of(&installed(r#"{"kind": "installed", "command": "x"}"#)).is_none());
        let fleet = codex.fleet_tag("agenteval-env:0123456789abcdef", &[]).unwrap();
        assert_eq!(fleet, format!("agenteval-env:0123456789abcdef-agent-{}", &codex.key(&[]).unwrap()[..16]));
    }
}
