//! The `python` tool of the `llm` agent: runs the model's code in the same sandbox as HumanEval
//! grading ([`crate::python`]) and returns what it printed.

use agenteval_core::traits::{AgentTool, TaskEnvironment, ToolSpec};
use async_trait::async_trait;
use serde_json::json;

use crate::python::{PythonLimits, run_python};

#[derive(Debug, Clone)]
pub struct PythonTool {
    pub python: String,
    pub limits: PythonLimits,
}

#[async_trait]
impl AgentTool for PythonTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "python".into(),
            description: "Runs a Python program in a fresh sandbox (no network guarantees, no processes, a scratch \
                          folder, a time limit) and returns what it printed."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {"code": {"type": "string", "description": "The program to run."}},
                "required": ["code"],
            }),
        }
    }

    async fn call(&self, arguments: &serde_json::Value, _env: &TaskEnvironment) -> Result<String, String> {
        let code = match arguments {
            serde_json::Value::String(s) => s.as_str(),
            other => other.get("code").and_then(|c| c.as_str()).ok_or("the python tool takes {\"code\": \"...\"}")?,
        };
        let run = run_python(&self.python, code, &self.limits).await.map_err(|e| e.to_string())?;
        if run.completed { Ok(run.output) } else { Err(format!("{}\n{}", run.output, run.reason).trim().to_string()) }
    }
}
