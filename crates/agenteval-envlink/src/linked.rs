//! An `Environment` whose every environment is launched elsewhere (a [`Launcher`]: an ECS
//! task of the task's image) and driven over its [`Link`]: the worker's pipeline runs on it as on
//! a local container, while nothing of the worker (its credentials, its keys, its memory) is in
//! the environment's reach.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use agenteval_core::environment::{EnvHandle, EnvSpec, ExecOutput, ExecRequest};
use agenteval_core::model::TaskSpec;
use agenteval_core::traits::Environment;
use agenteval_core::{Error, Result, RunId};
use async_trait::async_trait;

use crate::Link;
use crate::wire::{self, Op, Prepared};

/// An environment started elsewhere, its server dialed in and proved.
pub struct Launched {
    /// Its id at the launcher (an ECS task's ARN), which tears it down.
    pub id: String,
    pub link: Link,
    /// What launching it did, for the task's log.
    pub notes: Vec<String>,
    /// Variables every process of the environment gets besides the task's own (an egress
    /// proxy's address).
    pub env: std::collections::BTreeMap<String, String>,
}

/// Starts environments' servers and stops them.
#[async_trait]
pub trait Launcher: Send + Sync {
    /// The environments' kind, as handles name it (`fargate`).
    fn kind(&self) -> &str;
    /// Starts one for the task attempt, waits for its server to dial in and prove its token.
    async fn launch(&self, run: &RunId, task: &TaskSpec, attempt: u32, spec: &EnvSpec) -> Result<Launched>;
    /// Stops it; stopping one already gone is `Ok`.
    async fn stop(&self, id: &str) -> Result<()>;
    /// Stops every one of `run` still there; how many.
    async fn sweep(&self, run: &RunId) -> Result<usize>;
    /// The worker's address as the environments reach it (the model gateway listens there).
    fn worker_address(&self) -> Option<std::net::Ipv4Addr>;
}

/// What the worker holds of one environment.
struct Live {
    link: Link,
    inner: EnvHandle,
    worker_root: String,
    leftovers_outlive_agent: bool,
    processes_before_agent: Vec<agenteval_core::environment::ProcessMark>,
    releases_servers: bool,
}

/// Environments launched by a [`Launcher`], driven over their links.
pub struct LinkedEnvironment {
    launcher: std::sync::Arc<dyn Launcher>,
    live: Mutex<HashMap<String, Live>>,
}

/// How long a call that runs nothing of the agent's may take (copies of large folders).
const CALL: Duration = Duration::from_secs(900);
/// What a command's reply may take past its own timeout (the server kills it at that).
const EXEC_SLACK: Duration = Duration::from_secs(120);

impl LinkedEnvironment {
    pub fn new(launcher: std::sync::Arc<dyn Launcher>) -> LinkedEnvironment {
        LinkedEnvironment { launcher, live: Mutex::new(HashMap::new()) }
    }

    fn live<T>(&self, env: &EnvHandle, f: impl FnOnce(&Live) -> T) -> Result<T> {
        let live = self.live.lock().expect("not poisoned");
        live.get(&env.id)
            .map(f)
            .ok_or_else(|| Error::invalid(format!("environment {} is not one this worker holds", env.id)))
    }

    async fn call(
        &self,
        env: &EnvHandle,
        op: impl FnOnce(EnvHandle) -> Op,
        wait: Duration,
    ) -> Result<serde_json::Value> {
        let (link, inner) = self.live(env, |l| (l.link.clone(), l.inner.clone()))?;
        Ok(link.call(op(inner), &[], 0, wait).await?.0)
    }
}

fn decode<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| wire::link_error("an unreadable reply", e))
}

#[async_trait]
impl Environment for LinkedEnvironment {
    fn kind(&self) -> &str {
        self.launcher.kind()
    }

    fn is_container(&self) -> bool {
        true
    }

