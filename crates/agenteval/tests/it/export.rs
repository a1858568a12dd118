//! `agenteval export --to mlflow` against a real MLflow tracking server (the `mlflow` package,
//! started here), read back through MLflow's REST API.

use std::process::Command;

use crate::util::ui::{json_request, request};
use crate::util::*;

fn mlflow_server(dir: &std::path::Path) -> (Server, u16) {
    let port = free_port();
    let mut cmd = Command::new(python_tool("mlflow", "mlflow"));
    cmd.args(["server", "--host", "127.0.0.1", "--port", &port.to_string(), "--workers", "1"])
        .arg("--backend-store-uri")
        .arg(format!("sqlite:///{}", dir.join("mlflow.db").display()))
        .arg("--artifacts-destination")
        .arg(dir.join("artifacts"))
        .env("MLFLOW_DISABLE_TELEMETRY", "true")
        .current_dir(dir);
    (start_server(cmd, port, "/health", "the MLflow server"), port)
}

#[test]
fn exporting_a_run_twice_makes_one_mlflow_run_whose_metrics_are_the_summarys() {
    let ws = Workspace::new();
    let tracker = tempfile::tempdir().unwrap();
    let (_server, port) = mlflow_server(tracker.path());
    let uri = format!("http://127.0.0.1:{port}");
    let cfg = toy_config(&ws, 10, 1, 5, 2);
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap().to_string();
    let summary = read_json(&std::path::Path::new(v["bundle"].as_str().unwrap()).join("summary.json"));

    let export = || {
        let out =
            ws.cmd(&["export", &run, "--to", "mlflow", "--json"]).env("MLFLOW_TRACKING_URI", &uri).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let first = export();
    let second = export();
    assert_eq!(first["created"], true, "{first}");
    assert_eq!(second["created"], false, "the second export updates: {second}");
    assert_eq!(first["mlflow_run_id"], second["mlflow_run_id"]);

    let found = json_request(
        port,
        "POST",
        "/api/2.0/mlflow/runs/search",
        &serde_json::json!({"experiment_ids": [first["experiment_id"]], "max_results": 100}),
    )
    .json();
    let runs = found["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "one MLflow run per agenteval run: {found}");
    let got = request(
        port,
        "GET",
        &format!("/api/2.0/mlflow/runs/get?run_id={}", first["mlflow_run_id"].as_str().unwrap()),
        "127.0.0.1",
        &[],
    )
    .json();
    let data = &got["run"]["data"];
    let metric = |k: &str| {
        data["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["key"] == k)
            .unwrap_or_else(|| panic!("no metric {k}: {data}"))["value"]
            .as_f64()
            .unwrap()
    };
    for k in ["pass_rate", "passed", "failed", "errored", "tasks_total", "total_cost_usd", "total_tokens"] {
        assert!((metric(k) - summary[k].as_f64().unwrap()).abs() < 1e-9, "{k}: {} vs {}", metric(k), summary[k]);
    }
    assert!(
        (metric("evaluator.exact_match.mean_score")
            - summary["evaluators"]["exact_match"]["mean_score"].as_f64().unwrap())
        .abs()
            < 1e-9
    );
    let field = |list: &str, k: &str| {
        data[list].as_array().unwrap().iter().find(|p| p["key"] == k).map(|p| p["value"].as_str().unwrap().to_string())
    };
    assert_eq!(field("params", "model").as_deref(), Some("mock"), "{data}");
    assert_eq!(field("params", "benchmark").as_deref(), Some("toy"));
    assert!(field("params", "config_hash").is_some_and(|h| h.len() == 64));
    assert_eq!(field("tags", "agenteval.run_id").as_deref(), Some(run.as_str()));
    assert_eq!(field("tags", "agenteval.status").as_deref(), Some("complete"));
    assert_eq!(got["run"]["info"]["status"], "FINISHED");
    let listed = request(
        port,
        "GET",
        &format!("/api/2.0/mlflow/artifacts/list?run_id={}", first["mlflow_run_id"].as_str().unwrap()),
        "127.0.0.1",
        &[],
    )
    .json();
    let files: Vec<&str> = listed["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    for f in ["report.md", "report.html", "summary.json"] {
        assert!(files.contains(&f), "{f} is an artifact: {files:?}");
    }

    // No server configured, or none there: one clear line each, nothing half-done.
    let out = ws.cmd(&["export", &run, "--to", "mlflow"]).env_remove("MLFLOW_TRACKING_URI").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("MLFLOW_TRACKING_URI"), "{}", text(&out.stderr));
    let dead = format!("http://127.0.0.1:{}", free_port());
    let out = ws.cmd(&["export", &run, "--to", "mlflow", "--tracking-uri", &dead]).output().unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("cannot reach the MLflow tracking server"), "{}", text(&out.stderr));
}
