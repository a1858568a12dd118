//! The `llm` agent's tools for a task with an environment: `bash` (a command there), `read_file`,
//! `write_file` and `str_replace` (files there, relative to its working folder). Each goes
//! through the task's `Environment` only; the trace records each call and its output as for any
//! tool.

use std::sync::Arc;
use std::time::Duration;

use agenteval_core::environment::ExecRequest;
use agenteval_core::traits::{AgentTool, EnvSession, TaskEnvironment, ToolSpec};
use async_trait::async_trait;

use crate::environments::quote;
use serde_json::{Value, json};

/// Seconds a `bash` call may run unless it asks for less.
const DEFAULT_BASH_SECS: f64 = 120.0;
/// The largest file `read_file` and `str_replace` read.
const MAX_READ: usize = 256 * 1024;

/// The four tools, for the agent of a task that has an environment.
pub fn env_tools() -> Vec<Arc<dyn AgentTool>> {
    vec![Arc::new(Bash), Arc::new(ReadFile), Arc::new(WriteFile), Arc::new(StrReplace)]
}

fn session(env: &TaskEnvironment) -> Result<&EnvSession, String> {
    env.session.as_ref().ok_or_else(|| "this task has no environment".to_string())
}

fn arg<'a>(args: &'a Value, name: &str) -> Result<&'a str, String> {
    args.get(name).and_then(Value::as_str).ok_or_else(|| format!("`{name}` (a string) is required"))
}

async fn read(s: &EnvSession, path: &str) -> Result<String, String> {
    let req = ExecRequest {
        max_output_bytes: MAX_READ + 1,
        ..ExecRequest::new(format!("cat -- {}", quote(path)), Duration::from_secs(30))
    };
    let out = s.env.exec(&s.handle, &req).await.map_err(|e| e.to_string())?;
    if !out.ok() {
        return Err(format!("cannot read {path}: {}", out.stderr.trim()));
    }
    if out.dropped_bytes > 0 || out.stdout.len() > MAX_READ {
        return Err(format!("{path} is larger than {MAX_READ} bytes; read part of it with bash (head, sed -n)"));
    }
    Ok(out.stdout)
}

/// Writes `content` to `path` by a command run as the agent, like everything the agent does:
/// it can write only where its commands can (in a workspace, its own folder; never the
/// worker's snapshot or the verifier's folders), and its files are its own. The content travels
/// as base64 in pieces well under the kernel's limit on one argument.
async fn write(s: &EnvSession, path: &str, content: &str) -> Result<(), String> {
    use base64::Engine as _;
    const PIECE: usize = 48 * 1024;
    let target = quote(path);
    let bytes = content.as_bytes();
    let pieces: Vec<&[u8]> = if bytes.is_empty() { vec![&[][..]] } else { bytes.chunks(PIECE).collect() };
    for (i, piece) in pieces.into_iter().enumerate() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(piece);
        let cmd = if i == 0 {
            format!("mkdir -p -- \"$(dirname -- {target})\" && printf %s '{b64}' | base64 -d > {target}")
        } else {
            format!("printf %s '{b64}' | base64 -d >> {target}")
        };
        let out =
            s.env.exec(&s.handle, &ExecRequest::new(cmd, Duration::from_secs(30))).await.map_err(|e| e.to_string())?;
        if !out.ok() {
            return Err(format!("cannot write {path}: {}", out.stderr.trim()));
        }
    }
    Ok(())
}

struct Bash;
struct ReadFile;
struct WriteFile;
struct StrReplace;

