//! The documents of a bundle that every reader needs (`metadata.json`, `manifest.json`), next to
//! [`crate::layout`]'s file names. Their fields are the on-disk format (`docs/bundle-format.md`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::RunId;
use crate::model::RunStatus;

/// `metadata.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    pub schema_version: String,
    pub run_id: RunId,
    pub name: String,
    /// `running` until sealed.
    pub status: RunStatus,
    pub sealed: bool,
    pub backend: String,
    pub benchmark: String,
    pub agent: String,
    pub config_hash: String,
    pub agenteval_version: String,
    pub git_sha: Option<String>,
    /// The git checkout the agent ran from, when its folder is in one (a `command` agent's
    /// folder): its commit and whether tracked files differed from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_git: Option<GitCheckout>,
    pub tasks_total: u64,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Times the run was resumed.
    pub resumed: u32,
    /// Why the run ended as it did, when that needs saying (an agent that cannot run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the command line's `--agent` and `--model` set (`agent.preset=codex`,
    /// `agent.model=gpt-5`): `replay --with-config FILE` applies them to FILE.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_flags: Vec<String>,
    /// `--set` overrides given to `resume` (budget, limits, concurrency), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resume_overrides: Vec<String>,
    /// The run whose failed tasks this run re-runs (`agenteval rerun RUN --failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_of: Option<RunId>,
    /// The sha256 of the agent's packed folder (`agent.pack: true`): what ran on the workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_sha256: Option<String>,
    /// The run whose answers this run graded again (`agenteval regrade RUN`): no agent ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regrade_of: Option<RunId>,
    /// The set of runs this one was started with (`submit --matrix`), and what it changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<SetMember>,
    /// The run's own budget (`max_run_cost_usd`) as last set: a run stopped by it says in its
    /// summary by how much its calls in flight went over. (A set's runs share the set's.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    /// What the run's calls spent at the wire (every worker's gateway's count in the run
    /// index), read when the run is sealed; with `budget_usd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent_usd: Option<f64>,
    /// Every model call of the run and what they cost, as its gateways counted them in the run
    /// index (tasks with no result included), read when the run is sealed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_at_wire: Option<(u64, f64)>,
    /// The Harbor dataset the tasks came from (`benchmark.dataset`): its name, version,
    /// registry and commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<crate::config::ResolvedDataset>,
    /// The run was made by another tool and read back (`agenteval import harbor`): nothing of
    /// it ran here, so it is judged and shown but never resumed, rerun, replayed or regraded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported: Option<Imported>,
    /// What an adaptive run's repetitions spent (`repetitions: {until: decided}`), against the
    /// fixed design it replaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<crate::model::AdaptiveSpend>,
}

impl Metadata {
    /// A run's metadata with what every run has; the optional facts (its git checkout, set,
    /// budget, dataset, import, …) start empty, for the caller to fill in.
    pub fn new(run_id: RunId, name: &str, status: RunStatus, tasks_total: u64, created_at: DateTime<Utc>) -> Self {
        Metadata {
            schema_version: crate::SCHEMA_VERSION.into(),
            run_id,
            name: name.into(),
            status,
            sealed: false,
            backend: String::new(),
            benchmark: String::new(),
            agent: String::new(),
            config_hash: String::new(),
            agenteval_version: String::new(),
            git_sha: None,
            agent_git: None,
            tasks_total,
            created_at,
            finished_at: None,
            resumed: 0,
            reason: None,
            agent_flags: vec![],
            resume_overrides: vec![],
            rerun_of: None,
            agent_sha256: None,
            regrade_of: None,
            set: None,
            budget_usd: None,
            spent_usd: None,
            calls_at_wire: None,
            dataset: None,
            imported: None,
            adaptive: None,
        }
    }
}

/// Where an imported run came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Imported {
    /// The tool (`harbor`) and its version, when it said.
    pub tool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Its own id of the run (a Harbor job's `id`) and the folder it was read from.
    pub id: String,
    pub from: String,
}

/// A git checkout's state: the commit, and whether its tracked files were changed (`git
/// status --untracked-files=no` listed something).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitCheckout {
    pub commit: String,
    pub dirty: bool,
}

/// A run's place in a set: the runs one `submit --matrix` started from one config, each with
/// one combination of the matrix's values, sharing one fleet and one budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetMember {
    /// The set's id (`compare --set ID`).
    pub id: String,
    /// This run's combination, numbered from 0 in the order the matrix lists them.
    pub position: u32,
    /// How many runs the set has.
    pub size: u32,
    /// The values this run set, in the order of the `--matrix` flags.
    pub values: Vec<SetValue>,
}

