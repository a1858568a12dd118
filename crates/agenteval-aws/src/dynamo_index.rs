//! `RunIndex` in one DynamoDB table (single-table design, see `docs/aws.md`).
//!
//! | item | pk | sk | GSIs |
//! |---|---|---|---|
//! | run  | `RUN#<run_id>` | `#RUN` | `by_created` (`RUNS`, `<created_at>#<run_id>`), `by_benchmark` (`BENCH#<benchmark>`, same) |
//! | task | `RUN#<run_id>` | `TASK#<task_id>` | — |
//! | job  | `RUN#<run_id>` | `JOB#<job_id>#<attempt:06>` | — |
//!
//! A task's state machine is one conditional `UpdateItem`, so racing attempts serialize in
//! DynamoDB and a task completes exactly once.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use agenteval_core::model::*;
use agenteval_core::traits::RunIndex;
use agenteval_core::{Error, JobId, Result, RunId, TaskId};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, PutRequest, ScalarAttributeType, WriteRequest,
};
use chrono::{DateTime, SecondsFormat, Utc};

use crate::sdk::{AwsClients, classify};

type Item = HashMap<String, AttributeValue>;

pub const GSI_CREATED: &str = "by_created";
pub const GSI_BENCHMARK: &str = "by_benchmark";

#[derive(Clone, Debug)]
pub struct DynamoDbRunIndex {
    clients: Arc<AwsClients>,
    table: String,
    /// Items of runs this handle creates expire (table TTL) this long after creation.
    retention: Option<chrono::Duration>,
}

/// The table's design, which `create_table` and the deployment template (infra/) follow: the
/// key, the two GSIs (name, hash key, range key, all projected) and the TTL attribute.
pub const KEY: (&str, &str) = ("pk", "sk");
pub const INDEXES: [(&str, &str, &str); 2] = [(GSI_CREATED, "gsi1pk", "gsi1sk"), (GSI_BENCHMARK, "gsi2pk", "gsi2sk")];
pub const TTL_ATTRIBUTE: &str = "expires_at";

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}
fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}
fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}
fn opt_s(v: Option<impl Into<String>>) -> AttributeValue {
    v.map(|x| s(x)).unwrap_or(AttributeValue::Null(true))
}

/// The core's task-state rule (`model::state_rule`) as a DynamoDB condition over the task's
/// item (`#st` and `#rk` name `state` and `rank`; `:a`, `:rk` and `:completed` are the
/// transition's attempt, rank and the literal `completed`).
fn transition_guard() -> String {
    agenteval_core::model::state_rule(&agenteval_core::model::StateRuleText {
        state: "#st",
        completed: ":completed",
        not_equal: "<>",
        attempt: "attempt",
        new_attempt: ":a",
        rank: "#rk",
        new_rank: ":rk",
    })
}

fn run_pk(run: &RunId) -> String {
    format!("RUN#{run}")
}

fn corrupt(what: &str) -> Error {
    Error::corrupt(format!("run index item has a bad or missing `{what}`"))
}

fn get_s<'a>(item: &'a Item, k: &str) -> Result<&'a str> {
    item.get(k).and_then(|v| v.as_s().ok()).map(String::as_str).ok_or_else(|| corrupt(k))
}
fn get_opt_s(item: &Item, k: &str) -> Option<String> {
    item.get(k).and_then(|v| v.as_s().ok()).cloned()
}
fn get_n<T: FromStr>(item: &Item, k: &str) -> Result<T> {
    item.get(k).and_then(|v| v.as_n().ok()).and_then(|x| x.parse().ok()).ok_or_else(|| corrupt(k))
}
fn get_bool(item: &Item, k: &str) -> Option<bool> {
    item.get(k).and_then(|v| v.as_bool().ok()).copied()
}
fn get_ts(item: &Item, k: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(get_s(item, k)?).map(|t| t.with_timezone(&Utc)).map_err(|_| corrupt(k))
}