#[async_trait]
impl AgentTool for Bash {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "bash".into(),
            description: "Runs a shell command (bash -c) in the task's environment, in its working folder, and returns its exit code, stdout and stderr.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "timeout_seconds": {"type": "number", "description": "default 120"}
                },
                "required": ["command"],
            }),
        }
    }

    async fn call(&self, args: &Value, env: &TaskEnvironment) -> Result<String, String> {
        let s = session(env)?;
        let secs = args.get("timeout_seconds").and_then(Value::as_f64).unwrap_or(DEFAULT_BASH_SECS).clamp(0.1, 3600.0);
        let out = s
            .env
            .exec(&s.handle, &ExecRequest::new(arg(args, "command")?, Duration::from_secs_f64(secs)))
            .await
            .map_err(|e| e.to_string())?;
        let code = if out.timed_out {
            format!("timed out after {secs} s")
        } else {
            format!("exit code {}", out.exit_code.unwrap_or(-1))
        };
        Ok(format!("{code}\n--- stdout\n{}\n--- stderr\n{}", out.stdout, out.stderr))
    }
}

#[async_trait]
impl AgentTool for ReadFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read_file".into(),
            description:
                "Returns a file of the task's environment (a path relative to its working folder, or absolute).".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        }
    }

    async fn call(&self, args: &Value, env: &TaskEnvironment) -> Result<String, String> {
        read(session(env)?, arg(args, "path")?).await
    }
}

#[async_trait]
impl AgentTool for WriteFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "write_file".into(),
            description: "Writes a whole file in the task's environment (created or replaced).".into(),
            parameters: json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            }),
        }
    }

    async fn call(&self, args: &Value, env: &TaskEnvironment) -> Result<String, String> {
        let (path, content) = (arg(args, "path")?, arg(args, "content")?);
        write(session(env)?, path, content).await?;
        Ok(format!("wrote {} bytes to {path}", content.len()))
    }
}

#[async_trait]
impl AgentTool for StrReplace {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "str_replace".into(),
            description: "Replaces the one occurrence of `old` in a file of the task's environment by `new` (an error when `old` occurs zero or several times).".into(),
            parameters: json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
                "required": ["path", "old", "new"],
            }),
        }
    }

    async fn call(&self, args: &Value, env: &TaskEnvironment) -> Result<String, String> {
        let s = session(env)?;
        let (path, old, new) = (arg(args, "path")?, arg(args, "old")?, arg(args, "new")?);
        let text = read(s, path).await?;
        match text.matches(old).count() {
            1 => {}
            0 => return Err(format!("`old` does not occur in {path}")),
            n => return Err(format!("`old` occurs {n} times in {path}; make it unique")),
        }
        write(s, path, &text.replacen(old, new, 1)).await?;
        Ok(format!("replaced 1 occurrence in {path}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environments::workspace::WorkspaceEnvironment;
    use agenteval_core::environment::EnvSpec;
    use agenteval_core::traits::Environment as _;

    #[tokio::test]
    async fn files_are_written_as_the_agent_in_pieces_and_only_where_its_commands_may_write() {
        let root = tempfile::tempdir().unwrap();
        let env = Arc::new(WorkspaceEnvironment::new(root.path().to_path_buf(), vec![]));
        let task = serde_json::from_value(json!({"id": "t", "input": "x"})).unwrap();
        let handle = env.prepare(&agenteval_core::RunId::new(), &task, 1, &EnvSpec::default()).await.unwrap();
        let s = EnvSession { env: env.clone(), handle: handle.clone() };
        let big: String = (0..150_000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        write(&s, "src/big.txt", &big).await.unwrap();
        assert_eq!(read(&s, "src/big.txt").await.unwrap(), big, "three pieces, one file");
        write(&s, "empty.txt", "").await.unwrap();
        assert_eq!(read(&s, "empty.txt").await.unwrap(), "");
        // Confined only under the sandbox launcher (the binary), which a unit test has not.
        if crate::isolation::sandbox::launcher().is_some() && crate::isolation::sandbox::available() {
            let verifier = format!("{}/logs/verifier/reward.txt", handle.id);
            assert!(write(&s, &verifier, "1").await.is_err(), "the verifier's folder is not the agent's");
            assert!(!std::path::Path::new(&verifier).exists());
        }
        env.teardown(&handle).await.unwrap();
    }
}
