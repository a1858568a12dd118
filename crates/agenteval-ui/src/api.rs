//! The JSON API: the same data as the pages. Unknown runs and tasks are 404, malformed
//! parameters 400, each with `{"error": "…"}`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::App;
use crate::data::{self, Problem};

fn answer(r: Result<Value, Problem>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(p) => (p.status, Json(json!({"error": p.message}))).into_response(),
    }
}

/// `/api/runs?name=&benchmark=&status=&verdict=&backend=&page=&per_page=`: newest first.
pub async fn runs(State(app): State<Arc<App>>, Query(q): Query<HashMap<String, String>>) -> Response {
    answer(
        async {
            let page = crate::pages::page_number(&q)?;
            let per = match q.get("per_page") {
                None => 50,
                Some(p) => p
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or_else(|| Problem::bad_request(format!("`per_page={p}`: 1 to 1000")))?,
            };
            let status = q.get("status").filter(|s| !s.is_empty());
            if let Some(s) = status
                && agenteval_core::model::RunStatus::parse(s).is_none()
            {
                return Err(Problem::bad_request(format!("`{s}` is not a run status")));
            }
            let all = data::listing(&app).await?;
            let keep = |k: &str, v: &str| q.get(k).is_none_or(|w| w.is_empty() || w == v);
            let matching: Vec<_> = all
                .iter()
                .filter(|r| {
                    keep("name", &r.name)
                        && keep("benchmark", &r.benchmark)
                        && keep("status", r.status.as_str())
                        && keep("verdict", r.verdict.as_deref().unwrap_or(""))
                        && keep("backend", &r.backend)
                })
                .collect();
            let runs: Vec<_> = matching.iter().skip((page - 1) * per).take(per).collect();
            Ok(json!({"runs": runs, "total": matching.len(), "page": page, "per_page": per}))
        }
        .await,
    )
}

/// `/api/runs/{run}`: the record, and the summary (sealed) or the progress (running).
pub async fn run(State(app): State<Arc<App>>, Path(run): Path<String>) -> Response {
    answer(
        async {
            let r = data::record(&app, &run).await?;
            let progress = if data::live(&r) { Some(data::progress(&app, &r).await?) } else { None };
            let summary = data::summary(&app, &r).await;
            let judged = data::judged(&app, &r).await;
            Ok(json!({"run": r, "summary": summary.as_deref(), "progress": progress, "judged": judged}))
        }
        .await,
    )
}

/// `/api/runs/{run}/tasks/{task}`: the task's result and worker log.
pub async fn task(State(app): State<Arc<App>>, Path((run, task)): Path<(String, String)>) -> Response {
    answer(
        async {
            let id = data::task_id(&task)?;
            let r = data::record(&app, &run).await?;
            let (result, log) = data::task_files(&app, &r, &id).await?;
            Ok(json!({"result": result, "log": log}))
        }
        .await,
    )
}

/// `/api/compare?base=&cand=&gates=on`: the comparison (and the verdict).
pub async fn compare(State(app): State<Arc<App>>, Query(q): Query<HashMap<String, String>>) -> Response {
    answer(
        async {
            let c = crate::pages::compared(&app, &q).await?;
            Ok(json!({"comparison": c.comparison, "verdict": c.verdict}))
        }
        .await,
    )
}