fn run_from_item(item: &Item) -> Result<RunRecord> {
    Ok(RunRecord {
        run_id: RunId::from_str(get_s(item, "run_id")?)?,
        name: get_s(item, "name")?.into(),
        benchmark: get_s(item, "benchmark")?.into(),
        agent: get_s(item, "agent")?.into(),
        backend: get_s(item, "backend")?.into(),
        status: RunStatus::parse(get_s(item, "status")?).ok_or_else(|| corrupt("status"))?,
        bundle_uri: get_s(item, "bundle_uri")?.into(),
        config_hash: get_s(item, "config_hash")?.into(),
        tasks_total: get_n(item, "tasks_total")?,
        created_at: get_ts(item, "created_at")?,
        updated_at: get_ts(item, "updated_at")?,
        finished_at: get_opt_s(item, "finished_at")
            .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
            .map(|t| t.with_timezone(&Utc)),
        heartbeat_at: get_ts(item, "heartbeat_at")?,
        cancel_requested: get_bool(item, "cancel_requested").unwrap_or(false),
        controller: get_opt_s(item, "controller").unwrap_or_default(),
        epoch: get_n(item, "epoch")?,
        leased_at: get_opt_s(item, "leased_at")
            .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
            .map(|t| t.with_timezone(&Utc)),
        verdict: get_opt_s(item, "verdict").as_deref().and_then(RunVerdict::parse),
        baseline: get_opt_s(item, "baseline").and_then(|b| RunId::from_str(&b).ok()),
        set_id: get_opt_s(item, "set_id"),
        concurrency: get_opt_s(item, "concurrency").and_then(|s| serde_json::from_str(&s).ok()),
    })
}

fn task_from_item(run: &RunId, item: &Item) -> Result<TaskRecord> {
    Ok(TaskRecord {
        run_id: *run,
        task_id: TaskId::from_str(get_s(item, "task_id")?)?,
        state: TaskState::parse(get_s(item, "state")?).ok_or_else(|| corrupt("state"))?,
        attempt: get_n(item, "attempt")?,
        job_id: get_opt_s(item, "job_id").map(|j| JobId::from_str(&j)).transpose()?,
        passed: get_bool(item, "passed"),
        cost_usd: get_n(item, "cost_usd").unwrap_or(0.0),
        cost_unknown: get_bool(item, "cost_unknown").unwrap_or(false),
        tokens: get_n(item, "tokens").unwrap_or(0),
        wall_seconds: get_n(item, "wall_seconds").unwrap_or(0.0),
        terminated_by: get_opt_s(item, "terminated_by")
            .map(|t| serde_json::from_value(serde_json::Value::String(t)).map_err(|_| corrupt("terminated_by")))
            .transpose()?,
        detail: get_opt_s(item, "detail"),
        fault: get_opt_s(item, "fault").as_deref().and_then(AgentFault::parse),
        updated_at: get_ts(item, "updated_at")?,
    })
}

