//! `agenteval export RUN --to mlflow`: a run's parameters, metrics, tags and report files as
//! one MLflow run (`agenteval-mlflow`), built here from the bundle and the index; `--to
//! swebench`: a SWE-bench run's predictions and reports in the official harness's shapes.

use agenteval_core::layout;
use agenteval_core::model::RunStatus;
use agenteval_core::secret::Secret;
use agenteval_engine::bundle::{Metadata, read_json};
use agenteval_engine::controller;
use agenteval_mlflow::{Auth, Mlflow, RunExport};
use serde_json::Value;

use crate::cli::IndexArgs;
use crate::session::open_index;
use crate::{Failure, exit};

/// The command.
pub async fn export(
    run: &str,
    index: &IndexArgs,
    tracking_uri: Option<&str>,
    experiment: Option<&str>,
    json: bool,
) -> Result<u8, Failure> {
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
        say!("{v}");
    } else {
        let how = if done.created { "exported" } else { "updated" };
        say!(
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
    if let Some(g) = &meta.agent_git {
        params.push(("agent_git_commit".into(), g.commit.clone()));
        params.push(("agent_git_dirty".into(), g.dirty.to_string()));
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

/// `export RUN --to swebench`: the run's predictions and the harness's reports, from each task's
/// `artifacts/swebench/` (a task never graded is incomplete, one whose patch did not apply or
/// whose tests timed out an error, as the harness sorts them).
// Long: one pass over the run's tasks, each sorted and written; the report after.
pub async fn swebench(
    run: &str,
    index: &IndexArgs,
    out: Option<std::path::PathBuf>,
    json: bool,
) -> Result<u8, Failure> {
    use agenteval_swebench::report::{Sorted, run_report};
    use std::collections::BTreeMap;
    let (wiring, index) = open_index(index).await?;
    let run_id = crate::judging::resolve_ref(index.as_ref(), run).await?;
    let located = controller::locate(wiring.as_ref(), index.as_ref(), &run_id).await?;
    let store = located.store.as_ref();
    let meta: Metadata = read_json(store, &run_id, layout::METADATA).await?;
    if meta.benchmark != "swebench" {
        return Err(Failure {
            code: exit::USAGE,
            error: anyhow::anyhow!(
                "run {run_id} is a `{}` run: `--to swebench` exports `swebench` runs",
                meta.benchmark
            ),
        });
    }
    let config: Value = read_json(store, &run_id, layout::CONFIG).await.unwrap_or(Value::Null);
    let fallback_model = config["agent"]["model"].as_str().unwrap_or(&meta.agent).to_string();
    let mut tasks: Vec<agenteval_core::TaskId> = Vec::new();
    agenteval_core::lines::each_line(store, &run_id, layout::TASKS, &mut |_, l| {
        if let Ok(t) = serde_json::from_slice::<agenteval_core::model::TaskSpec>(l)
            && t.id.as_str() == t.id.base()
        {
            tasks.push(t.id);
        }
        Ok(())
    })
    .await?;
    let out = out.unwrap_or_else(|| std::path::PathBuf::from(format!("swebench-{run_id}")));
    let io = |what: &str, e: std::io::Error| agenteval_core::Error::io(format!("{what} in {}", out.display()), e);
    std::fs::create_dir_all(&out).map_err(|e| io("creating the folder", e))?;
    let (mut outcomes, mut submitted, mut predictions) = (BTreeMap::new(), Vec::new(), String::new());
    let mut model = fallback_model.clone();
    for id in &tasks {
        let file = |name: &'static str| agenteval_core::taskpack::read_task_file(store, &run_id, id, name);
        let Ok(pred) = file("artifacts/swebench/prediction.json").await else { continue };
        let mut pred: Value = serde_json::from_slice(&pred).unwrap_or(Value::Null);
        if pred["model_name_or_path"].is_null() {
            pred["model_name_or_path"] = Value::String(fallback_model.clone());
        }
        if pred.get("no_prediction").is_some() || pred["model_name_or_path"].is_null() {
            continue;
        }
        model = pred["model_name_or_path"].as_str().unwrap_or(&fallback_model).to_string();
        predictions.push_str(&format!("{pred}\n"));
        submitted.push(id.to_string());
        let report: Option<Value> =
            file("artifacts/swebench/report.json").await.ok().and_then(|b| serde_json::from_slice(&b).ok());
        let r = report.as_ref().map(|r| &r[id.as_str()]);
        let sorted = match r {
            _ if pred["model_patch"].as_str().is_none_or(str::is_empty) => Sorted::EmptyPatch,
            Some(r) if r.get("error").is_none() && r["resolved"] == true => Sorted::Resolved,
            Some(r) if r.get("error").is_none() && r["patch_successfully_applied"].is_boolean() => Sorted::Unresolved,
            _ => Sorted::Error,
        };
        outcomes.insert(id.to_string(), sorted);
        if matches!(sorted, Sorted::Resolved | Sorted::Unresolved) {
            let dir = out
                .join("logs/run_evaluation")
                .join(run_id.to_string())
                .join(model.replace('/', "__"))
                .join(id.as_str());
            std::fs::create_dir_all(&dir).map_err(|e| io("creating the logs", e))?;
            if let Some(r) = &report {
                std::fs::write(dir.join("report.json"), serde_json::to_vec_pretty(r).unwrap_or_default())
                    .map_err(|e| io("writing a report", e))?;
            }
            if let Ok(log) = file("artifacts/swebench/test_output.txt").await {
                std::fs::write(dir.join("test_output.txt"), log).map_err(|e| io("writing a test log", e))?;
            }
        }
    }
    let total: Vec<String> = tasks.iter().map(|t| t.to_string()).collect();
    let report = run_report(&total, &submitted, &outcomes);
    let report_file = out.join(format!("{}.{run_id}.json", model.replace('/', "__")));
    std::fs::write(out.join("predictions.jsonl"), predictions).map_err(|e| io("writing predictions.jsonl", e))?;
    std::fs::write(&report_file, serde_json::to_vec_pretty(&report).unwrap_or_default())
        .map_err(|e| io("writing the report", e))?;
    if json {
        say!(
            "{}",
            serde_json::json!({"run_id": run_id.to_string(), "out": out, "report": report_file, "summary": report})
        );
    } else {
        say!(
            "exported run {run_id} as SWE-bench files in {}: {} of {} instances resolved ({} submitted, {} errors, {} empty patches); report {}",
            out.display(),
            report["resolved_instances"],
            report["total_instances"],
            report["submitted_instances"],
            report["error_instances"],
            report["empty_patch_instances"],
            report_file.display()
        );
    }
    Ok(exit::OK)
}

/// `export RUN --to atif`: each task attempt's trajectory as an ATIF document (`<task>.json`)
/// and `summary.json`: how many documents, model calls and tool calls, what went under
/// `extra`, and the tasks whose agent left no trace.
pub async fn atif(run: &str, index: &IndexArgs, out: Option<std::path::PathBuf>, json: bool) -> Result<u8, Failure> {
    let (wiring, index) = open_index(index).await?;
    let run_id = crate::judging::resolve_ref(index.as_ref(), run).await?;
    let located = controller::locate(wiring.as_ref(), index.as_ref(), &run_id).await?;
    let store = located.store.as_ref();
    let meta: Metadata = read_json(store, &run_id, layout::METADATA).await?;
    let out = out.unwrap_or_else(|| std::path::PathBuf::from(format!("atif-{run_id}")));
    let written = crate::interchange::write_atif(store, &run_id, &meta, &located.config, &out).await?;
    if json {
        say!("{}", serde_json::to_string(&written).expect("serializes"));
    } else {
        say!(
            "wrote {} ATIF trajectories ({} model calls, {} tool calls) to {}",
            written.documents,
            written.model_calls,
            written.tool_calls,
            out.display()
        );
        if !written.no_trace.is_empty() {
            say!(
                "  {} task(s) whose agent left no trace: their documents hold the instruction only",
                written.no_trace.len()
            );
        }
        if !written.not_run.is_empty() {
            say!("  {} task(s) never ran: no document", written.not_run.len());
        }
    }
    Ok(exit::OK)
}

/// `export RUN --to harbor --out DIR`: the run as a Harbor job folder (DIR's name is the job's;
/// Harbor's viewer reads DIR's parent).
pub async fn harbor(run: &str, index: &IndexArgs, out: Option<std::path::PathBuf>, json: bool) -> Result<u8, Failure> {
    let Some(out) = out else {
        return Err(Failure {
            code: exit::USAGE,
            error: anyhow::anyhow!("--to harbor needs --out DIR: the job folder to write"),
        });
    };
    let (wiring, index) = open_index(index).await?;
    let run_id = crate::judging::resolve_ref(index.as_ref(), run).await?;
    let located = controller::locate(wiring.as_ref(), index.as_ref(), &run_id).await?;
    let store = located.store.as_ref();
    let meta: Metadata = read_json(store, &run_id, layout::METADATA).await?;
    let written = crate::interchange::write_harbor(store, &run_id, &meta, &located.config, &out).await?;
    if json {
        say!("{}", serde_json::to_string(&written).expect("serializes"));
    } else {
        say!(
            "wrote a Harbor job of {} trials to {} ({} tasks pinned in lock.json)",
            written.trials,
            written.job_dir,
            written.locked
        );
        say!("  view it: harbor view {}", out.parent().map_or(".".into(), |p| p.display().to_string()));
    }
    Ok(exit::OK)
}

/// `export RUN --to otlp`: the run's spans as OTLP JSON lines (`otlp.rs`).
pub async fn otlp(run: &str, index: &IndexArgs, out: Option<std::path::PathBuf>, json: bool) -> Result<u8, Failure> {
    let (wiring, index) = open_index(index).await?;
    let run_id = crate::judging::resolve_ref(index.as_ref(), run).await?;
    let located = controller::locate(wiring.as_ref(), index.as_ref(), &run_id).await?;
    let out = out.unwrap_or_else(|| std::path::PathBuf::from(format!("traces-{run_id}.jsonl")));
    let written = crate::otlp::write(located.store.as_ref(), &run_id, &out).await?;
    if json {
        say!("{}", serde_json::to_string(&written).expect("serializes"));
    } else {
        say!(
            "wrote {} spans of run {run_id} to {} ({} OTLP requests, one per line)",
            written.spans,
            written.out,
            written.requests
        );
        if written.skipped > 0 {
            say!("  {} line(s) of the bundle's span files were not spans: left out", written.skipped);
        }
    }
    Ok(exit::OK)
}
