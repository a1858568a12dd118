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
                        && keep("verdict", r.verdict.map_or("", |v| v.as_str()))
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
            let judged = data::judged(&app, &r).await?;
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

/// How much of a trace is read at once while streaming it.
const TRACE_PIECE: u64 = 1 << 20;

/// `/runs/{run}/tasks/{task}/trace.jsonl`: the task's whole trace as the bundle holds it, read
/// a piece at a time as the client takes it, so a trace of any size costs the server one piece
/// (pages and reports show a budgeted part of it). Served as plain text: never rendered.
pub async fn trace(State(app): State<Arc<App>>, Path((run, task)): Path<(String, String)>) -> Response {
    let opened = async {
        let id = data::task_id(&task)?;
        let r = data::record(&app, &run).await?;
        let store = data::store(&app, &r).await?;
        // A pack's trace inflates a piece at a time as the client takes it; a task folder's
        // file is read a piece at a time.
        match store.get(&r.run_id, &agenteval_core::layout::task_pack(&id)).await {
            Ok(pack) => return Ok(Err(pack_trace(pack, agenteval_core::layout::task_pack(&id)).await?)),
            Err(e) if e.kind() == agenteval_core::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        let path = agenteval_core::layout::task_file(&id, agenteval_core::layout::TASK_TRACE);
        let first = store.read_range(&r.run_id, &path, 0, TRACE_PIECE).await?;
        Ok::<_, Problem>(Ok((store, r.run_id, path, first)))
    }
    .await;
    let (store, run, path, first) = match opened {
        Ok(Ok(o)) => o,
        Ok(Err(body)) => {
            return ([(axum::http::header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response();
        }
        Err(p) => return (p.status, Json(json!({"error": p.message}))).into_response(),
    };
    // State: the piece already read (the first), where the next one starts, whether to stop.
    let pieces = futures::stream::unfold((Some(first), 0u64, false), move |(piece, offset, done)| {
        let (store, run, path) = (store.clone(), run, path.clone());
        async move {
            if done {
                return None;
            }
            let piece = match piece {
                Some(p) => p,
                None => match store.read_range(&run, &path, offset, TRACE_PIECE).await {
                    Ok(p) => p,
                    // Headers are sent: a failure can only cut the body short.
                    Err(e) => return Some((Err(std::io::Error::other(e.to_string())), (None, offset, true))),
                },
            };
            if piece.is_empty() {
                return None;
            }
            let next = offset + piece.len() as u64;
            Some((Ok(axum::body::Bytes::from(piece)), (None, next, false)))
        }
    });
    ([(axum::http::header::CONTENT_TYPE, "text/plain; charset=utf-8")], axum::body::Body::from_stream(pieces))
        .into_response()
}

/// A pack's `trace.jsonl` as a body that inflates on a blocking thread, a piece ahead of the
/// client (a hostile pack may inflate to 1 GiB: it is never held, and inflating stops when the
/// client goes away). A pack without a trace, or not a pack, is an error before any byte.
async fn pack_trace(pack: Vec<u8>, what: String) -> Result<axum::body::Body, Problem> {
    type Piece = std::result::Result<axum::body::Bytes, std::io::Error>;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Piece>(2);
    tokio::task::spawn_blocking(move || {
        let file = agenteval_core::layout::TASK_TRACE;
        let read = agenteval_core::taskpack::unpack_pieces(&pack, file, &what, &mut |piece| {
            tx.blocking_send(Ok(axum::body::Bytes::copy_from_slice(piece))).is_ok()
        });
        let failed = match read {
            Ok(Some(_)) => return,
            Ok(None) => std::io::Error::new(std::io::ErrorKind::NotFound, format!("{what} holds no {file}")),
            Err(e) => std::io::Error::other(e.to_string()),
        };
        let _ = tx.blocking_send(Err(failed));
    });
    // The first piece decides between a trace and an error; an empty trace sends none.
    let first = match rx.recv().await {
        Some(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(agenteval_core::Error::not_found(e.to_string()).into());
        }
        Some(Err(e)) => return Err(agenteval_core::Error::corrupt(e.to_string()).into()),
        first => first,
    };
    let rest = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|p| (p, rx)) });
    Ok(axum::body::Body::from_stream(futures::StreamExt::chain(futures::stream::iter(first), rest)))
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

/// `/api/history?name=&task=&last=`: one task across a name's nights, as `agenteval history
/// NAME --task ID --json` prints it.
pub async fn history(State(app): State<Arc<App>>, Query(q): Query<HashMap<String, String>>) -> Response {
    answer(
        async {
            let (name, task, nights) = data::task_history(&app, &q).await?;
            Ok(json!({"name": name, "task": task.as_str(), "nights": nights}))
        }
        .await,
    )
}