/// One `KEY.PATH=VALUE` of a set member's combination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetValue {
    pub key: String,
    pub value: String,
}

impl SetMember {
    /// `agent.model=a, agent.system=@p1.txt`: the combination as people name it.
    pub fn label(&self) -> String {
        self.values.iter().map(|v| format!("{}={}", v.key, v.value)).collect::<Vec<_>>().join(", ")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestEntry {
    pub sha256: String,
    pub size: u64,
}

/// `manifest.json`: checksum and size of every other file of the bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub schema_version: String,
    pub run_id: RunId,
    pub files: BTreeMap<String, ManifestEntry>,
}

/// One evaluator's verdict in a [`ResultLine`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineScore {
    pub score: f64,
    pub passed: bool,
    /// Set when the evaluator itself failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub error: bool,
}

/// Every score of a [`ResultLine`], by evaluator id, in id order (a JSON object on disk).
///
/// A sorted list rather than a map: judging a million-task run holds one per task, and a map's
/// first node alone is ~450 bytes where two scores take 64. Evaluator ids are shared between
/// the lines a thread reads (a run has a handful), not allocated per line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LineScores(Box<[(std::sync::Arc<str>, LineScore)]>);

impl LineScores {
    pub fn get(&self, evaluator: &str) -> Option<&LineScore> {
        self.0.binary_search_by(|(k, _)| k.as_ref().cmp(evaluator)).ok().map(|i| &self.0[i].1)
    }

    pub fn contains_key(&self, evaluator: &str) -> bool {
        self.get(evaluator).is_some()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &LineScore)> {
        self.0.iter().map(|(k, v)| (k.as_ref(), v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_ref())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sorted by id; of two scores with one id the last is kept, as a map's insert would.
    fn from_pairs(mut pairs: Vec<(std::sync::Arc<str>, LineScore)>) -> Self {
        pairs.reverse();
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|later, kept| later.0 == kept.0);
        LineScores(pairs.into_boxed_slice())
    }
}

/// The evaluator id `name` as an `Arc` this thread already holds, when it has seen it: a run's
/// lines repeat a few ids. At most `INTERNED` ids are kept, so a hostile file of ever-new ids
/// costs what it would without interning.
fn intern(name: &str) -> std::sync::Arc<str> {
    const INTERNED: usize = 256;
    thread_local! {
        static NAMES: std::cell::RefCell<std::collections::HashSet<std::sync::Arc<str>>> = Default::default();
    }
    NAMES.with_borrow_mut(|names| {
        if let Some(n) = names.get(name) {
            return n.clone();
        }
        let n: std::sync::Arc<str> = name.into();
        if names.len() < INTERNED {
            names.insert(n.clone());
        }
        n
    })
}

impl<S: AsRef<str>> FromIterator<(S, LineScore)> for LineScores {
    fn from_iter<I: IntoIterator<Item = (S, LineScore)>>(iter: I) -> Self {
        LineScores::from_pairs(iter.into_iter().map(|(k, v)| (intern(k.as_ref()), v)).collect())
    }
}

impl<S: AsRef<str>, const N: usize> From<[(S, LineScore); N]> for LineScores {
    fn from(pairs: [(S, LineScore); N]) -> Self {
        pairs.into_iter().collect()
    }
}

impl Serialize for LineScores {
    fn serialize<Ser: serde::Serializer>(&self, s: Ser) -> Result<Ser::Ok, Ser::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for LineScores {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = LineScores;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of scores by evaluator id")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<LineScores, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
                while let Some(k) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    pairs.push((intern(&k), map.next_value::<LineScore>()?));
                }
                Ok(LineScores::from_pairs(pairs))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// One line of `results.jsonl`: a finished task in the few numbers that comparisons and
/// reports read, so that judging a run costs one read, not one per task. Written by
/// `crate::cost` (an unknown cost is `null`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ResultLine {
    pub task_id: crate::TaskId,
    pub attempt: u32,
    pub passed: bool,
    pub terminated_by: crate::model::TerminatedBy,
    /// Every score by evaluator id (the benchmark's own grade is `benchmark`).
    pub scores: LineScores,
    /// Agent and evaluator cost, US dollars; with `cost_unknown`, written as `null`.
    #[serde(deserialize_with = "crate::cost::number_or_null")]
    pub cost_usd: f64,
    pub tokens: u64,
    pub wall_seconds: f64,
    pub steps: u32,
    /// Files the agent changed outside its working folder that its tests trusted (see
    /// `TaskResult::changed_outside`).
    #[serde(default)]
    pub changed_outside: u64,
    /// The agent's cost is not known (a model without a price, an agent whose calls did not go
    /// through the gateway): left out of cost comparisons, never counted as $0.
    #[serde(default)]
    pub cost_unknown: bool,
    /// Files the tamper audit named (`TaskResult::tampered`).
    #[serde(default)]
    pub tampered: u64,
}

impl From<&crate::model::TaskResult> for ResultLine {
    fn from(r: &crate::model::TaskResult) -> Self {
        ResultLine {
            task_id: r.task_id.clone(),
            attempt: r.attempt,
            passed: r.passed,
            terminated_by: r.agent.terminated_by,
            scores: r
                .scores
                .iter()
                .map(|s| {
                    (s.evaluator_id.as_str(), LineScore { score: s.score, passed: s.passed, error: s.error.is_some() })
                })
                .collect(),
            cost_usd: r.total_cost_usd(),
            tokens: r.agent.total_tokens,
            wall_seconds: r.agent.wall_seconds,
            steps: r.agent.steps,
            changed_outside: r.changed_outside,
            cost_unknown: r.agent.cost_unknown,
            tampered: r.tampered.len() as u64,
        }
    }
}

// A line as written: the derived `Serialize` but for the cost, `null` when unknown
// (`crate::cost`).

#[derive(Serialize)]
struct ResultLineOut<'a> {
    task_id: &'a crate::TaskId,
    attempt: u32,
    passed: bool,
    terminated_by: crate::model::TerminatedBy,
    scores: &'a LineScores,
    cost_usd: Option<f64>,
    tokens: u64,
    wall_seconds: f64,
    steps: u32,
    #[serde(skip_serializing_if = "crate::cost::is_zero")]
    changed_outside: u64,
    #[serde(skip_serializing_if = "crate::cost::is_false")]
    cost_unknown: bool,
    #[serde(skip_serializing_if = "crate::cost::is_zero")]
    tampered: u64,
}