    async fn prepare(&self, run: &RunId, task: &TaskSpec, attempt: u32, spec: &EnvSpec) -> Result<EnvHandle> {
        let launched = self.launcher.launch(run, task, attempt, spec).await?;
        let mut spec = spec.clone();
        spec.env.extend(launched.env.clone());
        let op = Op::Prepare { run: *run, task: Box::new(task.clone()), attempt, spec: Box::new(spec) };
        let prepared = match launched.link.call(op, &[], 0, CALL).await {
            Ok((v, _)) => decode::<Prepared>(v),
            Err(e) => Err(e),
        };
        let prepared = match prepared {
            Ok(p) => p,
            Err(e) => {
                let _ = self.launcher.stop(&launched.id).await;
                return Err(e);
            }
        };
        let mut notes = launched.notes;
        notes.extend(prepared.handle.notes.iter().cloned());
        let handle = EnvHandle {
            kind: self.kind().into(),
            id: launched.id.clone(),
            workdir: prepared.handle.workdir.clone(),
            notes,
        };
        self.live.lock().expect("not poisoned").insert(
            launched.id,
            Live {
                link: launched.link,
                inner: prepared.handle,
                worker_root: prepared.worker_root,
                leftovers_outlive_agent: prepared.leftovers_outlive_agent,
                releases_servers: prepared.releases_servers,
                processes_before_agent: prepared.processes_before_agent,
            },
        );
        Ok(handle)
    }

    async fn exec(&self, env: &EnvHandle, req: &ExecRequest) -> Result<ExecOutput> {
        let v = self
            .call(
                env,
                |handle| Op::Exec {
                    handle,
                    command: req.command.clone(),
                    timeout_ms: req.timeout.as_millis().min(u64::MAX as u128) as u64,
                    user: req.user.clone(),
                    env: req.env.clone(),
                    workdir: req.workdir.clone(),
                    max_output_bytes: req.max_output_bytes,
                    grader: req.grader,
                },
                req.timeout.saturating_add(EXEC_SLACK),
            )
            .await?;
        decode(v)
    }

    async fn copy_in(&self, env: &EnvHandle, from: &Path, to: &str) -> Result<()> {
        let (link, inner) = self.live(env, |l| (l.link.clone(), l.inner.clone()))?;
        let from = from.to_path_buf();
        let (bytes, name) = tokio::task::spawn_blocking(move || crate::tarball::pack(&from))
            .await
            .map_err(|e| Error::internal(e.to_string()))??;
        link.call(Op::CopyIn { handle: inner, to: to.into(), name }, &bytes, 0, CALL).await?;
        Ok(())
    }

    async fn copy_out(&self, env: &EnvHandle, from: &str, to: &Path, max_bytes: u64) -> Result<()> {
        let (link, inner) = self.live(env, |l| (l.link.clone(), l.inner.clone()))?;
        // Headers and padding: a tar is at most its content plus a KiB per entry, and the server
        // copied at most `max_bytes` of content; the unpack counts the content again. The body
        // goes to a file as it comes, never into memory whole.
        let max_body = max_bytes.saturating_mul(2).saturating_add(16 << 20);
        let op = Op::CopyOut { handle: inner, from: from.into(), max_bytes };
        let (_, body) = link.call(op, &[], max_body, CALL).await?;
        let to = to.to_path_buf();
        tokio::task::spawn_blocking(move || match body {
            Some(file) => crate::tarball::unpack(std::io::BufReader::new(file), &to, max_bytes),
            None => crate::tarball::unpack(std::io::empty(), &to, max_bytes),
        })
        .await
        .map_err(|e| Error::internal(e.to_string()))?
    }

    /// The launch stopped: everything in it goes with it (an environment is never reused, so
    /// its own reset would be wasted work).
    async fn teardown(&self, env: &EnvHandle) -> Result<()> {
        self.live.lock().expect("not poisoned").remove(&env.id);
        self.launcher.stop(&env.id).await
    }

