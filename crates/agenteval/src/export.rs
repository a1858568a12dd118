//! `agenteval export RUN --to mlflow`: a run's parameters, metrics, tags and report files as
//! one MLflow run (`agenteval-mlflow`), built here from the bundle and the index.

use agenteval_core::layout;
use agenteval_core::model::RunStatus;
use agenteval_core::secret::Secret;
use agenteval_engine::bundle::{Metadata, read_json};
use agenteval_engine::controller;
use agenteval_mlflow::{Auth, Mlflow, RunExport};
use serde_json::Value;

use crate::cli::{ExportTarget, IndexArgs};
use crate::session::open_index;
use crate::{Failure, exit};

/// The command.
pub async fn export(
    run: &str,
    index: &IndexArgs,
    to: ExportTarget,
    tracking_uri: Option<&str>,
    experiment: Option<&str>,
    json: bool,
) -> Result<u8, Failure> {
    let ExportTarget::Mlflow = to;
    let Some(uri) = tracking_uri.filter(|u| !u.trim().is_empty()) else {
        return Err(Failure {
            code: exit::USAGE,
            error: anyhow::anyhow!(
                "no MLflow tracking server: set MLFLOW_TRACKING_URI or pass --tracking-uri http://HOST:5000"
            ),
        });
    };
    let (wiring, index) = open_index(index).await?;
    let run_id = crate::judging::resolve_ref(index.as_ref(), run).await?;
    let record = index.get_run(&run_id).await?;
    let located = controller::locate(wiring.as_ref(), index.as_ref(), &run_id).await?;
    let store = located.store.as_ref();
    let meta: Metadata = read_json(store, &run_id, layout::METADATA).await?;
    let summary: Value = read_json(store, &run_id, layout::SUMMARY).await.map_err(|e| {
        agenteval_core::Error::invalid(format!(
            "run {run_id} has no summary ({e}): export a sealed run (`agenteval resume {run_id}` finishes it)"
        ))
    })?;
    let config: Value = read_json(store, &run_id, layout::CONFIG).await.unwrap_or(Value::Null);
    let mut doc = document(&meta, &summary, &config);
    if let Some(r) = &record {
        if let Some(v) = r.verdict {
            doc.tags.push(("agenteval.verdict".into(), v.as_str().into()));
        }
        if let Some(b) = r.baseline {
            doc.tags.push(("agenteval.baseline".into(), b.to_string()));
        }
        doc.tags.push(("agenteval.bundle".into(), r.bundle_uri.clone()));
    }
    for name in [layout::REPORT, layout::REPORT_HTML, layout::SUMMARY, layout::CONFIG, layout::COMPARISON] {
        if let Ok(bytes) = store.get(&run_id, name).await {
            doc.artifacts.push((name.to_string(), bytes));
        }
    }
    let client = Mlflow::new(uri, auth_from_env())?;
    let experiment = experiment.map(str::to_string).unwrap_or_else(|| meta.name.clone());
    let done = client.export(&experiment, &doc).await.map_err(agenteval_core::Error::from)?;
    if json {
        let v = serde_json::json!({
            "run_id": run_id.to_string(),
            "experiment": experiment,
            "experiment_id": done.experiment_id,
            "mlflow_run_id": done.mlflow_run_id,
            "created": done.created,
            "metrics": doc.metrics.len(),
            "params": doc.params.len(),
            "artifacts": done.artifacts,
            "url": done.url,
        });
        println!("{v}");
    } else {
        let how = if done.created { "exported" } else { "updated" };
        println!(
            "{how} run {run_id} as MLflow run {} in experiment `{experiment}`: {} metrics, {} params, {} artifacts\n{}",
            done.mlflow_run_id,
            doc.metrics.len(),
            doc.params.len(),
            done.artifacts,
            done.url
        );
    }
    Ok(exit::OK)
}

