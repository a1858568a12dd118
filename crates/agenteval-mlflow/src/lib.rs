//! Exports an agenteval run to an MLflow tracking server over its REST API (`/api/2.0/mlflow`):
//! one MLflow run per agenteval run, found again by its `agenteval.run_id` tag, so a second
//! export updates that run instead of making another. The core knows nothing of MLflow.

use agenteval_core::secret::Secret;
use serde_json::{Value, json};

/// What goes to MLflow for one agenteval run.
#[derive(Debug, Clone, Default)]
pub struct RunExport {
    /// The agenteval run id: the key a second export finds the MLflow run by.
    pub run_id: String,
    /// The MLflow run's name (`mlflow.runName`).
    pub name: String,
    pub params: Vec<(String, String)>,
    pub metrics: Vec<(String, f64)>,
    pub tags: Vec<(String, String)>,
    /// Files for the run's artifacts: name and bytes.
    pub artifacts: Vec<(String, Vec<u8>)>,
    /// Milliseconds since the epoch.
    pub start_ms: i64,
    pub end_ms: Option<i64>,
    /// `FINISHED`, `FAILED`, `KILLED` or `RUNNING`.
    pub status: &'static str,
}

/// Where the run landed.
#[derive(Debug, Clone, PartialEq)]
pub struct Exported {
    pub experiment_id: String,
    pub mlflow_run_id: String,
    /// False when an earlier export's run was updated.
    pub created: bool,
    pub artifacts: usize,
    /// The run's page in the MLflow UI.
    pub url: String,
}

/// Why an export failed; `kind` says whether trying again may help.
#[derive(Debug, thiserror::Error)]
pub enum MlflowError {
    #[error(
        "the tracking URI `{0}` is not an http:// or https:// URL (MLflow's REST API); a local folder cannot be written to from here"
    )]
    Uri(String),
    #[error("cannot reach the MLflow tracking server at {url}: {message}")]
    Unreachable { url: String, message: String },
    #[error("MLflow answered {status} to {call}: {message}")]
    Api { call: String, status: u16, message: String },
}

impl MlflowError {
    /// The core's kind: a bad URI is the user's; a server that cannot be reached or fails is
    /// transient (try again later); a refused credential is unauthorized; another refusal is a
    /// failed operation.
    pub fn kind(&self) -> agenteval_core::ErrorKind {
        use agenteval_core::ErrorKind as K;
        match self {
            MlflowError::Uri(_) => K::Invalid,
            MlflowError::Unreachable { .. } => K::Transient,
            MlflowError::Api { status, .. } if *status >= 500 || *status == 429 => K::Transient,
            MlflowError::Api { status: 401 | 403, .. } => K::Unauthorized,
            MlflowError::Api { .. } => K::Io,
        }
    }
}

