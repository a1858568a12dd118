//! `RunIndex` in an embedded SQLite file (WAL mode), safe for many worker processes at once.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agenteval_core::model::*;
use agenteval_core::traits::RunIndex;
use agenteval_core::{Error, ErrorKind, JobId, Result, RunId, TaskId};
use async_trait::async_trait;
use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::{Connection, OptionalExtension, params};

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    benchmark TEXT NOT NULL,
    agent TEXT NOT NULL,
    backend TEXT NOT NULL,
    status TEXT NOT NULL,
    bundle_uri TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    tasks_total INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    finished_at TEXT,
    heartbeat_at TEXT NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    controller TEXT NOT NULL DEFAULT '',
    epoch INTEGER NOT NULL DEFAULT 0,
    leased_at TEXT,
    verdict TEXT,
    baseline TEXT,
    set_id TEXT,
    wire_spend REAL NOT NULL DEFAULT 0,
    wire_held REAL NOT NULL DEFAULT 0,
    call_count INTEGER NOT NULL DEFAULT 0,
    call_usd REAL NOT NULL DEFAULT 0,
    throttled INTEGER NOT NULL DEFAULT 0,
    concurrency TEXT
);
CREATE TABLE IF NOT EXISTS baselines (
    name TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    set_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_created ON runs (created_at DESC);
CREATE TABLE IF NOT EXISTS tasks (
    run_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    state TEXT NOT NULL,
    rank INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    job_id TEXT,
    passed INTEGER,
    cost_usd REAL NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0,
    wall_seconds REAL NOT NULL DEFAULT 0,
    terminated_by TEXT,
    detail TEXT,
    updated_at TEXT NOT NULL,
    fault TEXT,
    cost_unknown INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, task_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rates (
    run_id TEXT NOT NULL,
    key TEXT NOT NULL,
    tat INTEGER NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS jobs (
    run_id TEXT NOT NULL,
    job_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    native_id TEXT NOT NULL,
    status TEXT NOT NULL,
    task_count INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (run_id, job_id, attempt)
) WITHOUT ROWID;
"#;

/// The run index in one SQLite file. Each process opens its own connection; SQLite's locking
/// (WAL, and `wait_for_lock` as its busy handler) serializes writers across processes.
#[derive(Clone)]
pub struct SqliteRunIndex {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
    /// Device and inode of the file opened, to notice it being deleted or replaced under us.
    identity: (u64, u64),
}

impl std::fmt::Debug for SqliteRunIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SqliteRunIndex({})", self.path.display())
    }
}

/// Version of the schema this build writes, kept in `PRAGMA user_version`.
const SCHEMA_VERSION: i64 = 9;

/// The schema version an index file says it has (0 for a new file).
fn schema_version(conn: &Connection) -> Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(|e| db_err("reading schema version", e))
}

/// Brings an index written by an older build up to date. Columns are only ever added, with
/// defaults, so older rows stay readable.
fn migrate(conn: &Connection) -> Result<()> {
    let version = schema_version(conn)?;
    if version > SCHEMA_VERSION {
        return Err(Error::invalid(format!(
            "the run index was written by a newer agenteval (schema {version}, this build knows {SCHEMA_VERSION})"
        )));
    }
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    for (table, column, decl) in [
        ("runs", "controller", "TEXT NOT NULL DEFAULT ''"),
        ("runs", "leased_at", "TEXT"),
        ("runs", "verdict", "TEXT"),
        ("runs", "baseline", "TEXT"),
        ("runs", "set_id", "TEXT"),
        ("tasks", "fault", "TEXT"),
        ("tasks", "cost_unknown", "INTEGER NOT NULL DEFAULT 0"),
        ("runs", "wire_spend", "REAL NOT NULL DEFAULT 0"),
        ("runs", "wire_held", "REAL NOT NULL DEFAULT 0"),
        ("runs", "call_count", "INTEGER NOT NULL DEFAULT 0"),
        ("runs", "call_usd", "REAL NOT NULL DEFAULT 0"),
        ("runs", "throttled", "INTEGER NOT NULL DEFAULT 0"),
        ("runs", "concurrency", "TEXT"),
    ] {
        let has: bool = conn
            .query_row(&format!("SELECT COUNT(*) FROM pragma_table_info('{table}') WHERE name = ?1"), [column], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n > 0)
            .map_err(|e| db_err("reading schema", e))?;
        if !has {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {decl}"))
                .map_err(|e| db_err("migrating schema", e))?;
        }
    }
    conn.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(|e| db_err("writing schema version", e))
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn parse_ts(s: &str) -> rusqlite::Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e)))
}

fn conv<T, E: std::error::Error + Send + Sync + 'static>(r: std::result::Result<T, E>) -> rusqlite::Result<T> {
    r.map_err(|e| rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e)))
}

fn corrupt(message: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(Error::corrupt(message)))
}