    async fn sweep(&self, run: &RunId) -> Result<usize> {
        self.launcher.sweep(run).await
    }

    async fn gateway_host(&self, _env: &EnvHandle) -> Option<std::net::Ipv4Addr> {
        self.launcher.worker_address()
    }

    async fn quiesce(&self, env: &EnvHandle) -> Result<()> {
        self.call(env, |handle| Op::Quiesce { handle }, CALL).await.map(|_| ())
    }

    fn leftovers_outlive_agent(&self, env: &EnvHandle) -> bool {
        self.live(env, |l| l.leftovers_outlive_agent).unwrap_or(false)
    }

    fn processes_before_agent(&self, env: &EnvHandle) -> Vec<agenteval_core::environment::ProcessMark> {
        self.live(env, |l| l.processes_before_agent.clone()).unwrap_or_default()
    }

    fn releases_servers(&self, env: &EnvHandle) -> bool {
        self.live(env, |l| l.releases_servers).unwrap_or(false)
    }

    /// A link that fails lets nothing go watched: the servers are then named for running.
    async fn release(&self, env: &EnvHandle, pids: &[u32]) -> Vec<u32> {
        let pids = pids.to_vec();
        let v = self.call(env, |handle| Op::Release { handle, pids }, CALL).await.and_then(decode::<Vec<u32>>);
        v.unwrap_or_default()
    }

    /// A link that fails says "could not say", which is a change.
    async fn watched(&self, env: &EnvHandle) -> Vec<(u32, String, String)> {
        match self.call(env, |handle| Op::Watched { handle }, CALL).await.and_then(decode::<Vec<(u32, String, String)>>)
        {
            Ok(v) => v,
            Err(e) => vec![(0, "the environment".into(), format!("could not say what its servers changed: {e}"))],
        }
    }

    fn worker_root(&self, env: &EnvHandle) -> String {
        self.live(env, |l| l.worker_root.clone()).unwrap_or_else(|_| "/".into())
    }

    /// An environment that cannot say (its link gone) is taken as changed: its tests are not
    /// trusted to have seen it as it was.
    async fn changed_outside(&self, env: &EnvHandle) -> Vec<String> {
        match self.call(env, |handle| Op::ChangedOutside { handle }, CALL).await.and_then(decode::<Vec<String>>) {
            Ok(v) => v,
            Err(e) => vec![format!("(the environment could not say what changed: {e})")],
        }
    }

    async fn mark_baseline(&self, env: &EnvHandle) {
        let v = self
            .call(env, |handle| Op::MarkBaseline { handle }, CALL)
            .await
            .and_then(decode::<Vec<agenteval_core::environment::ProcessMark>>);
        if let Ok(pids) = v
            && let Some(l) = self.live.lock().expect("not poisoned").get_mut(&env.id)
        {
            l.processes_before_agent = pids;
        }
    }

    async fn written_bytes(&self, env: &EnvHandle) -> Option<u64> {
        self.call(env, |handle| Op::WrittenBytes { handle }, CALL).await.and_then(decode).ok().flatten()
    }