impl Serialize for ResultLine {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ResultLineOut {
            task_id: &self.task_id,
            attempt: self.attempt,
            passed: self.passed,
            terminated_by: self.terminated_by,
            scores: &self.scores,
            cost_usd: crate::cost::written(self.cost_usd, self.cost_unknown),
            tokens: self.tokens,
            wall_seconds: self.wall_seconds,
            steps: self.steps,
            changed_outside: self.changed_outside,
            cost_unknown: self.cost_unknown,
            tampered: self.tampered,
        }
        .serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn score(x: f64) -> LineScore {
        LineScore { score: x, passed: x > 0.5, error: false }
    }

    #[test]
    fn line_scores_read_and_write_as_an_object_in_id_order() {
        let text = r#"{"no_error":{"score":1.0,"passed":true},"exact":{"score":0.0,"passed":false,"error":true}}"#;
        let s: LineScores = serde_json::from_str(text).unwrap();
        assert_eq!(s.keys().collect::<Vec<_>>(), ["exact", "no_error"]);
        assert!(s.get("exact").unwrap().error);
        assert!(s.get("nope").is_none() && s.contains_key("no_error"));
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"exact":{"score":0.0,"passed":false,"error":true},"no_error":{"score":1.0,"passed":true}}"#
        );
        // A repeated id keeps the last, as a map does.
        let dup: LineScores =
            serde_json::from_str(r#"{"a":{"score":0.0,"passed":false},"a":{"score":1.0,"passed":true}}"#).unwrap();
        assert_eq!((dup.len(), dup.get("a").unwrap().score), (1, 1.0));
        let built: LineScores = [("b", score(1.0)), ("a", score(0.0)), ("b", score(0.2))].into();
        assert_eq!(built.iter().map(|(k, v)| (k, v.score)).collect::<Vec<_>>(), [("a", 0.0), ("b", 0.2)]);
        assert!(serde_json::from_str::<LineScores>("[1]").is_err());
    }

    #[test]
    fn lines_read_on_one_thread_share_their_evaluator_ids() {
        let a: LineScores = serde_json::from_str(r#"{"shared_id":{"score":1.0,"passed":true}}"#).unwrap();
        let b: LineScores = serde_json::from_str(r#"{"shared_id":{"score":0.0,"passed":false}}"#).unwrap();
        assert!(std::sync::Arc::ptr_eq(&a.0[0].0, &b.0[0].0));
    }
}