fn db_err(context: &str, e: rusqlite::Error) -> Error {
    let kind = match &e {
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) =>
        {
            ErrorKind::Transient
        }
        rusqlite::Error::FromSqlConversionFailure(..) => ErrorKind::Corrupt,
        _ => ErrorKind::Io,
    };
    Error::with_source(kind, format!("run index: {context}: {e}"), e)
}

impl SqliteRunIndex {
    /// Opens (creating if needed) the index at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(format!("creating {}", parent.display()), e))?;
        }
        Self::open_with(path, true)
    }

    /// Opens the index at `path`, which must exist: workers and every command but `submit` and
    /// `index rebuild` use this, so that a lost index is noticed instead of silently recreated.
    pub fn open_existing(path: &Path) -> Result<Self> {
        Self::open_with(path, false)
    }

    fn open_with(path: &Path, create: bool) -> Result<Self> {
        let lost = || Error::not_found(format!("no run index at {}", path.display()));
        match std::fs::metadata(path) {
            Ok(m) if m.len() == 0 => {
                // SQLite would read an empty file as an empty index: "no runs yet" is a lie here.
                return Err(Error::corrupt(format!(
                    "the run index {} is empty (truncated?); `agenteval index rebuild --bundles ROOT` recreates it",
                    path.display()
                )));
            }
            Ok(m) if !m.is_file() => {
                return Err(Error::invalid(format!("the run index {} is not a regular file", path.display())));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => return Err(lost()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
        }
        let mut flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if create {
            flags |= rusqlite::OpenFlags::SQLITE_OPEN_CREATE;
        }
        let mut conn = Connection::open_with_flags(path, flags).map_err(|e| match &e {
            rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::CannotOpen && !create => lost(),
            _ => db_err("opening", e),
        })?;
        conn.busy_handler(Some(wait_for_lock)).map_err(|e| db_err("configuring", e))?;
        // Every statement on a task's path is prepared once per process: parsing one took as
        // long as running it.
        conn.set_prepared_statement_cache_capacity(32);
        // synchronous=NORMAL is durable across process crashes, which is what we guard against.
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(|e| db_err("configuring", e))?;
        // An index at this build's schema version has its tables and WAL mode (both stay with
        // the file): every worker opens it, and parsing the schema's statements again was a
        // tenth of a one-task worker's time.
        let current = schema_version(&conn)? == SCHEMA_VERSION;
        if create || !current {
            // WAL lets readers (the controller's progress polls) run beside writing workers.
            // Set by whoever may create the index (a run's controller), so a file that lost it
            // gets it back once per run, not once per worker.
            conn.pragma_update(None, "journal_mode", "WAL").map_err(|e| db_err("enabling WAL", e))?;
        }
        if !current {
            conn.execute_batch(SCHEMA).map_err(|e| db_err("creating schema", e))?;
            migrate(&conn)?;
        }
        let identity = file_identity(path).ok_or_else(lost)?;
        Ok(SqliteRunIndex { conn: Arc::new(Mutex::new(conn)), path: path.to_path_buf(), identity })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        crate::blocking(|| {
            let mut c = self.conn.lock().map_err(|_| Error::internal("run index lock poisoned"))?;
            f(&mut c)
        })
    }
}

fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn run_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
    let status: String = r.get("status")?;
    Ok(RunRecord {
        run_id: conv(RunId::from_str(&r.get::<_, String>("run_id")?))?,
        name: r.get("name")?,
        benchmark: r.get("benchmark")?,
        agent: r.get("agent")?,
        backend: r.get("backend")?,
        status: RunStatus::parse(&status).ok_or_else(|| corrupt(format!("unknown run status {status}")))?,
        bundle_uri: r.get("bundle_uri")?,
        config_hash: r.get("config_hash")?,
        tasks_total: r.get::<_, i64>("tasks_total")? as u64,
        created_at: parse_ts(&r.get::<_, String>("created_at")?)?,
        updated_at: parse_ts(&r.get::<_, String>("updated_at")?)?,
        finished_at: r.get::<_, Option<String>>("finished_at")?.map(|s| parse_ts(&s)).transpose()?,
        heartbeat_at: parse_ts(&r.get::<_, String>("heartbeat_at")?)?,
        cancel_requested: r.get::<_, i64>("cancel_requested")? != 0,
        controller: r.get("controller")?,
        epoch: r.get::<_, i64>("epoch")? as u32,
        leased_at: r.get::<_, Option<String>>("leased_at")?.map(|s| parse_ts(&s)).transpose()?,
        verdict: r.get::<_, Option<String>>("verdict")?.as_deref().and_then(RunVerdict::parse),
        baseline: r.get::<_, Option<String>>("baseline")?.and_then(|s| RunId::from_str(&s).ok()),
        set_id: r.get("set_id")?,
        concurrency: r.get::<_, Option<String>>("concurrency")?.and_then(|s| serde_json::from_str(&s).ok()),
    })
}