impl From<MlflowError> for agenteval_core::Error {
    fn from(e: MlflowError) -> Self {
        agenteval_core::Error::new(e.kind(), e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, MlflowError>;

/// The tag that ties an MLflow run to its agenteval run.
pub const RUN_ID_TAG: &str = "agenteval.run_id";
/// Most metrics, params or tags in one `log-batch` call (MLflow's own limits are 1000, 100, 100).
const BATCH: usize = 100;

/// A tracking server's REST API.
pub struct Mlflow {
    base: String,
    http: reqwest::Client,
    /// `MLFLOW_TRACKING_TOKEN` (bearer) or `MLFLOW_TRACKING_USERNAME`/`PASSWORD` (basic).
    auth: Option<Auth>,
}

/// How requests authenticate.
#[derive(Debug)]
pub enum Auth {
    Bearer(Secret),
    Basic { user: String, password: Secret },
}

impl Mlflow {
    pub fn new(tracking_uri: &str, auth: Option<Auth>) -> Result<Mlflow> {
        let base = tracking_uri.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(MlflowError::Uri(tracking_uri.to_string()));
        }
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .map_err(|e| MlflowError::Unreachable { url: base.clone(), message: e.to_string() })?;
        tracing::info!(
            "transport: MLflow calls {} over {}",
            agenteval_core::config::host_in(&base),
            agenteval_core::config::posture(&base)
        );
        Ok(Mlflow { base, http, auth })
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        query: &[(&str, &str)],
    ) -> Result<Value> {
        let mut url = format!("{}{path}", self.base);
        for (i, (k, v)) in query.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(&format!("{}={}", encode(k), encode(v)));
        }
        let mut req = self.http.request(method, &url);
        if let Some(b) = body {
            req = req.json(&b);
        }
        req = self.authed(req);
        let resp =
            req.send().await.map_err(|e| MlflowError::Unreachable { url: self.base.clone(), message: chain(&e) })?;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        if !(200..300).contains(&status) {
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| text.chars().take(300).collect());
            return Err(MlflowError::Api { call: path.to_string(), status, message });
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    fn authed(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.auth {
            Some(Auth::Bearer(t)) => req.bearer_auth(t.expose()),
            Some(Auth::Basic { user, password }) => req.basic_auth(user, Some(password.expose())),
            None => req,
        }
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value> {
        self.call(reqwest::Method::POST, &format!("/api/2.0/mlflow/{path}"), Some(body), &[]).await
    }

    /// The experiment's id, creating it when there is none by that name.
    async fn experiment(&self, name: &str) -> Result<String> {
        let got = self
            .call(reqwest::Method::GET, "/api/2.0/mlflow/experiments/get-by-name", None, &[("experiment_name", name)])
            .await;
        match got {
            Ok(v) => Ok(v["experiment"]["experiment_id"].as_str().unwrap_or_default().to_string()),
            Err(MlflowError::Api { status: 404, .. }) => {
                let v = self.post("experiments/create", json!({"name": name})).await?;
                Ok(v["experiment_id"].as_str().unwrap_or_default().to_string())
            }
            Err(e) => Err(e),
        }
    }

    /// The MLflow run an earlier export made for this agenteval run, if any.
    async fn find(&self, experiment: &str, run_id: &str) -> Result<Option<(String, String)>> {
        let filter = format!("tags.`{RUN_ID_TAG}` = '{}'", run_id.replace('\'', ""));
        let v = self
            .post("runs/search", json!({"experiment_ids": [experiment], "filter": filter, "max_results": 1}))
            .await?;
        Ok(v["runs"].as_array().and_then(|r| r.first()).map(|r| {
            let info = &r["info"];
            (
                info["run_id"].as_str().unwrap_or_default().to_string(),
                info["artifact_uri"].as_str().unwrap_or_default().to_string(),
            )
        }))
    }

    /// Exports `run` into `experiment`: creates its MLflow run or updates the one an earlier
    /// export made, logs params, metrics and tags, uploads the artifacts, and sets its status.
    pub async fn export(&self, experiment: &str, run: &RunExport) -> Result<Exported> {
        let experiment_id = self.experiment(experiment).await?;
        let (mlflow_run_id, artifact_uri, created) = match self.find(&experiment_id, &run.run_id).await? {
            Some((id, uri)) => (id, uri, false),
            None => {
                let v = self
                    .post(
                        "runs/create",
                        json!({
                            "experiment_id": experiment_id,
                            "run_name": run.name,
                            "start_time": run.start_ms,
                            "tags": [{"key": RUN_ID_TAG, "value": run.run_id}, {"key": "mlflow.runName", "value": run.name}],
                        }),
                    )
                    .await?;
                let info = &v["run"]["info"];
                (
                    info["run_id"].as_str().unwrap_or_default().to_string(),
                    info["artifact_uri"].as_str().unwrap_or_default().to_string(),
                    true,
                )
            }
        };
        let ts = run.end_ms.unwrap_or(run.start_ms);
        let metrics: Vec<Value> =
            run.metrics.iter().map(|(k, v)| json!({"key": k, "value": v, "timestamp": ts, "step": 0})).collect();
        let params: Vec<Value> = run.params.iter().map(|(k, v)| json!({"key": k, "value": v})).collect();
        let tags: Vec<Value> = run.tags.iter().map(|(k, v)| json!({"key": k, "value": v})).collect();
        // Params cannot change once logged: an update logs the same ones again, which MLflow
        // accepts; a changed value is its error, said as such.
        for chunk in metrics.chunks(BATCH) {
            self.post("runs/log-batch", json!({"run_id": mlflow_run_id, "metrics": chunk})).await?;
        }
        for chunk in params.chunks(BATCH) {
            self.post("runs/log-batch", json!({"run_id": mlflow_run_id, "params": chunk})).await?;
        }
        for chunk in tags.chunks(BATCH) {
            self.post("runs/log-batch", json!({"run_id": mlflow_run_id, "tags": chunk})).await?;
        }
        let mut uploaded = 0;
        for (name, bytes) in &run.artifacts {
            self.upload(&artifact_uri, name, bytes).await?;
            uploaded += 1;
        }
        let mut update = json!({"run_id": mlflow_run_id, "status": run.status});
        if let Some(end) = run.end_ms {
            update["end_time"] = json!(end);
        }
        self.post("runs/update", update).await?;
        let url = format!("{}/#/experiments/{experiment_id}/runs/{mlflow_run_id}", self.base);
        Ok(Exported { experiment_id, mlflow_run_id, created, artifacts: uploaded, url })
    }

    /// Puts one artifact through the server's artifact proxy (`mlflow-artifacts:/…`, the
    /// default of `mlflow server`). Another artifact store is not reachable from here.
    async fn upload(&self, artifact_uri: &str, name: &str, bytes: &[u8]) -> Result<()> {
        let Some(path) = artifact_uri.strip_prefix("mlflow-artifacts:") else {
            return Err(MlflowError::Api {
                call: "artifacts".into(),
                status: 400,
                message: format!(
                    "the run's artifact store is `{artifact_uri}`; start the server with artifact serving (`mlflow server --serve-artifacts`, the default) to upload the reports"
                ),
            });
        };
        let path = path.trim_start_matches('/');
        let url = format!("{}/api/2.0/mlflow-artifacts/artifacts/{path}/{name}", self.base);
        let req = self.authed(self.http.put(&url).body(bytes.to_vec()));
        let resp =
            req.send().await.map_err(|e| MlflowError::Unreachable { url: self.base.clone(), message: chain(&e) })?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let message: String = resp.text().await.unwrap_or_default().chars().take(300).collect();
            return Err(MlflowError::Api { call: format!("artifacts/{name}"), status, message });
        }
        Ok(())
    }
}

/// `s` percent-encoded for a query string.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An error with its causes, on one line (reqwest says "error sending request" and hides why).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_tracking_uris_are_taken_and_errors_say_if_retrying_helps() {
        assert!(matches!(Mlflow::new("file:///tmp/mlruns", None), Err(MlflowError::Uri(_))));
        assert!(Mlflow::new("http://127.0.0.1:5000/", None).is_ok());
        let e = MlflowError::Api { call: "runs/create".into(), status: 503, message: "busy".into() };
        assert_eq!(e.kind(), agenteval_core::ErrorKind::Transient);
        let e = MlflowError::Api { call: "runs/create".into(), status: 400, message: "bad".into() };
        assert_eq!(e.kind(), agenteval_core::ErrorKind::Io);
    }

    #[test]
    fn a_token_never_shows_in_debug_output() {
        let auth = Auth::Bearer(Secret::new("tok-SECRET-123".to_string()));
        assert!(!format!("{auth:?}").contains("SECRET"));
    }

    #[tokio::test]
    async fn an_unreachable_server_is_one_line_naming_it() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let m = Mlflow::new(&format!("http://127.0.0.1:{port}"), None).unwrap();
        let e = m.export("x", &RunExport { status: "FINISHED", ..RunExport::default() }).await.unwrap_err();
        assert!(matches!(e, MlflowError::Unreachable { .. }), "{e}");
        assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
    }
}