/// `MLFLOW_TRACKING_TOKEN`, or `MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD`, as
/// MLflow's own client reads them.
fn auth_from_env() -> Option<Auth> {
    if let Ok(t) = std::env::var("MLFLOW_TRACKING_TOKEN")
        && !t.is_empty()
    {
        return Some(Auth::Bearer(Secret::new(t)));
    }
    let user = std::env::var("MLFLOW_TRACKING_USERNAME").ok()?;
    let password = std::env::var("MLFLOW_TRACKING_PASSWORD").unwrap_or_default();
    Some(Auth::Basic { user, password: Secret::new(password) })
}

/// A metric key MLflow accepts (letters, digits, `_ - . /` and spaces).
fn key(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || "_-./ ".contains(c) { c } else { '_' }).collect()
}

/// The MLflow run of a sealed agenteval run: what its summary, metadata and config say.
fn document(meta: &Metadata, summary: &Value, config: &Value) -> RunExport {
    let mut metrics: Vec<(String, f64)> = [
        "pass_rate",
        "passed",
        "failed",
        "errored",
        "infra",
        "tasks_total",
        "tasks_finished",
        "total_cost_usd",
        "mean_cost_usd",
        "total_tokens",
        "latency_p50_seconds",
        "latency_p95_seconds",
    ]
    .iter()
    .filter_map(|k| summary[*k].as_f64().map(|v| (k.to_string(), v)))
    .collect();
    for (id, e) in summary["evaluators"].as_object().into_iter().flatten() {
        if let Some(m) = e["mean_score"].as_f64() {
            metrics.push((format!("evaluator.{}.mean_score", key(id)), m));
        }
        if let (Some(p), Some(n)) = (e["passed"].as_f64(), e["count"].as_f64().filter(|n| *n > 0.0)) {
            metrics.push((format!("evaluator.{}.pass_rate", key(id)), p / n));
        }
    }
    for (k, v) in summary["pass_at_k"].as_object().into_iter().flatten() {
        if let Some(v) = v.as_f64() {
            metrics.push((format!("pass_at_{}", key(k)), v));
        }
    }
    for (tag, t) in summary["tags"].as_object().into_iter().flatten() {
        if let Some(r) = t["pass_rate"].as_f64() {
            metrics.push((format!("tag.{}.pass_rate", key(tag)), r));
        }
    }
    let agent = &config["agent"];
    let mut params = vec![
        ("name".to_string(), meta.name.clone()),
        ("benchmark".into(), meta.benchmark.clone()),
        ("agent".into(), meta.agent.clone()),
        ("backend".into(), meta.backend.clone()),
        ("config_hash".into(), meta.config_hash.clone()),
        ("agenteval_version".into(), meta.agenteval_version.clone()),
        ("tasks_total".into(), meta.tasks_total.to_string()),
    ];
    // As the spans name it: the configured model, else the agent kind.
    params.push(("model".into(), agent["model"].as_str().unwrap_or(&meta.agent).to_string()));
    for k in ["temperature", "max_turns", "system"] {
        if let Some(v) = agent.get(k).filter(|v| !v.is_null()) {
            let text = v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string());
            // MLflow keeps at most 6,000 characters of a parameter.
            params.push((format!("agent.{k}"), text.chars().take(6000).collect()));
        }
    }
    if let Some(sha) = &meta.git_sha {
        params.push(("git_sha".into(), sha.clone()));
    }
    let tags = vec![("agenteval.status".to_string(), meta.status.as_str().to_string())];
    let status = match meta.status {
        RunStatus::Complete => "FINISHED",
        RunStatus::Failed => "FAILED",
        RunStatus::Running => "RUNNING",
        RunStatus::Interrupted | RunStatus::BudgetExceeded => "KILLED",
    };
    RunExport {
        run_id: meta.run_id.to_string(),
        name: meta.name.clone(),
        params,
        metrics,
        tags,
        artifacts: vec![],
        start_ms: meta.created_at.timestamp_millis(),
        end_ms: meta.finished_at.map(|t| t.timestamp_millis()),
        status,
    }
}