fn task_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TaskRecord> {
    let state: String = r.get("state")?;
    let term: Option<String> = r.get("terminated_by")?;
    Ok(TaskRecord {
        run_id: conv(RunId::from_str(&r.get::<_, String>("run_id")?))?,
        task_id: conv(TaskId::from_str(&r.get::<_, String>("task_id")?))?,
        state: TaskState::parse(&state).ok_or_else(|| corrupt(format!("unknown task state {state}")))?,
        attempt: r.get::<_, i64>("attempt")? as u32,
        job_id: r.get::<_, Option<String>>("job_id")?.map(|s| conv(JobId::from_str(&s))).transpose()?,
        passed: r.get::<_, Option<i64>>("passed")?.map(|v| v != 0),
        cost_usd: r.get("cost_usd")?,
        cost_unknown: r.get::<_, i64>("cost_unknown")? != 0,
        tokens: r.get::<_, i64>("tokens")? as u64,
        wall_seconds: r.get("wall_seconds")?,
        terminated_by: term.map(|t| conv(serde_json::from_value(serde_json::Value::String(t)))).transpose()?,
        detail: r.get("detail")?,
        fault: r.get::<_, Option<String>>("fault")?.as_deref().and_then(AgentFault::parse),
        updated_at: parse_ts(&r.get::<_, String>("updated_at")?)?,
    })
}

/// How long a writer waits for another's lock before giving up.
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// SQLite's busy handler: whether to try the lock again (after a pause) on its `tries`-th
/// refusal. A write here holds the lock for tens of microseconds, so the first pauses are that
/// short; SQLite's own timeout pauses at least a millisecond, and every process sleeping
/// through those left a core idle. Longer pauses after a few dozen tries keep a writer stuck
/// behind a long transaction (a run's creation) from spinning, up to `LOCK_WAIT` in all.
fn wait_for_lock(tries: i32) -> bool {
    match pause_before(tries.max(0) as u32) {
        Some(pause) => {
            std::thread::sleep(pause);
            true
        }
        None => false,
    }
}

/// The pause before retry number `tries + 1`, or `None` once `LOCK_WAIT` is spent.
fn pause_before(tries: u32) -> Option<Duration> {
    const STEPS: [(Duration, u32); 2] = [(Duration::from_micros(50), 40), (Duration::from_millis(1), 40)];
    const LONG: Duration = Duration::from_millis(10);
    let (mut spent, mut left) = (Duration::ZERO, tries);
    for (pause, n) in STEPS {
        if left < n {
            return Some(pause);
        }
        spent += pause * n;
        left -= n;
    }
    (spent + LONG * left < LOCK_WAIT).then_some(LONG)
}

/// The whole task state machine is the WHERE clause: not completed, and a later attempt or a
/// higher rank in the same attempt. One statement, so racing writers serialize in SQLite.
/// The update of a task's record, guarded by the core's task-state rule (`model::state_rule`).
fn transition_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        let guard = agenteval_core::model::state_rule(&agenteval_core::model::StateRuleText {
            state: "state",
            completed: "'completed'",
            not_equal: "!=",
            attempt: "attempt",
            new_attempt: "?5",
            rank: "rank",
            new_rank: "?4",
        });
        format!(
            "UPDATE tasks SET state = ?3, rank = ?4, attempt = ?5, job_id = COALESCE(?6, job_id),
                passed = ?7, cost_usd = ?8, tokens = ?9, wall_seconds = ?10, terminated_by = ?11,
                detail = ?12, updated_at = ?13, fault = ?14, cost_unknown = ?15
             WHERE run_id = ?1 AND task_id = ?2 AND {guard}"
        )
    })
}

fn apply_transition(c: &Connection, id: &str, t: &TaskTransition) -> Result<bool> {
    let n = c
        .prepare_cached(transition_sql())
        .and_then(|mut st| {
            st.execute(params![
                id,
                t.task_id.as_str(),
                t.state.as_str(),
                t.state.rank() as i64,
                t.attempt as i64,
                t.job_id.as_ref().map(|j| j.to_string()),
                t.passed.map(|b| b as i64),
                t.cost_usd,
                t.tokens.min(i64::MAX as u64) as i64,
                t.wall_seconds,
                t.terminated_by.map(|x| x.as_str()),
                t.detail,
                ts(Utc::now()),
                t.fault.as_ref().map(AgentFault::code),
                t.cost_unknown as i64,
            ])
        })
        .map_err(|e| db_err("recording task", e))?;
    if n > 0 {
        return Ok(true);
    }
    let exists: bool = c
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM tasks WHERE run_id = ?1 AND task_id = ?2)",
            params![id, t.task_id.as_str()],
            |r| r.get(0),
        )
        .map_err(|e| db_err("reading task", e))?;
    if exists {
        Ok(false)
    } else {
        Err(Error::not_found(format!("task {} of run {id} is not in the index", t.task_id)))
    }
}