    async fn out_of_memory(&self, env: &EnvHandle) -> bool {
        self.call(env, |handle| Op::OutOfMemory { handle }, CALL).await.and_then(decode).unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use agenteval_testkit::fake_env::{Asked, FakeEnvironment, Script};

    use super::*;
    use crate::testing::InProcess;

    async fn linked(script: Script, impostor: bool) -> (LinkedEnvironment, Arc<InProcess>, Arc<FakeEnvironment>) {
        let fake = Arc::new(FakeEnvironment::new(script));
        let mut launcher = InProcess::new(fake.clone()).await;
        launcher.impostor = impostor;
        let launcher = Arc::new(launcher);
        (LinkedEnvironment::new(launcher.clone()), launcher, fake)
    }

    fn task() -> TaskSpec {
        serde_json::from_value(serde_json::json!({"id": "t1", "input": ""})).unwrap()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn every_call_reaches_the_environment_behind_the_link_and_teardown_stops_its_launch() {
        let script = Script { exit_code: 3, changed_outside: vec!["/usr/bin/x".into()], ..Script::default() };
        let (env, launcher, fake) = linked(script, false).await;
        let h = env.prepare(&RunId::new(), &task(), 1, &EnvSpec::default()).await.unwrap();
        assert_eq!((h.kind.as_str(), h.id.as_str(), h.workdir.as_str()), ("inprocess", "launch-t1-1", "/work"));
        assert!(h.notes.contains(&"launched in process".to_string()), "{h:?}");
        let out = env.exec(&h, &ExecRequest::new("make test", Duration::from_secs(5))).await.unwrap();
        assert_eq!(out.exit_code, Some(3));
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("f.txt"), "x").unwrap();
        env.copy_in(&h, &src.path().join("f.txt"), "/work/f.txt").await.unwrap();
        let back = tempfile::tempdir().unwrap();
        env.copy_out(&h, "/work/out", back.path(), 1000).await.unwrap();
        assert_eq!(env.changed_outside(&h).await, ["/usr/bin/x"]);
        assert!(env.is_container() && env.gateway_host(&h).await.is_some());
        env.teardown(&h).await.unwrap();
        env.teardown(&h).await.unwrap();
        let asked = fake.asked();
        assert!(
            matches!(&asked[..], [Asked::Prepare(_), Asked::Exec(c), Asked::CopyIn(to), Asked::CopyOut(from)]
            if c == "make test" && to == "/work/f.txt" && from == "/work/out"),
            "{asked:?}"
        );
        assert_eq!(
            launcher.stopped(),
            ["launch-t1-1", "launch-t1-1"],
            "each teardown stops the launch (the second finds it gone)"
        );
        let err = env.exec(&h, &ExecRequest::new("true", Duration::from_secs(5))).await.unwrap_err();
        assert!(err.to_string().contains("not one this worker holds"), "{err}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_impostor_without_the_token_is_refused_and_the_launch_still_admitted() {
        let (env, _launcher, _) = linked(Script::default(), true).await;
        let h = env.prepare(&RunId::new(), &task(), 1, &EnvSpec::default()).await.unwrap();
        assert!(env.exec(&h, &ExecRequest::new("true", Duration::from_secs(5))).await.unwrap().ok());
    }

    /// A worker that goes away (killed, interrupted) ends its environments' servers: on the
    /// fleet each one's container, and with it its ECS task.
    #[tokio::test(flavor = "multi_thread")]
    async fn the_server_ends_when_its_worker_hangs_up() {
        let listener = crate::Listener::bind(std::net::Ipv4Addr::LOCALHOST.into(), 0..=0).await.unwrap();
        let token = crate::random();
        let mut pending = listener.expect("l1", &token);
        let addr = listener.addr().to_string();
        let env = Arc::new(FakeEnvironment::new(Script::default())) as Arc<dyn Environment>;
        let server = tokio::spawn(async move { crate::dial_and_serve(&addr, "l1", &token, env).await });
        let link = pending.link().await.unwrap();
        drop(link);
        let ended = tokio::time::timeout(Duration::from_secs(10), server).await.expect("the server ends");
        assert!(ended.unwrap().is_ok(), "a hang-up is the end of its work, not an error");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_copy_out_past_its_cap_is_refused_over_the_link() {
        let (env, _launcher, _) = linked(Script { copy_out_over_cap: true, ..Script::default() }, false).await;
        let h = env.prepare(&RunId::new(), &task(), 1, &EnvSpec::default()).await.unwrap();
        let back = tempfile::tempdir().unwrap();
        let err = env.copy_out(&h, "/work/big", back.path(), 10).await.unwrap_err();
        assert_eq!(err.kind(), agenteval_core::ErrorKind::Invalid, "the environment's own error and kind: {err}");
    }
}
