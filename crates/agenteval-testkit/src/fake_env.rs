//! A scripted `Environment` for unit tests of what runs around an environment (the worker's
//! stages): nothing runs, every command exits as scripted, and what the environment reports
//! (storage grown, memory, files changed outside, a copy over its cap) is set by the test,
//! which then reads what was asked of it.

use std::sync::Mutex;

use agenteval_core::environment::{EnvHandle, EnvSpec, ExecOutput, ExecRequest};
use agenteval_core::model::TaskSpec;
use agenteval_core::traits::Environment;
use agenteval_core::{Error, Result, RunId};
use async_trait::async_trait;

/// What the environment reports, as the test scripts it.
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// The exit code of every command (0 unless set).
    pub exit_code: i64,
    /// What `written_bytes` says.
    pub written_bytes: Option<u64>,
    /// What `out_of_memory` says.
    pub out_of_memory: bool,
    /// What `changed_outside` says.
    pub changed_outside: Vec<String>,
    /// `copy_out` is refused as over its cap (`Invalid`), as a copy of too much would be.
    pub copy_out_over_cap: bool,
}

/// What was asked of the environment, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    Prepare(String),
    Exec(String),
    CopyIn(String),
    CopyOut(String),
    Quiesce,
    Teardown(String),
}

/// A scripted environment.
#[derive(Debug, Default)]
pub struct FakeEnvironment {
    pub script: Mutex<Script>,
    asked: Mutex<Vec<Asked>>,
}

impl FakeEnvironment {
    pub fn new(script: Script) -> Self {
        FakeEnvironment { script: Mutex::new(script), asked: Mutex::default() }
    }

    /// Everything asked so far.
    pub fn asked(&self) -> Vec<Asked> {
        self.asked.lock().unwrap().clone()
    }

    fn ask(&self, a: Asked) {
        self.asked.lock().unwrap().push(a);
    }
}

#[async_trait]
impl Environment for FakeEnvironment {
    fn kind(&self) -> &str {
        "fake"
    }

    async fn prepare(&self, _run: &RunId, task: &TaskSpec, attempt: u32, _spec: &EnvSpec) -> Result<EnvHandle> {
        let id = format!("fake-{}-a{attempt}-{}", task.id, self.asked.lock().unwrap().len());
        self.ask(Asked::Prepare(id.clone()));
        Ok(EnvHandle { kind: "fake".into(), id, workdir: "/work".into(), notes: vec![] })
    }

    async fn exec(&self, _env: &EnvHandle, req: &ExecRequest) -> Result<ExecOutput> {
        self.ask(Asked::Exec(req.command.clone()));
        let code = self.script.lock().unwrap().exit_code;
        Ok(ExecOutput {
            exit_code: Some(code),
            stdout: String::new(),
            stderr: String::new(),
            timed_out: false,
            dropped_bytes: 0,
        })
    }

    async fn copy_in(&self, _env: &EnvHandle, _from: &std::path::Path, to: &str) -> Result<()> {
        self.ask(Asked::CopyIn(to.to_string()));
        Ok(())
    }

    async fn copy_out(&self, _env: &EnvHandle, from: &str, to: &std::path::Path, max_bytes: u64) -> Result<()> {
        self.ask(Asked::CopyOut(from.to_string()));
        if self.script.lock().unwrap().copy_out_over_cap {
            return Err(Error::invalid(format!("{from} is over {max_bytes} bytes")));
        }
        std::fs::create_dir_all(to).map_err(|e| Error::io("a folder for the copy", e))
    }

    async fn teardown(&self, env: &EnvHandle) -> Result<()> {
        self.ask(Asked::Teardown(env.id.clone()));
        Ok(())
    }

    async fn sweep(&self, _run: &RunId) -> Result<usize> {
        Ok(0)
    }

    async fn quiesce(&self, _env: &EnvHandle) -> Result<()> {
        self.ask(Asked::Quiesce);
        Ok(())
    }

    async fn changed_outside(&self, _env: &EnvHandle) -> Vec<String> {
        self.script.lock().unwrap().changed_outside.clone()
    }

    async fn written_bytes(&self, _env: &EnvHandle) -> Option<u64> {
        self.script.lock().unwrap().written_bytes
    }

    async fn out_of_memory(&self, _env: &EnvHandle) -> bool {
        self.script.lock().unwrap().out_of_memory
    }
}