impl DynamoDbRunIndex {
    /// One atomic `ADD` to a run's counters (`expression` with its `values`), and the run's
    /// item after it; a run the table does not have is `NotFound`.
    async fn add_to_run(
        &self,
        run: &RunId,
        expression: &str,
        values: &[(&str, AttributeValue)],
        what: &str,
    ) -> Result<Item> {
        let mut req = self
            .clients
            .dynamodb
            .update_item()
            .table_name(&self.table)
            .key("pk", s(run_pk(run)))
            .key("sk", s("#RUN"))
            .update_expression(expression)
            .condition_expression("attribute_exists(pk)")
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew);
        for (name, value) in values {
            req = req.expression_attribute_values(*name, value.clone());
        }
        match req.send().await {
            Ok(out) => Ok(out.attributes.unwrap_or_default()),
            Err(e) if e.as_service_error().is_some_and(|x| x.is_conditional_check_failed_exception()) => {
                Err(Error::not_found(format!("run {run} is not in the index")))
            }
            Err(e) => Err(classify(what, e)),
        }
    }

    pub fn new(clients: Arc<AwsClients>, table: impl Into<String>) -> Self {
        DynamoDbRunIndex { clients, table: table.into(), retention: None }
    }

    /// Items of the runs created through this handle carry `expires_at` (epoch seconds), `days`
    /// after the run's creation, for the table's TTL.
    pub fn with_retention_days(mut self, days: Option<u32>) -> Self {
        self.retention = days.map(|d| chrono::Duration::days(d.into()));
        self
    }

    /// Writes `tasks` of `run` as `pending` items, 25 to a `BatchWriteItem`; unprocessed ones
    /// (throttling) are written again with backoff.
    async fn put_tasks(&self, run: &RunId, tasks: &[TaskId], expires: Option<AttributeValue>) -> Result<()> {
        let pk = run_pk(run);
        let now = s(ts(Utc::now()));
        let mut pending: Vec<WriteRequest> = Vec::with_capacity(tasks.len());
        for t in tasks {
            let mut item: Item = HashMap::new();
            item.insert("pk".into(), s(&pk));
            item.insert("sk".into(), s(format!("TASK#{t}")));
            item.insert("task_id".into(), s(t.as_str()));
            item.insert("state".into(), s("pending"));
            item.insert("rank".into(), n(0));
            item.insert("attempt".into(), n(0));
            item.insert("updated_at".into(), now.clone());
            if let Some(e) = &expires {
                item.insert(TTL_ATTRIBUTE.into(), e.clone());
            }
            let put = PutRequest::builder().set_item(Some(item)).build().map_err(build_err)?;
            pending.push(WriteRequest::builder().put_request(put).build());
        }
        let mut backoff = Duration::from_millis(50);
        while !pending.is_empty() {
            let rest = pending.split_off(pending.len().min(25));
            let batch = std::mem::replace(&mut pending, rest);
            let out = self
                .clients
                .dynamodb
                .batch_write_item()
                .request_items(&self.table, batch)
                .send()
                .await
                .map_err(|e| classify(&format!("writing tasks of run {run}"), e))?;
            if let Some(left) = out.unprocessed_items().and_then(|m| m.get(&self.table))
                && !left.is_empty()
            {
                pending.extend(left.iter().cloned());
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
        Ok(())
    }

    fn expiry(&self, from: chrono::DateTime<Utc>) -> Option<AttributeValue> {
        self.retention.map(|r| n((from + r).timestamp()))
    }

    /// A `dynamodb://table` URI.
    pub fn from_uri(clients: Arc<AwsClients>, uri: &str) -> Result<Self> {
        let table = uri
            .strip_prefix("dynamodb://")
            .filter(|t| !t.is_empty() && !t.contains('/'))
            .ok_or_else(|| Error::invalid(format!("`{uri}` is not a dynamodb://table URI")))?;
        Ok(Self::new(clients, table))
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// Fails `NotFound` when the table is not there, for a read command to say so before it
    /// reads (a worker, which may not describe tables, never asks).
    pub async fn exists(&self) -> Result<()> {
        self.clients
            .dynamodb
            .describe_table()
            .table_name(&self.table)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify(&format!("the run index table {}", self.table), e))
    }

    /// Creates the table with its GSIs (on-demand billing). For tests and first-time setup;
    /// production tables come from the deployment template.
    pub async fn create_table(&self) -> Result<()> {
        let attr = |name: &str| {
            AttributeDefinition::builder().attribute_name(name).attribute_type(ScalarAttributeType::S).build()
        };
        let key = |name: &str, t: KeyType| KeySchemaElement::builder().attribute_name(name).key_type(t).build();
        let gsi = |name: &str, pk: &str, sk: &str| -> Result<GlobalSecondaryIndex> {
            GlobalSecondaryIndex::builder()
                .index_name(name)
                .key_schema(key(pk, KeyType::Hash).map_err(build_err)?)
                .key_schema(key(sk, KeyType::Range).map_err(build_err)?)
                .projection(Projection::builder().projection_type(ProjectionType::All).build())
                .build()
                .map_err(build_err)
        };
        let mut req =
            self.clients.dynamodb.create_table().table_name(&self.table).billing_mode(BillingMode::PayPerRequest);
        for a in [KEY.0, KEY.1].into_iter().chain(INDEXES.iter().flat_map(|(_, h, r)| [*h, *r])) {
            req = req.attribute_definitions(attr(a).map_err(build_err)?);
        }
        req = req
            .key_schema(key(KEY.0, KeyType::Hash).map_err(build_err)?)
            .key_schema(key(KEY.1, KeyType::Range).map_err(build_err)?);
        for (name, h, r) in INDEXES {
            req = req.global_secondary_indexes(gsi(name, h, r)?);
        }
        req.send().await.map_err(|e| classify(&format!("creating table {}", self.table), e))?;
        let ttl = aws_sdk_dynamodb::types::TimeToLiveSpecification::builder()
            .attribute_name(TTL_ATTRIBUTE)
            .enabled(true)
            .build()
            .map_err(build_err)?;
        self.clients
            .dynamodb
            .update_time_to_live()
            .table_name(&self.table)
            .time_to_live_specification(ttl)
            .send()
            .await
            .map_err(|e| classify(&format!("enabling the TTL of table {}", self.table), e))?;
        Ok(())
    }

    async fn query_all(&self, run: &RunId, sk_prefix: &str, projection: Option<&str>) -> Result<Vec<Item>> {
        let mut out = Vec::new();
        self.query_each(run, sk_prefix, projection, |i| {
            out.push(i.clone());
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// Every item of a partition whose sort key starts with `sk_prefix`, handed to `each` a page
    /// at a time: a run's million task items are never all held.
    async fn query_each(
        &self,
        run: &RunId,
        sk_prefix: &str,
        projection: Option<&str>,
        mut each: impl FnMut(&Item) -> Result<()>,
    ) -> Result<()> {
        let mut start: Option<Item> = None;
        loop {
            let mut q = self
                .clients
                .dynamodb
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND begins_with(sk, :p)")
                .expression_attribute_values(":pk", s(run_pk(run)))
                .expression_attribute_values(":p", s(sk_prefix))
                .set_exclusive_start_key(start.take());
            if let Some(p) = projection {
                q = q.projection_expression(p).expression_attribute_names("#st", "state");
            }
            let page = q.send().await.map_err(|e| classify(&format!("querying {}", self.table), e))?;
            page.items().iter().try_for_each(&mut each)?;
            match page.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => break,
            }
        }
        Ok(())
    }

    async fn get_item(&self, pk: String, sk: String) -> Result<Option<Item>> {
        let out = self
            .clients
            .dynamodb
            .get_item()
            .table_name(&self.table)
            .key("pk", s(pk))
            .key("sk", s(sk))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify(&format!("reading {}", self.table), e))?;
        Ok(out.item().cloned())
    }
}

fn build_err(e: aws_sdk_dynamodb::error::BuildError) -> Error {
    Error::internal(format!("building a DynamoDB request: {e}"))
}

#[async_trait]
impl RunIndex for DynamoDbRunIndex {
    async fn create_run(&self, run: &RunRecord, tasks: &[TaskId]) -> Result<()> {
        let pk = run_pk(&run.run_id);
        let order = format!("{}#{}", ts(run.created_at), run.run_id);
        let mut item: Item = HashMap::new();
        for (k, v) in [
            ("pk", s(&pk)),
            ("sk", s("#RUN")),
            ("gsi1pk", s("RUNS")),
            ("gsi1sk", s(&order)),
            ("gsi2pk", s(format!("BENCH#{}", run.benchmark))),
            ("gsi2sk", s(&order)),
            ("run_id", s(run.run_id.to_string())),
            ("name", s(&run.name)),
            ("benchmark", s(&run.benchmark)),
            ("agent", s(&run.agent)),
            ("backend", s(&run.backend)),
            ("status", s(run.status.as_str())),
            ("bundle_uri", s(&run.bundle_uri)),
            ("config_hash", s(&run.config_hash)),
            ("tasks_total", n(run.tasks_total)),
            ("created_at", s(ts(run.created_at))),
            ("updated_at", s(ts(run.updated_at))),
            ("finished_at", opt_s(run.finished_at.map(ts))),
            ("heartbeat_at", s(ts(run.heartbeat_at))),
            ("cancel_requested", AttributeValue::Bool(run.cancel_requested)),
            ("controller", s(&run.controller)),
            ("epoch", n(run.epoch)),
            ("leased_at", opt_s(run.leased_at.map(ts))),
            ("verdict", opt_s(run.verdict.map(|v| v.as_str().to_string()))),
            ("baseline", opt_s(run.baseline.map(|b| b.to_string()))),
            ("set_id", opt_s(run.set_id.clone())),
        ] {
            item.insert(k.to_string(), v);
        }
        let expires = self.expiry(run.created_at);
        if let Some(e) = &expires {
            item.insert(TTL_ATTRIBUTE.into(), e.clone());
        }
        self.clients
            .dynamodb
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await
            .map_err(|e| classify(&format!("creating run {} in {}", run.run_id, self.table), e))?;

        self.put_tasks(&run.run_id, tasks, expires).await
    }

    async fn add_tasks(&self, run: &RunId, tasks: &[TaskId], tasks_total: u64) -> Result<()> {
        let Some(record) = self.get_run(run).await? else {
            return Err(Error::not_found(format!("run {run} is not in the index")));
        };
        self.clients
            .dynamodb
            .update_item()
            .table_name(&self.table)
            .key("pk", s(run_pk(run)))
            .key("sk", s("#RUN"))
            .update_expression("SET tasks_total = :t")
            .expression_attribute_values(":t", n(tasks_total))
            .send()
            .await
            .map_err(|e| classify(&format!("counting the tasks of run {run}"), e))?;
        self.put_tasks(run, tasks, self.expiry(record.created_at)).await
    }

    async fn set_baseline(&self, name: &str, run: &RunId) -> Result<()> {
        self.clients
            .dynamodb
            .put_item()
            .table_name(&self.table)
            .item("pk", s(format!("BASELINE#{name}")))
            .item("sk", s("#BASELINE"))
            .item("run_id", s(run.to_string()))
            .item("set_at", s(ts(Utc::now())))
            .send()
            .await
            .map_err(|e| classify(&format!("pinning baseline {name}"), e))?;
        Ok(())
    }

    async fn get_baseline(&self, name: &str) -> Result<Option<RunId>> {
        let Some(item) = self.get_item(format!("BASELINE#{name}"), "#BASELINE".into()).await? else {
            return Ok(None);
        };
        let id = get_opt_s(&item, "run_id").ok_or_else(|| corrupt("baseline run_id"))?;
        RunId::from_str(&id).map(Some).map_err(|e| Error::corrupt(format!("baseline run id: {e}")))
    }

    async fn unset_baseline(&self, name: &str) -> Result<Option<RunId>> {
        let out = self
            .clients
            .dynamodb
            .delete_item()
            .table_name(&self.table)
            .key("pk", s(format!("BASELINE#{name}")))
            .key("sk", s("#BASELINE"))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| classify(&format!("unpinning baseline {name}"), e))?;
        let Some(item) = out.attributes else { return Ok(None) };
        let id = get_opt_s(&item, "run_id").ok_or_else(|| corrupt("baseline run_id"))?;
        RunId::from_str(&id).map(Some).map_err(|e| Error::corrupt(format!("baseline run id: {e}")))
    }

    async fn get_run(&self, run: &RunId) -> Result<Option<RunRecord>> {
        self.get_item(run_pk(run), "#RUN".into()).await?.map(|i| run_from_item(&i)).transpose()
    }

    async fn list_runs(&self, limit: usize) -> Result<Vec<RunRecord>> {
        let out = self
            .clients
            .dynamodb
            .query()
            .table_name(&self.table)
            .index_name(GSI_CREATED)
            .key_condition_expression("gsi1pk = :p")
            .expression_attribute_values(":p", s("RUNS"))
            .scan_index_forward(false)
            .limit(limit.min(i32::MAX as usize) as i32)
            .send()
            .await
            .map_err(|e| classify(&format!("listing runs in {}", self.table), e))?;
        out.items().iter().map(run_from_item).collect()
    }

    async fn update_run(&self, run: &RunId, u: &RunUpdate) -> Result<()> {
        let now = ts(Utc::now());
        let mut sets = vec!["updated_at = :now".to_string()];
        let mut values: Item = HashMap::from([(":now".to_string(), s(&now))]);
        let mut names: HashMap<String, String> = HashMap::new();
        if let Some(st) = u.status {
            sets.push("#status = :status".into());
            names.insert("#status".into(), "status".into());
            values.insert(":status".into(), s(st.as_str()));
        }
        if let Some(f) = u.finished_at {
            sets.push("finished_at = :fin".into());
            values.insert(":fin".into(), s(ts(f)));
        }
        if u.heartbeat {
            sets.push("heartbeat_at = :now".into());
        }
        if let Some(c) = u.cancel_requested {
            sets.push("cancel_requested = :cancel".into());
            values.insert(":cancel".into(), AttributeValue::Bool(c));
        }
        if let Some(e) = u.epoch {
            sets.push("epoch = :epoch".into());
            values.insert(":epoch".into(), n(e));
        }
        if let Some(c) = &u.controller {
            sets.push("controller = :ctl".into());
            sets.push("leased_at = :now".into());
            values.insert(":ctl".into(), s(c));
        }
        if let Some(e) = u.if_epoch {
            values.insert(":if_epoch".into(), n(e));
        }
        if let Some(v) = &u.verdict {
            // A verdict replaces the last one whole: with its baseline, or with none.
            sets.push("verdict = :verdict".into());
            values.insert(":verdict".into(), s(v.as_str()));
            sets.push("baseline = :baseline".into());
            values.insert(":baseline".into(), opt_s(u.baseline.map(|b| b.to_string())));
        }
        if let Some(c) = &u.concurrency {
            sets.push("concurrency = :conc".into());
            values.insert(":conc".into(), s(serde_json::to_string(c).map_err(|e| Error::json("encoding", e))?));
        }
        let res = self
            .clients
            .dynamodb
            .update_item()
            .table_name(&self.table)
            .key("pk", s(run_pk(run)))
            .key("sk", s("#RUN"))
            .update_expression(format!("SET {}", sets.join(", ")))
            .condition_expression(if u.if_epoch.is_some() {
                "attribute_exists(pk) AND epoch = :if_epoch"
            } else {
                "attribute_exists(pk)"
            })
            .set_expression_attribute_values(Some(values))
            .set_expression_attribute_names(if names.is_empty() { None } else { Some(names) })
            .send()
            .await;
        match res {
            Ok(_) => Ok(()),
            Err(e) if e.as_service_error().is_some_and(|x| x.is_conditional_check_failed_exception()) => {
                match self.get_run(run).await? {
                    None => Err(Error::not_found(format!("run {run} is not in the index"))),
                    Some(r) => Err(lease_lost(&run.to_string(), r.epoch, &r.controller)),
                }
            }
            Err(e) => Err(classify(&format!("updating run {run}"), e)),
        }
    }

    /// One conditional update per transition (each has its own condition, which a batch write
    /// cannot carry; a transaction would double the write units), several in flight: a job's
    /// tasks are queued in about one round trip.
    async fn record_tasks(&self, run: &RunId, ts: &[TaskTransition]) -> Result<Vec<bool>> {
        let mut out = Vec::with_capacity(ts.len());
        for chunk in ts.chunks(16) {
            let calls: Vec<_> = chunk.iter().map(|t| self.record_task(run, t)).collect();
            out.extend(futures::future::try_join_all(calls).await?);
        }
        Ok(out)
    }

    async fn record_task(&self, run: &RunId, t: &TaskTransition) -> Result<bool> {
        let mut sets = vec![
            "#st = :st",
            "#rk = :rk",
            "attempt = :a",
            "passed = :passed",
            "cost_usd = :cost",
            "cost_unknown = :cu",
            "tokens = :tokens",
            "wall_seconds = :wall",
            "terminated_by = :term",
            "detail = :detail",
            "fault = :fault",
            "updated_at = :now",
        ];
        let mut values: Item = HashMap::from([
            (":st".to_string(), s(t.state.as_str())),
            (":rk".to_string(), n(t.state.rank())),
            (":a".to_string(), n(t.attempt)),
            (":passed".to_string(), t.passed.map(AttributeValue::Bool).unwrap_or(AttributeValue::Null(true))),
            (":cost".to_string(), n(t.cost_usd)),
            (":cu".to_string(), AttributeValue::Bool(t.cost_unknown)),
            (":tokens".to_string(), n(t.tokens)),
            (":wall".to_string(), n(t.wall_seconds)),
            (":term".to_string(), opt_s(t.terminated_by.map(|x| x.as_str()))),
            (":detail".to_string(), opt_s(t.detail.clone())),
            (":fault".to_string(), opt_s(t.fault.as_ref().map(AgentFault::code))),
            (":now".to_string(), s(ts(Utc::now()))),
            (":completed".to_string(), s("completed")),
        ]);
        if let Some(j) = &t.job_id {
            sets.push("job_id = :job");
            values.insert(":job".into(), s(j.as_str()));
        }
        let res = self
            .clients
            .dynamodb
            .update_item()
            .table_name(&self.table)
            .key("pk", s(run_pk(run)))
            .key("sk", s(format!("TASK#{}", t.task_id)))
            .update_expression(format!("SET {}", sets.join(", ")))
            // The whole state machine (the core's `state_rule`), on a task that exists.
            .condition_expression(format!("attribute_exists(pk) AND {}", transition_guard()))
            .expression_attribute_names("#st", "state")
            .expression_attribute_names("#rk", "rank")
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        match res {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|x| x.is_conditional_check_failed_exception()) => {
                match self.get_item(run_pk(run), format!("TASK#{}", t.task_id)).await? {
                    Some(_) => Ok(false),
                    None => Err(Error::not_found(format!("task {} of run {run} is not in the index", t.task_id))),
                }
            }
            Err(e) => Err(classify(&format!("recording task {}", t.task_id), e)),
        }
    }

    async fn get_task(&self, run: &RunId, task: &TaskId) -> Result<Option<TaskRecord>> {
        self.get_item(run_pk(run), format!("TASK#{task}")).await?.map(|i| task_from_item(run, &i)).transpose()
    }

    async fn get_tasks(&self, run: &RunId, tasks: &[TaskId]) -> Result<Vec<Option<TaskRecord>>> {
        use aws_sdk_dynamodb::types::KeysAndAttributes;
        let mut found: HashMap<String, TaskRecord> = HashMap::new();
        // BatchGetItem takes 100 keys a call; what it leaves unprocessed (throttling, the 16 MB
        // limit) is asked again, with a short backoff.
        for chunk in tasks.chunks(100) {
            let keys: Vec<Item> = chunk
                .iter()
                .map(|t| {
                    HashMap::from([("pk".to_string(), s(run_pk(run))), ("sk".to_string(), s(format!("TASK#{t}")))])
                })
                .collect();
            let mut request = Some(
                KeysAndAttributes::builder().set_keys(Some(keys)).consistent_read(true).build().map_err(build_err)?,
            );
            let mut round = 0u32;
            while let Some(req) = request.take() {
                let out = self
                    .clients
                    .dynamodb
                    .batch_get_item()
                    .request_items(&self.table, req)
                    .send()
                    .await
                    .map_err(|e| classify(&format!("reading tasks of {}", self.table), e))?;
                for item in out.responses().and_then(|r| r.get(&self.table)).into_iter().flatten() {
                    let t = task_from_item(run, item)?;
                    found.insert(t.task_id.to_string(), t);
                }
                if let Some(left) =
                    out.unprocessed_keys().and_then(|u| u.get(&self.table)).filter(|k| !k.keys().is_empty())
                {
                    round += 1;
                    if round > 10 {
                        return Err(Error::new(
                            agenteval_core::ErrorKind::Transient,
                            format!("{}: reads left unprocessed", self.table),
                        ));
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50 << round.min(5))).await;
                    request = Some(left.clone());
                }
            }
        }
        Ok(tasks.iter().map(|t| found.remove(t.as_str())).collect())
    }

    async fn list_tasks(&self, run: &RunId) -> Result<Vec<TaskRecord>> {
        let items = self.query_all(run, "TASK#", None).await?;
        let mut out = items.iter().map(|i| task_from_item(run, i)).collect::<Result<Vec<_>>>()?;
        out.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        Ok(out)
    }

    async fn completed_tasks(&self, run: &RunId) -> Result<CompletedTasks> {
        let mut out = CompletedTasks::default();
        self.query_each(run, "TASK#", Some("task_id, #st, attempt"), |i| {
            out.max_attempt = out.max_attempt.max(get_n(i, "attempt").unwrap_or(0));
            if get_s(i, "state")? == TaskState::Completed.as_str() {
                out.ids.push(TaskId::from_str(get_s(i, "task_id")?)?);
            }
            Ok(())
        })
        .await?;
        // Sort keys order the items by id already; sorting again keeps the promise whatever
        // the key's encoding.
        out.ids.sort();
        Ok(out)
    }

    fn counts_are_cheap(&self) -> bool {
        // A query over every task item: tens of megabytes and thousands of read units a call
        // at 100,000 tasks.
        false
    }

    async fn add_spend(&self, run: &RunId, usd: f64) -> Result<f64> {
        // A cost that is not a number, or nothing, adds nothing.
        if !(usd.is_finite() && usd > 0.0) {
            return match self.get_item(run_pk(run), "#RUN".into()).await? {
                Some(i) => Ok(get_n::<f64>(&i, "wire_spend").unwrap_or(0.0)),
                None => Err(Error::not_found(format!("run {run} is not in the index"))),
            };
        }
        let item = self.add_to_run(run, "ADD wire_spend :usd", &[(":usd", n(usd))], "adding spend").await?;
        Ok(get_n::<f64>(&item, "wire_spend").unwrap_or(usd))
    }

    async fn add_held(&self, run: &RunId, usd: f64) -> Result<(f64, f64)> {
        let usd = if usd.is_finite() { usd } else { 0.0 };
        let item = self.add_to_run(run, "ADD wire_held :usd", &[(":usd", n(usd))], "holding spend").await?;
        // Floating sums of what was held and given back: never read below nothing.
        Ok((get_n::<f64>(&item, "wire_spend").unwrap_or(0.0), get_n::<f64>(&item, "wire_held").unwrap_or(0.0).max(0.0)))
    }

    async fn book_rate(&self, run: &RunId, key: &str, now_ms: i64, cost_ms: i64) -> Result<i64> {
        let attr = format!("rate:{key}");
        let db = &self.clients.dynamodb;
        // Brought up to now first (where it is behind), then the cost added: each step atomic,
        // and the limit's time only ever grows, so two workers booking at once both count.
        let raised = db
            .update_item()
            .table_name(&self.table)
            .key("pk", s(run_pk(run)))
            .key("sk", s("#RUN"))
            .update_expression("SET #r = :now")
            .condition_expression("attribute_exists(pk) AND (attribute_not_exists(#r) OR #r < :now)")
            .expression_attribute_names("#r", &attr)
            .expression_attribute_values(":now", n(now_ms))
            .send()
            .await;
        if let Err(e) = raised
            && !e.as_service_error().is_some_and(|x| x.is_conditional_check_failed_exception())
        {
            return Err(classify(&format!("booking a rate of run {run}"), e));
        }
        let res = db
            .update_item()
            .table_name(&self.table)
            .key("pk", s(run_pk(run)))
            .key("sk", s("#RUN"))
            .update_expression("ADD #r :cost")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_names("#r", &attr)
            .expression_attribute_values(":cost", n(cost_ms.max(0)))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew)
            .send()
            .await;
        match res {
            Ok(out) => Ok(out.attributes().and_then(|a| get_n::<i64>(a, &attr).ok()).unwrap_or(now_ms + cost_ms)),
            Err(e) if e.as_service_error().is_some_and(|x| x.is_conditional_check_failed_exception()) => {
                Err(Error::not_found(format!("run {run} is not in the index")))
            }
            Err(e) => Err(classify(&format!("booking a rate of run {run}"), e)),
        }
    }

    async fn spend(&self, run: &RunId) -> Result<f64> {
        let item = self.get_item(run_pk(run), "#RUN".into()).await?;
        Ok(item.and_then(|i| get_n::<f64>(&i, "wire_spend").ok()).unwrap_or(0.0))
    }

    async fn add_calls(&self, run: &RunId, calls: u64, usd: f64) -> Result<()> {
        let usd = if usd.is_finite() && usd > 0.0 { usd } else { 0.0 };
        self.add_to_run(
            run,
            "ADD call_count :one, call_usd :usd",
            &[(":one", n(calls)), (":usd", n(usd))],
            "counting a call",
        )
        .await
        .map(drop)
    }

    async fn add_throttled(&self, run: &RunId, calls: u64) -> Result<()> {
        self.add_to_run(run, "ADD throttled :n", &[(":n", n(calls))], "counting a throttled call").await.map(drop)
    }

    async fn throttled(&self, run: &RunId) -> Result<u64> {
        let item = self.get_item(run_pk(run), "#RUN".into()).await?;
        Ok(item.map_or(0, |i| get_n::<u64>(&i, "throttled").unwrap_or(0)))
    }

    async fn calls(&self, run: &RunId) -> Result<(u64, f64)> {
        let item = self.get_item(run_pk(run), "#RUN".into()).await?;
        Ok(item.map_or((0, 0.0), |i| {
            (get_n::<u64>(&i, "call_count").unwrap_or(0), get_n::<f64>(&i, "call_usd").unwrap_or(0.0))
        }))
    }

    async fn task_counts(&self, run: &RunId) -> Result<TaskCounts> {
        let items =
            self.query_all(run, "TASK#", Some("#st, passed, cost_usd, cost_unknown, tokens, terminated_by")).await?;
        let mut c = TaskCounts::default();
        for i in &items {
            c.total += 1;
            match TaskState::parse(get_s(i, "state")?).ok_or_else(|| corrupt("state"))? {
                TaskState::Pending => c.pending += 1,
                TaskState::Queued => c.queued += 1,
                TaskState::Running => c.running += 1,
                TaskState::Completed => {
                    c.completed += 1;
                    let passed = get_bool(i, "passed").unwrap_or(false);
                    let ended =
                        get_s(i, "terminated_by").ok().and_then(TerminatedBy::parse).unwrap_or(TerminatedBy::Completed);
                    c.add_outcome(Outcome::of(passed, ended), 1);
                    c.cost_unknown += u64::from(get_bool(i, "cost_unknown").unwrap_or(false));
                }
                TaskState::Failed => {
                    c.given_up += 1;
                    c.infra += 1;
                }
                TaskState::Cancelled => c.cancelled += 1,
            }
            c.cost_usd += get_n::<f64>(i, "cost_usd").unwrap_or(0.0);
            c.tokens = c.tokens.saturating_add(get_n::<u64>(i, "tokens").unwrap_or(0));
        }
        Ok(c)
    }

    async fn record_job(&self, job: &JobRecord) -> Result<()> {
        let mut item: Item = HashMap::new();
        item.insert("pk".into(), s(run_pk(&job.run_id)));
        item.insert("sk".into(), s(format!("JOB#{}#{:06}", job.handle.job_id, job.handle.attempt)));
        item.insert("job_id".into(), s(job.handle.job_id.as_str()));
        item.insert("attempt".into(), n(job.handle.attempt));
        item.insert("native_id".into(), s(&job.handle.native_id));
        item.insert("status".into(), s(job.status.as_str()));
        item.insert("task_count".into(), n(job.task_count));
        item.insert("updated_at".into(), s(ts(job.updated_at)));
        if let Some(e) = self.expiry(job.updated_at) {
            item.insert(TTL_ATTRIBUTE.into(), e);
        }
        self.clients
            .dynamodb
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| classify(&format!("recording job {}", job.handle.job_id), e))?;
        Ok(())
    }

    async fn list_jobs(&self, run: &RunId) -> Result<Vec<JobRecord>> {
        let items = self.query_all(run, "JOB#", None).await?;
        items
            .iter()
            .map(|i| {
                Ok(JobRecord {
                    run_id: *run,
                    handle: JobHandle {
                        job_id: JobId::from_str(get_s(i, "job_id")?)?,
                        attempt: get_n(i, "attempt")?,
                        native_id: get_s(i, "native_id")?.into(),
                    },
                    status: JobState::parse(get_s(i, "status")?).ok_or_else(|| corrupt("job status"))?,
                    task_count: get_n(i, "task_count")?,
                    updated_at: get_ts(i, "updated_at")?,
                })
            })
            .collect()
    }
}
