//! A launcher that serves an environment from this process, as `agenteval env serve` serves one
//! from its container: for tests of the link and of environments behind it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agenteval_core::environment::EnvSpec;
use agenteval_core::model::TaskSpec;
use agenteval_core::traits::Environment;
use agenteval_core::{Result, RunId};
use async_trait::async_trait;

use crate::{Launched, Launcher, Listener};

/// Serves `env` to itself over loopback, a fresh token per launch.
pub struct InProcess {
    listener: Listener,
    env: Arc<dyn Environment>,
    /// Before each launch, an impostor dials in with a wrong token (and must be refused).
    pub impostor: bool,
    /// Every launch, by run, and those stopped.
    launched: Mutex<Vec<(RunId, String)>>,
    stopped: Mutex<Vec<String>>,
}

impl InProcess {
    pub async fn new(env: Arc<dyn Environment>) -> InProcess {
        let listener = Listener::bind(std::net::Ipv4Addr::LOCALHOST.into(), 0..=0).await.expect("a loopback port");
        InProcess { listener, env, impostor: false, launched: Mutex::default(), stopped: Mutex::default() }
    }

    /// The launches stopped, in order.
    pub fn stopped(&self) -> Vec<String> {
        self.stopped.lock().expect("not poisoned").clone()
    }
}

#[async_trait]
impl Launcher for InProcess {
    fn kind(&self) -> &str {
        "inprocess"
    }

    async fn launch(&self, run: &RunId, task: &TaskSpec, _attempt: u32, _spec: &EnvSpec) -> Result<Launched> {
        let id = {
            let mut launched = self.launched.lock().expect("not poisoned");
            let id = format!("launch-{}-{}", task.id, launched.len() + 1);
            launched.push((*run, id.clone()));
            id
        };
        let token = crate::random();
        let mut pending = self.listener.expect(&id, &token);
        let addr = self.listener.addr().to_string();
        if self.impostor {
            let refused = crate::dial_and_serve(&addr, &id, "not-the-token", self.env.clone()).await;
            assert!(refused.is_err(), "an impostor is not served");
        }
        let (env, i) = (self.env.clone(), id.clone());
        tokio::spawn(async move { crate::dial_and_serve(&addr, &i, &token, env).await });
        let link = tokio::time::timeout(Duration::from_secs(10), pending.link())
            .await
            .map_err(|_| agenteval_core::Error::internal("the in-process server did not dial in"))??;
        Ok(Launched { id, link, notes: vec!["launched in process".into()], env: Default::default() })
    }

    async fn stop(&self, id: &str) -> Result<()> {
        self.stopped.lock().expect("not poisoned").push(id.into());
        Ok(())
    }

    async fn sweep(&self, run: &RunId) -> Result<usize> {
        let stopped = self.stopped();
        let left: Vec<String> = (self.launched.lock().expect("not poisoned").iter())
            .filter(|(r, id)| r == run && !stopped.contains(id))
            .map(|(_, id)| id.clone())
            .collect();
        for id in &left {
            self.stop(id).await?;
        }
        Ok(left.len())
    }

    fn worker_address(&self) -> Option<std::net::Ipv4Addr> {
        Some(std::net::Ipv4Addr::LOCALHOST)
    }
}
