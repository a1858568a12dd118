//! The `toy` benchmark: N deterministic arithmetic tasks whose mock-agent behaviour cycles
//! through pass, fail, agent error, limit hit and slow task.

use agenteval_core::config::TaskFilter;
use agenteval_core::model::TaskSpec;
use agenteval_core::traits::BenchmarkAdapter;
use agenteval_core::{Result, TaskId};
use async_trait::async_trait;
use serde_json::json;

pub const DEFAULT_LATENCY_MS: u64 = 5;
pub const DEFAULT_SLOW_MS: u64 = 300;

/// The five behaviours, in the order they cycle.
pub const BEHAVIOURS: [&str; 5] = ["pass", "fail", "agent_error", "limit", "slow"];

#[derive(Debug, Clone)]
pub struct ToyBenchmark {
    size: u64,
    latency_ms: u64,
    slow_ms: u64,
}

impl ToyBenchmark {
    pub fn new(size: u64, latency_ms: u64, slow_ms: u64) -> Self {
        ToyBenchmark { size, latency_ms, slow_ms }
    }

    /// Task `i`, the same on every call.
    pub fn task(&self, i: u64) -> TaskSpec {
        let behaviour = BEHAVIOURS[(i % 5) as usize];
        let (a, b) = (i % 97, (i * 7) % 89);
        let correct = a + b;
        let answer = if behaviour == "fail" { correct + 1 } else { correct };
        let latency = if behaviour == "slow" { self.slow_ms } else { self.latency_ms };
        let mut mock = json!({
            "answer": answer.to_string(),
            "latency_ms": latency,
            "tokens": 100 + (i % 50),
            "cost_usd": 0.0001 * (1 + i % 5) as f64,
            "tool_calls": ["calculator"],
        });
        match behaviour {
            "agent_error" => mock["fail"] = json!("scripted agent error"),
            // Keeps spending tokens until the runner stops it (set agent.limits.max_tokens).
            "limit" => mock["runaway"] = json!(true),
            _ => {}
        }
        TaskSpec {
            id: TaskId::try_from(format!("toy-{i:07}")).expect("toy ids are valid"),
            input: json!({"question": format!("What is {a} + {b}?")}),
            expected: Some(json!(correct.to_string())),
            tags: vec![behaviour.to_string()],
            evaluators: vec![],
            metadata: json!({ "mock": mock }),
            environment: None,
            content: None,
            tests: None,
            solution: None,
            steps: None,
            user: None,
        }
    }
}

#[async_trait]
impl BenchmarkAdapter for ToyBenchmark {
    fn name(&self) -> &str {
        "toy"
    }

    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskSpec>> {
        let mut out = Vec::new();
        self.for_each_task(filter, &mut |t| {
            out.push(t);
            Ok(())
        })
        .await?;
        Ok(out)
    }

    async fn for_each_task(
        &self,
        filter: &TaskFilter,
        f: &mut (dyn FnMut(TaskSpec) -> Result<()> + Send),
    ) -> Result<()> {
        let limit = filter.limit.unwrap_or(u64::MAX);
        let mut n = 0u64;
        for i in 0..self.size {
            if n >= limit {
                break;
            }
            let t = self.task(i);
            if filter.matches(t.id.as_str(), &t.tags) {
                n += 1;
                f(t)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_are_deterministic_and_filterable() {
        let b = ToyBenchmark::new(12, 0, 0);
        let all = b.list_tasks(&TaskFilter::default()).await.unwrap();
        assert_eq!(all.len(), 12);
        assert_eq!(all, b.list_tasks(&TaskFilter::default()).await.unwrap());
        assert_eq!(all[3].tags, vec!["limit"]);
        let slow = b.list_tasks(&TaskFilter { tags: vec!["slow".into()], ..Default::default() }).await.unwrap();
        assert_eq!(slow.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), vec!["toy-0000004", "toy-0000009"]);
        let lim = b.list_tasks(&TaskFilter { limit: Some(2), ..Default::default() }).await.unwrap();
        assert_eq!(lim.len(), 2);
    }
}