#[async_trait]
impl RunIndex for SqliteRunIndex {
    async fn add_tasks(&self, run: &RunId, tasks: &[TaskId], tasks_total: u64) -> Result<()> {
        let rid = run.to_string();
        let tasks: Vec<String> = tasks.iter().map(|t| t.to_string()).collect();
        self.with(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(|e| db_err("begin", e))?;
            let changed = tx
                .execute("UPDATE runs SET tasks_total = ?2 WHERE run_id = ?1", params![rid, tasks_total as i64])
                .map_err(|e| db_err("updating run", e))?;
            if changed == 0 {
                return Err(Error::not_found(format!("run {rid} is not in the index")));
            }
            {
                let now = ts(Utc::now());
                let mut stmt = tx
                    .prepare("INSERT OR IGNORE INTO tasks (run_id, task_id, state, rank, attempt, updated_at) VALUES (?1, ?2, 'pending', 0, 0, ?3)")
                    .map_err(|e| db_err("preparing", e))?;
                for t in &tasks {
                    stmt.execute(params![rid, t, now]).map_err(|e| db_err("inserting task", e))?;
                }
            }
            tx.commit().map_err(|e| db_err("commit", e))
        })
        .await
    }

    async fn create_run(&self, run: &RunRecord, tasks: &[TaskId]) -> Result<()> {
        let run = run.clone();
        let tasks: Vec<String> = tasks.iter().map(|t| t.to_string()).collect();
        self.with(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(|e| db_err("begin", e))?;
            tx.execute(
                "INSERT INTO runs (run_id, name, benchmark, agent, backend, status, bundle_uri, config_hash,
                   tasks_total, created_at, updated_at, finished_at, heartbeat_at, cancel_requested, epoch, controller,
                   leased_at, verdict, baseline, set_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
                params![
                    run.run_id.to_string(),
                    run.name,
                    run.benchmark,
                    run.agent,
                    run.backend,
                    run.status.as_str(),
                    run.bundle_uri,
                    run.config_hash,
                    run.tasks_total as i64,
                    ts(run.created_at),
                    ts(run.updated_at),
                    run.finished_at.map(ts),
                    ts(run.heartbeat_at),
                    run.cancel_requested as i64,
                    run.epoch as i64,
                    run.controller,
                    run.leased_at.map(ts),
                    run.verdict.map(|v| v.as_str()),
                    run.baseline.map(|b| b.to_string()),
                    run.set_id,
                ],
            )
            .map_err(|e| db_err("inserting run", e))?;
            {
                let now = ts(Utc::now());
                let mut stmt = tx
                    .prepare("INSERT INTO tasks (run_id, task_id, state, rank, attempt, updated_at) VALUES (?1, ?2, 'pending', 0, 0, ?3)")
                    .map_err(|e| db_err("preparing", e))?;
                let rid = run.run_id.to_string();
                for t in &tasks {
                    stmt.execute(params![rid, t, now]).map_err(|e| db_err("inserting task", e))?;
                }
            }
            tx.commit().map_err(|e| db_err("commit", e))
        })
        .await
    }

    async fn get_run(&self, run: &RunId) -> Result<Option<RunRecord>> {
        let id = run.to_string();
        self.with(move |c| {
            c.prepare_cached("SELECT * FROM runs WHERE run_id = ?1")
                .and_then(|mut st| st.query_row([id], run_from_row))
                .optional()
                .map_err(|e| db_err("reading run", e))
        })
        .await
    }

    async fn list_runs(&self, limit: usize) -> Result<Vec<RunRecord>> {
        self.with(move |c| {
            let mut stmt = c
                .prepare("SELECT * FROM runs ORDER BY created_at DESC, run_id DESC LIMIT ?1")
                .map_err(|e| db_err("preparing", e))?;
            let rows = stmt.query_map([limit as i64], run_from_row).map_err(|e| db_err("listing runs", e))?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(|e| db_err("listing runs", e))
        })
        .await
    }

    async fn set_baseline(&self, name: &str, run: &RunId) -> Result<()> {
        let (name, id) = (name.to_string(), run.to_string());
        self.with(move |c| {
            c.execute(
                "INSERT INTO baselines (name, run_id, set_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT(name) DO UPDATE SET run_id = excluded.run_id, set_at = excluded.set_at",
                params![name, id, ts(Utc::now())],
            )
            .map_err(|e| db_err("pinning baseline", e))?;
            Ok(())
        })
        .await
    }

    async fn get_baseline(&self, name: &str) -> Result<Option<RunId>> {
        let name = name.to_string();
        self.with(move |c| {
            let id: Option<String> = c
                .query_row("SELECT run_id FROM baselines WHERE name = ?1", [name], |r| r.get(0))
                .optional()
                .map_err(|e| db_err("reading baseline", e))?;
            id.map(|s| RunId::from_str(&s).map_err(|e| Error::corrupt(format!("baseline run id: {e}")))).transpose()
        })
        .await
    }

    async fn unset_baseline(&self, name: &str) -> Result<Option<RunId>> {
        let name = name.to_string();
        self.with(move |c| {
            let id: Option<String> = c
                .query_row("DELETE FROM baselines WHERE name = ?1 RETURNING run_id", [name], |r| r.get(0))
                .optional()
                .map_err(|e| db_err("unpinning baseline", e))?;
            id.map(|s| RunId::from_str(&s).map_err(|e| Error::corrupt(format!("baseline run id: {e}")))).transpose()
        })
        .await
    }

    async fn verify(&self) -> Result<()> {
        // An open connection keeps reading a deleted file: only the path tells what others see.
        match file_identity(&self.path) {
            Some(id) if id == self.identity => Ok(()),
            Some(_) => Err(Error::new(
                ErrorKind::Io,
                format!("the run index {} was replaced while in use", self.path.display()),
            )),
            None => Err(Error::new(
                ErrorKind::Io,
                format!("the run index {} was deleted while in use", self.path.display()),
            )),
        }
    }

    async fn update_run(&self, run: &RunId, u: &RunUpdate) -> Result<()> {
        let id = run.to_string();
        let u = u.clone();
        let concurrency = match &u.concurrency {
            Some(c) => Some(serde_json::to_string(c).map_err(|e| Error::json("encoding", e))?),
            None => None,
        };
        self.with(move |c| {
            let now = ts(Utc::now());
            let n = c
                .prepare_cached(
                    "UPDATE runs SET
                        status = COALESCE(?2, status),
                        finished_at = COALESCE(?3, finished_at),
                        heartbeat_at = CASE WHEN ?4 THEN ?5 ELSE heartbeat_at END,
                        cancel_requested = COALESCE(?6, cancel_requested),
                        epoch = COALESCE(?7, epoch),
                        controller = COALESCE(?8, controller),
                        leased_at = CASE WHEN ?8 IS NOT NULL THEN ?5 ELSE leased_at END,
                        verdict = COALESCE(?10, verdict),
                        baseline = CASE WHEN ?10 IS NOT NULL THEN ?11 ELSE baseline END,
                        concurrency = COALESCE(?12, concurrency),
                        updated_at = ?5
                     WHERE run_id = ?1 AND (?9 IS NULL OR epoch = ?9)",
                )
                .and_then(|mut st| {
                    st.execute(params![
                        id,
                        u.status.map(|s| s.as_str()),
                        u.finished_at.map(ts),
                        u.heartbeat,
                        now,
                        u.cancel_requested.map(|b| b as i64),
                        u.epoch.map(|e| e as i64),
                        u.controller,
                        u.if_epoch.map(|e| e as i64),
                        u.verdict.map(|v| v.as_str()),
                        u.baseline.map(|b| b.to_string()),
                        concurrency,
                    ])
                })
                .map_err(|e| db_err("updating run", e))?;
            if n > 0 {
                return Ok(());
            }
            let held: Option<(i64, String)> = c
                .query_row("SELECT epoch, controller FROM runs WHERE run_id = ?1", params![id], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()
                .map_err(|e| db_err("reading run", e))?;
            match held {
                None => Err(Error::not_found(format!("run {id} is not in the index"))),
                Some((epoch, controller)) => Err(lease_lost(&id, epoch as u32, &controller)),
            }
        })
        .await
    }

    async fn record_task(&self, run: &RunId, t: &TaskTransition) -> Result<bool> {
        let id = run.to_string();
        let t = t.clone();
        self.with(move |c| apply_transition(c, &id, &t)).await
    }

    async fn record_tasks(&self, run: &RunId, ts: &[TaskTransition]) -> Result<Vec<bool>> {
        let id = run.to_string();
        let ts = ts.to_vec();
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(|e| db_err("begin", e))?;
            let out = ts.iter().map(|t| apply_transition(&tx, &id, t)).collect::<Result<Vec<_>>>()?;
            tx.commit().map_err(|e| db_err("commit", e))?;
            Ok(out)
        })
        .await
    }

    async fn get_task(&self, run: &RunId, task: &TaskId) -> Result<Option<TaskRecord>> {
        let (id, task) = (run.to_string(), task.to_string());
        self.with(move |c| {
            c.prepare_cached("SELECT * FROM tasks WHERE run_id = ?1 AND task_id = ?2")
                .and_then(|mut st| st.query_row([id, task], task_from_row))
                .optional()
                .map_err(|e| db_err("reading task", e))
        })
        .await
    }

    async fn get_tasks(&self, run: &RunId, tasks: &[TaskId]) -> Result<Vec<Option<TaskRecord>>> {
        let id = run.to_string();
        let wanted: Vec<String> = tasks.iter().map(|t| t.to_string()).collect();
        self.with(move |c| {
            let mut stmt = c
                .prepare_cached("SELECT * FROM tasks WHERE run_id = ?1 AND task_id = ?2")
                .map_err(|e| db_err("preparing", e))?;
            // One transaction, one prepared statement: a job of 1,000 tasks is one round trip to
            // the database file.
            wanted
                .iter()
                .map(|t| {
                    stmt.query_row([id.as_str(), t.as_str()], task_from_row)
                        .optional()
                        .map_err(|e| db_err("reading tasks", e))
                })
                .collect()
        })
        .await
    }

    async fn list_tasks(&self, run: &RunId) -> Result<Vec<TaskRecord>> {
        let id = run.to_string();
        self.with(move |c| {
            let mut stmt = c
                .prepare("SELECT * FROM tasks WHERE run_id = ?1 ORDER BY task_id")
                .map_err(|e| db_err("preparing", e))?;
            let rows = stmt.query_map([id], task_from_row).map_err(|e| db_err("listing tasks", e))?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(|e| db_err("listing tasks", e))
        })
        .await
    }

    async fn completed_tasks(&self, run: &RunId) -> Result<CompletedTasks> {
        let id = run.to_string();
        self.with(move |c| {
            let max_attempt: i64 = c
                .query_row("SELECT COALESCE(MAX(attempt), 0) FROM tasks WHERE run_id = ?1", [&id], |r| r.get(0))
                .map_err(|e| db_err("reading attempts", e))?;
            let mut stmt = c
                .prepare("SELECT task_id FROM tasks WHERE run_id = ?1 AND state = 'completed' ORDER BY task_id")
                .map_err(|e| db_err("preparing", e))?;
            let mut rows = stmt.query([&id]).map_err(|e| db_err("listing completed tasks", e))?;
            let mut ids = Vec::new();
            while let Some(r) = rows.next().map_err(|e| db_err("listing completed tasks", e))? {
                let text: String = r.get(0).map_err(|e| db_err("listing completed tasks", e))?;
                ids.push(TaskId::from_str(&text)?);
            }
            Ok(CompletedTasks { ids, max_attempt: max_attempt.max(0) as u32 })
        })
        .await
    }

    async fn add_spend(&self, run: &RunId, usd: f64) -> Result<f64> {
        let id = run.to_string();
        // A cost that is not a number adds nothing.
        let usd = if usd.is_finite() && usd > 0.0 { usd } else { 0.0 };
        self.with(move |c| {
            c.prepare_cached("UPDATE runs SET wire_spend = wire_spend + ?2 WHERE run_id = ?1 RETURNING wire_spend")
                .and_then(|mut st| st.query_row(params![id, usd], |r| r.get::<_, f64>(0)).optional())
                .map_err(|e| db_err("adding spend", e))?
                .ok_or_else(|| Error::not_found(format!("run {id} is not in the index")))
        })
        .await
    }

    async fn add_held(&self, run: &RunId, usd: f64) -> Result<(f64, f64)> {
        let id = run.to_string();
        let usd = if usd.is_finite() { usd } else { 0.0 };
        self.with(move |c| {
            c.prepare_cached(
                "UPDATE runs SET wire_held = MAX(0, wire_held + ?2) WHERE run_id = ?1 RETURNING wire_spend, wire_held",
            )
            .and_then(|mut st| {
                st.query_row(params![id, usd], |r| Ok((r.get::<_, f64>(0)?, r.get::<_, f64>(1)?))).optional()
            })
            .map_err(|e| db_err("holding spend", e))?
            .ok_or_else(|| Error::not_found(format!("run {id} is not in the index")))
        })
        .await
    }

    async fn add_calls(&self, run: &RunId, calls: u64, usd: f64) -> Result<()> {
        let id = run.to_string();
        let usd = if usd.is_finite() && usd > 0.0 { usd } else { 0.0 };
        let calls = calls.min(i64::MAX as u64) as i64;
        self.with(move |c| {
            let n = c
                .prepare_cached(
                    "UPDATE runs SET call_count = call_count + ?2, call_usd = call_usd + ?3 WHERE run_id = ?1",
                )
                .and_then(|mut st| st.execute(params![id, calls, usd]))
                .map_err(|e| db_err("counting a call", e))?;
            if n == 0 {
                return Err(Error::not_found(format!("run {id} is not in the index")));
            }
            Ok(())
        })
        .await
    }

    async fn add_throttled(&self, run: &RunId, calls: u64) -> Result<()> {
        let id = run.to_string();
        let calls = calls.min(i64::MAX as u64) as i64;
        self.with(move |c| {
            let n = c
                .prepare_cached("UPDATE runs SET throttled = throttled + ?2 WHERE run_id = ?1")
                .and_then(|mut st| st.execute(params![id, calls]))
                .map_err(|e| db_err("counting a throttled call", e))?;
            if n == 0 {
                return Err(Error::not_found(format!("run {id} is not in the index")));
            }
            Ok(())
        })
        .await
    }

    async fn throttled(&self, run: &RunId) -> Result<u64> {
        let id = run.to_string();
        self.with(move |c| {
            c.prepare_cached("SELECT throttled FROM runs WHERE run_id = ?1")
                .and_then(|mut st| st.query_row([id], |r| Ok(r.get::<_, i64>(0)?.max(0) as u64)).optional())
                .map_err(|e| db_err("reading throttled calls", e))
                .map(|v| v.unwrap_or(0))
        })
        .await
    }

    async fn calls(&self, run: &RunId) -> Result<(u64, f64)> {
        let id = run.to_string();
        self.with(move |c| {
            c.prepare_cached("SELECT call_count, call_usd FROM runs WHERE run_id = ?1")
                .and_then(|mut st| {
                    st.query_row([id], |r| Ok((r.get::<_, i64>(0)?.max(0) as u64, r.get::<_, f64>(1)?))).optional()
                })
                .map_err(|e| db_err("reading calls", e))
                .map(|v| v.unwrap_or((0, 0.0)))
        })
        .await
    }

    async fn book_rate(&self, run: &RunId, key: &str, now_ms: i64, cost_ms: i64) -> Result<i64> {
        let (id, key) = (run.to_string(), key.to_string());
        self.with(move |c| {
            let known: bool = c
                .prepare_cached("SELECT COUNT(*) FROM runs WHERE run_id = ?1")
                .and_then(|mut st| st.query_row([&id], |r| r.get::<_, i64>(0)))
                .map_err(|e| db_err("booking a rate", e))?
                > 0;
            if !known {
                return Err(Error::not_found(format!("run {id} is not in the index")));
            }
            c.prepare_cached(
                "INSERT INTO rates (run_id, key, tat) VALUES (?1, ?2, ?3 + ?4)
                 ON CONFLICT (run_id, key) DO UPDATE SET tat = MAX(tat, ?3) + ?4
                 RETURNING tat",
            )
            .and_then(|mut st| st.query_row(params![id, key, now_ms, cost_ms.max(0)], |r| r.get::<_, i64>(0)))
            .map_err(|e| db_err("booking a rate", e))
        })
        .await
    }

    async fn spend(&self, run: &RunId) -> Result<f64> {
        let id = run.to_string();
        self.with(move |c| {
            c.prepare_cached("SELECT wire_spend FROM runs WHERE run_id = ?1")
                .and_then(|mut st| st.query_row([id], |r| r.get::<_, f64>(0)).optional())
                .map_err(|e| db_err("reading spend", e))
                .map(|v| v.unwrap_or(0.0))
        })
        .await
    }

    async fn task_counts(&self, run: &RunId) -> Result<TaskCounts> {
        let id = run.to_string();
        self.with(move |c| {
            let mut stmt = c
                .prepare(
                    "SELECT state, COUNT(*), COALESCE(SUM(passed), 0), COALESCE(SUM(cost_usd), 0), TOTAL(tokens),
                            COALESCE(passed, 0), terminated_by, TOTAL(cost_unknown)
                     FROM tasks WHERE run_id = ?1 GROUP BY state, COALESCE(passed, 0), terminated_by",
                )
                .map_err(|e| db_err("preparing", e))?;
            let mut counts = TaskCounts::default();
            let mut rows = stmt.query([id]).map_err(|e| db_err("counting tasks", e))?;
            while let Some(r) = rows.next().map_err(|e| db_err("counting tasks", e))? {
                let state: String = r.get(0).map_err(|e| db_err("counting", e))?;
                let n = r.get::<_, i64>(1).map_err(|e| db_err("counting", e))? as u64;
                counts.total += n;
                counts.cost_usd += r.get::<_, f64>(3).map_err(|e| db_err("counting", e))?;
                // TOTAL is a float sum: it cannot overflow as SUM can, and `as` saturates.
                counts.tokens =
                    counts.tokens.saturating_add(r.get::<_, f64>(4).map_err(|e| db_err("counting", e))? as u64);
                let passed = r.get::<_, i64>(5).map_err(|e| db_err("counting", e))? != 0;
                let ended: Option<String> = r.get(6).map_err(|e| db_err("counting", e))?;
                let ended = ended.as_deref().and_then(TerminatedBy::parse).unwrap_or(TerminatedBy::Completed);
                match TaskState::parse(&state) {
                    Some(TaskState::Pending) => counts.pending += n,
                    Some(TaskState::Queued) => counts.queued += n,
                    Some(TaskState::Running) => counts.running += n,
                    Some(TaskState::Completed) => {
                        counts.completed += n;
                        counts.add_outcome(Outcome::of(passed, ended), n);
                        counts.cost_unknown += r.get::<_, f64>(7).map_err(|e| db_err("counting", e))? as u64;
                    }
                    Some(TaskState::Failed) => {
                        counts.given_up += n;
                        counts.infra += n;
                    }
                    Some(TaskState::Cancelled) => counts.cancelled += n,
                    None => return Err(Error::corrupt(format!("run index: unknown task state {state}"))),
                }
            }
            Ok(counts)
        })
        .await
    }

    async fn record_job(&self, job: &JobRecord) -> Result<()> {
        let job = job.clone();
        self.with(move |c| {
            c.prepare_cached(
                "INSERT INTO jobs (run_id, job_id, attempt, native_id, status, task_count, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (run_id, job_id, attempt) DO UPDATE SET
                   native_id = excluded.native_id, status = excluded.status, updated_at = excluded.updated_at",
            )
            .and_then(|mut st| {
                st.execute(params![
                    job.run_id.to_string(),
                    job.handle.job_id.as_str(),
                    job.handle.attempt as i64,
                    job.handle.native_id,
                    job.status.as_str(),
                    job.task_count as i64,
                    ts(job.updated_at),
                ])
            })
            .map_err(|e| db_err("recording job", e))?;
            Ok(())
        })
        .await
    }

    async fn list_jobs(&self, run: &RunId) -> Result<Vec<JobRecord>> {
        let id = run.to_string();
        self.with(move |c| {
            let mut stmt = c
                .prepare("SELECT * FROM jobs WHERE run_id = ?1 ORDER BY job_id, attempt")
                .map_err(|e| db_err("preparing", e))?;
            let rows = stmt
                .query_map([id], |r| {
                    Ok(JobRecord {
                        run_id: conv(RunId::from_str(&r.get::<_, String>("run_id")?))?,
                        handle: JobHandle {
                            job_id: conv(JobId::from_str(&r.get::<_, String>("job_id")?))?,
                            attempt: r.get::<_, i64>("attempt")? as u32,
                            native_id: r.get("native_id")?,
                        },
                        status: {
                            let s: String = r.get("status")?;
                            JobState::parse(&s).ok_or_else(|| corrupt(format!("unknown job status {s}")))?
                        },
                        task_count: r.get::<_, i64>("task_count")? as u32,
                        updated_at: parse_ts(&r.get::<_, String>("updated_at")?)?,
                    })
                })
                .map_err(|e| db_err("listing jobs", e))?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(|e| db_err("listing jobs", e))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_writer_waits_short_pauses_first_and_gives_up_after_the_lock_wait() {
        assert_eq!(super::pause_before(0), Some(std::time::Duration::from_micros(50)));
        let total: std::time::Duration = (0..).map_while(super::pause_before).sum();
        assert!(
            total >= super::LOCK_WAIT && total < super::LOCK_WAIT + std::time::Duration::from_millis(20),
            "{total:?}"
        );
    }

    use super::*;

    #[tokio::test]
    async fn conformance() {
        let dir = tempfile::tempdir().unwrap();
        let index = SqliteRunIndex::open(&dir.path().join("index.sqlite")).unwrap();
        agenteval_testkit::conformance::run_index_suite(Arc::new(index)).await;
    }

    #[tokio::test]
    async fn a_lost_index_is_an_error_never_an_empty_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.sqlite");
        let missing = SqliteRunIndex::open_existing(&path).unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::NotFound, "{missing}");
        // How to recover depends on why it is missing, which the binary tells (`missing_index`).
        assert!(missing.to_string().contains(&path.display().to_string()), "the error names the file: {missing}");
        assert!(!path.exists(), "opening an existing index never creates one");

        std::fs::write(&path, b"").unwrap();
        for e in [SqliteRunIndex::open_existing(&path).unwrap_err(), SqliteRunIndex::open(&path).unwrap_err()] {
            assert_eq!(e.kind(), ErrorKind::Corrupt, "an empty file is not an empty index: {e}");
        }
        std::fs::remove_file(&path).unwrap();

        let index = SqliteRunIndex::open(&path).unwrap();
        index.verify().await.expect("a fresh index verifies");
        let again = SqliteRunIndex::open_existing(&path).unwrap();
        again.verify().await.unwrap();
        std::fs::remove_file(&path).unwrap();
        let gone = index.verify().await.unwrap_err();
        assert!(gone.to_string().contains("deleted"), "{gone}");
        // Someone recreates it (a worker of an older build would have): still not ours.
        let _other = SqliteRunIndex::open(&path).unwrap();
        let replaced = index.verify().await.unwrap_err();
        assert!(replaced.to_string().contains("replaced"), "{replaced}");
    }

    #[tokio::test]
    async fn an_index_from_before_the_controller_column_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("old.sqlite");
        {
            let c = Connection::open(&p).unwrap();
            c.execute_batch(&SCHEMA.replace("    controller TEXT NOT NULL DEFAULT '',\n", "")).unwrap();
        }
        let index = SqliteRunIndex::open(&p).unwrap();
        agenteval_testkit::conformance::run_index_suite(Arc::new(index)).await;
        let newer = Connection::open(&p).unwrap();
        newer.pragma_update(None, "user_version", 99).unwrap();
        drop(newer);
        let err = SqliteRunIndex::open(&p).unwrap_err();
        assert!(err.to_string().contains("newer agenteval"), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_connections_racing_complete_each_task_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("race.sqlite");
        let a = SqliteRunIndex::open(&p).unwrap();
        let b = SqliteRunIndex::open(&p).unwrap();
        agenteval_testkit::conformance::run_index_race_suite(Arc::new(a), Arc::new(b)).await;
    }

    #[tokio::test]
    async fn two_connections_see_each_others_writes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("i.sqlite");
        let a = SqliteRunIndex::open(&p).unwrap();
        let b = SqliteRunIndex::open(&p).unwrap();
        agenteval_testkit::conformance::run_index_suite(Arc::new(a.clone())).await;
        let runs = b.list_runs(10).await.unwrap();
        assert!(runs.len() >= 3);
    }
}
