//! The judging commands: `compare`, `baseline set|show`, and `submit --baseline --gates`.
//! Run references (`latest:NAME`, `baseline:NAME`) are resolved through the index; the
//! statistics, gates and rendering are `agenteval-judge`'s.

use std::path::Path;
use std::str::FromStr;

use agenteval_core::layout;
use agenteval_core::model::{RunStatus, RunUpdate, RunVerdict};
use agenteval_core::traits::{Resolver, RunIndex};
use agenteval_core::{Error, ErrorKind, RunId};
use agenteval_engine::controller;
use agenteval_judge::compare::{CompareOptions, Comparison, compare_clustered, run_metric};
use agenteval_judge::gates::{Gates, Verdict, judge, load_gates};
use agenteval_judge::judgement::Judgement;
use agenteval_judge::report::{self, Format};
use agenteval_judge::results::{self, RunResults};
use serde_json::json;

use crate::cli::ReportArgs;
use crate::{Failure, exit};

/// How many runs `latest:NAME` looks back through.
const LATEST_WINDOW: usize = agenteval_engine::refs::LATEST_WINDOW;

/// A run named on the command line (see [`agenteval_engine::refs`]).
pub async fn resolve_ref(index: &dyn RunIndex, reference: &str) -> Result<RunId, Failure> {
    Ok(agenteval_engine::refs::resolve_ref(index, reference).await?)
}

/// Like [`resolve_ref`], but `latest:` skips `except` (a run judged against the latest one
/// before it).
async fn resolve_ref_except(index: &dyn RunIndex, reference: &str, except: Option<&RunId>) -> Result<RunId, Failure> {
    Ok(agenteval_engine::refs::resolve_ref_except(index, reference, except).await?)
}

/// A run's results, and where it lives (its bundle store and index record), found once.
async fn load(
    resolver: &dyn Resolver,
    index: &dyn RunIndex,
    run: &RunId,
) -> Result<(RunResults, controller::Located), Failure> {
    let located = controller::locate(resolver, index, run).await?;
    Ok((results::load(located.store.as_ref(), run).await?, located))
}

/// Writes `text` to `-o FILE` or standard output.
pub fn emit(out: &ReportArgs, text: &str) -> Result<(), Failure> {
    match &out.output {
        Some(path) => {
            std::fs::write(path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e).into())
        }
        None => {
            say_raw!("{text}");
            Ok(())
        }
    }
}

async fn render(
    store: &dyn agenteval_core::traits::BundleStore,
    cand: &RunResults,
    c: &Comparison,
    v: Option<&Verdict>,
    format: Format,
) -> Result<String, Failure> {
    Ok(match format {
        Format::Text => report::text(c, v),
        Format::Md => report::md(c, v),
        Format::Json => format!("{}\n", serde_json::to_string_pretty(&report::json(c, v)).expect("serializes")),
        Format::Html => {
            let summary = read_summary(store, &cand.meta).await;
            agenteval_judge::html::render_run(
                store,
                cand,
                summary.as_ref(),
                Some(c),
                v,
                &generator(),
                Default::default(),
            )
            .await
        }
    })
}

fn generator() -> String {
    format!("agenteval {}", env!("CARGO_PKG_VERSION"))
}

/// The summary of a sealed run (`None` for a partial one).
async fn read_summary(
    store: &dyn agenteval_core::traits::BundleStore,
    meta: &agenteval_core::format::Metadata,
) -> Option<agenteval_core::model::RunSummary> {
    if !meta.sealed {
        return None;
    }
    let bytes = store.get(&meta.run_id, layout::SUMMARY).await.ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// `agenteval report RUN --format html`: the run's report page, rendered from its bundle now
/// (a partial run included), with its judgement when it was judged.
pub async fn report_html(
    resolver: &dyn Resolver,
    index: &dyn RunIndex,
    run: &RunId,
    out: &ReportArgs,
) -> Result<u8, Failure> {
    let located = controller::locate(resolver, index, run).await?;
    let store = located.store.as_ref();
    let results = results::load(store, run).await?;
    let summary = read_summary(store, &results.meta).await;
    // A judged run's page shows its verdict, its gates and what it was compared with.
    let judged = Judgement::read(store, run).await?;
    let page = agenteval_judge::html::render_run(
        store,
        &results,
        summary.as_ref(),
        judged.as_ref().and_then(|j| j.comparison.as_ref()),
        judged.as_ref().map(|j| &j.verdict),
        &generator(),
        Default::default(),
    )
    .await;
    emit(out, &page)?;
    Ok(exit::OK)
}

/// What a judgement decided: the exit code it means, and the documents (for `submit --json`).
pub struct Judged {
    pub code: u8,
    /// `baseline: promote` made the run its name's baseline.
    pub promoted: bool,
    pub comparison: Option<Comparison>,
    pub verdict: Option<Verdict>,
    /// The word the index records for the run (with gates): `pass`, `fail` (a gate failed: a
    /// regression), `infra` (the infrastructure failed the run; never a regression) or
    /// `incomplete` (interrupted, over budget).
    pub outcome: Option<RunVerdict>,
}

/// The outcome of a judged run. A run the infrastructure failed is `infra` whatever its gates
/// say (its comparison already leaves the failed tasks out; what it says of the rest is in the
/// report); a run stopped because its agent cannot run is the agent's failure, judged as such.
fn outcome(meta: &agenteval_core::format::Metadata, v: &Verdict) -> RunVerdict {
    match meta.status {
        RunStatus::Complete => match v.decision() {
            agenteval_judge::gates::Decision::Go => RunVerdict::Pass,
            agenteval_judge::gates::Decision::NoGo => RunVerdict::Fail,
            agenteval_judge::gates::Decision::Inconclusive => RunVerdict::Inconclusive,
        },
        RunStatus::Failed if meta.reason.as_deref().is_some_and(|r| r.starts_with(controller::BROKEN_AGENT)) => {
            RunVerdict::Fail
        }
        RunStatus::Failed => RunVerdict::Infra,
        RunStatus::Running | RunStatus::Interrupted | RunStatus::BudgetExceeded => RunVerdict::Incomplete,
    }
}

/// Compares `cand` with `base_ref` (if it resolves) and judges it with `gates`: renders the
/// result, records the verdict in the candidate's bundle and the index, and says which exit
/// code it means (0 pass, 1 a gate failed, 3 the candidate did not complete).
// Long: the comparison, its refusal, the verdict, each way it is shown and kept, in order.
#[allow(clippy::too_many_arguments)]
pub async fn judge_run(
    resolver: &dyn Resolver,
    index: &dyn RunIndex,
    base_ref: Option<&str>,
    cand: &RunId,
    gates: Option<&Gates>,
    out: Option<&ReportArgs>,
    opts: CompareOptions,
    missing_ok: bool,
    record_verdict: bool,
    pairwise: Option<&agenteval_core::config::EvaluatorConfig>,
) -> Result<Judged, Failure> {
    let format = out.map(ReportArgs::format).transpose()?;
    let (cand_results, cand_at) = load(resolver, index, cand).await?;
    // A run whose repetitions were spent adaptively is judged as its looks were: at the level
    // its last look had, drops by their interval (what keeps its error rate under optional
    // stopping).
    let sequential;
    let (opts, gates) = match &cand_results.meta.adaptive {
        Some(a) if a.level > 0.0 && a.level < 1.0 => {
            sequential = gates.map(agenteval_judge::adaptive::sequential);
            (CompareOptions { level: a.level, ..opts }, sequential.as_ref())
        }
        _ => (opts, gates),
    };
    let base = match base_ref {
        None => None,
        Some(r) => match resolve_ref_except(index, r, Some(cand)).await {
            Ok(id) => Some(id),
            // A missing baseline is the gates' call (`on_missing_baseline`). Without gates it is
            // an error for `compare` (the user named a run that is not there), but not for a
            // `submit` whose first night has nothing to compare with.
            Err(f) if r.contains(':') && is_not_found(&f) && (gates.is_some() || missing_ok) => {
                tracing::warn!("{}: nothing to compare with", f.error);
                None
            }
            Err(f) => return Err(f),
        },
    };
    let comparison = match base {
        Some(b) => {
            let cluster_by = gates.and_then(|g| g.cluster_by.as_deref());
            Some(compared(resolver, index, &b, (&cand_results, &cand_at), pairwise, (opts, cluster_by)).await?)
        }
        None => None,
    };
    // Gates judge an agent on the same questions: when too many tasks changed content, no
    // verdict is given at all (a usage problem: the wrong runs were compared).
    if let (Some(g), Some(c)) = (gates, &comparison)
        && let Some(why) = agenteval_judge::gates::refusal(g, c)
    {
        if let (Some(out), Some(format)) = (out, format) {
            emit(out, &render(cand_at.store.as_ref(), &cand_results, c, None, format).await?)?;
        }
        return Err(Failure { code: exit::USAGE, error: anyhow::anyhow!("{why}") });
    }
    let verdict = gates.map(|g| {
        let lines = &cand_results.lines;
        judge(g, comparison.as_ref(), &|metric| run_metric(lines, metric), lines.len() as u64)
    });
    match (&comparison, out, format) {
        (_, None, _) | (_, _, None) => {}
        (Some(c), Some(out), Some(format)) => {
            emit(out, &render(cand_at.store.as_ref(), &cand_results, c, verdict.as_ref(), format).await?)?
        }
        (None, Some(_), Some(_)) if verdict.is_none() => {
            say!("no baseline `{}` to compare {} with", base_ref.unwrap_or(""), cand);
        }
        (None, Some(out), Some(format)) => {
            let v = verdict.as_ref().expect("checked above");
            let text = match format {
                Format::Json => format!(
                    "{}\n",
                    serde_json::to_string_pretty(&json!({"comparison": null, "verdict": v})).expect("serializes")
                ),
                _ => {
                    let mut t = format!("no baseline `{}`: judged {} alone\n", base_ref.unwrap_or(""), cand);
                    for g in &v.gates {
                        t.push_str(&format!(
                            "  {} {:<32} {}\n",
                            agenteval_judge::report::gate_word(g.decision()),
                            g.gate,
                            g.detail
                        ));
                    }
                    t
                }
            };
            emit(out, &text)?;
        }
    }
    let outcome = verdict.as_ref().map(|v| outcome(&cand_results.meta, v));
    let mut promoted = false;
    if let (Some(v), Some(word)) = (&verdict, outcome) {
        // A question asked of two runs changes neither, unless the verdict is to be kept.
        if record_verdict {
            record(&cand_at, index, cand, comparison.as_ref(), v, word).await?;
            // The nightly loop closes itself: a night whose gates hold is the next one's base.
            if gates.is_some_and(|g| g.promote) && word == RunVerdict::Pass {
                index.set_baseline(&cand_results.meta.name, cand).await?;
                promoted = true;
            }
        }
        if word == RunVerdict::Infra {
            let reason = cand_results.meta.reason.as_deref().unwrap_or("tasks were given up");
            tracing::warn!("outcome infra ({reason}): the infrastructure failed this run; it is not a regression");
        }
    }
    let code = exit_of(cand_results.meta.status, gates.is_some(), verdict.as_ref());
    if promoted && out.is_some() {
        say!("baseline:{} is now {cand} (promoted: its gates hold)", cand_results.meta.name);
    }
    Ok(Judged { code, promoted, comparison, verdict, outcome })
}

/// A judged run's exit code: incomplete under gates, else its gates' decision.
fn exit_of(status: RunStatus, gated: bool, verdict: Option<&Verdict>) -> u8 {
    if status != RunStatus::Complete && gated {
        return exit::INCOMPLETE;
    }
    match verdict.map(Verdict::decision) {
        Some(agenteval_judge::gates::Decision::NoGo) => exit::CHECK_FAILED,
        Some(agenteval_judge::gates::Decision::Inconclusive) => exit::INCONCLUSIVE,
        _ => exit::OK,
    }
}

fn is_not_found(f: &Failure) -> bool {
    f.error.downcast_ref::<Error>().is_some_and(|e| e.kind() == ErrorKind::NotFound)
}

/// The verdict goes into the candidate's bundle (`comparison.json`, then the manifest again, so
/// the bundle stays valid) and into the index.
async fn record(
    located: &controller::Located,
    index: &dyn RunIndex,
    cand: &RunId,
    comparison: Option<&Comparison>,
    v: &Verdict,
    word: RunVerdict,
) -> Result<(), Failure> {
    let doc = Judgement::new(comparison.cloned(), v.clone(), word);
    let store = located.store.as_ref();
    store.put(cand, layout::COMPARISON, &serde_json::to_vec_pretty(&doc).expect("serializes")).await?;
    if located.record.status != RunStatus::Running {
        // Only `comparison.json` changed since the seal: the manifest just written vouches for
        // the rest, so a large bundle is not read again.
        let hints = agenteval_engine::bundle::ManifestHints::from_manifest(store, cand, &[layout::COMPARISON]).await;
        agenteval_engine::bundle::write_manifest(store, cand, &hints).await?;
    }
    let baseline = comparison.and_then(|c| RunId::from_str(&c.base.run_id).ok());
    index.update_run(cand, &RunUpdate { verdict: Some(word), baseline, ..Default::default() }).await?;
    Ok(())
}

/// `agenteval compare BASE CAND`.
#[allow(clippy::too_many_arguments)]
pub async fn compare_cmd(
    resolver: &dyn Resolver,
    index: &dyn RunIndex,
    base: &str,
    cand: &str,
    gates: Option<&Path>,
    out: &ReportArgs,
    resamples: usize,
    seed: u64,
    record_verdict: bool,
    pairwise: Option<&agenteval_core::config::EvaluatorConfig>,
    junit: Option<&Path>,
) -> Result<u8, Failure> {
    // Every problem of the gates file before anything else.
    let gates = match gates {
        Some(p) => {
            Some(load_gates(p).map_err(|e| Failure { code: exit::USAGE, error: anyhow::anyhow!(e.to_string()) })?)
        }
        None => None,
    };
    let cand = resolve_ref(index, cand).await?;
    let judged = judge_run(
        resolver,
        index,
        Some(base),
        &cand,
        gates.as_ref(),
        Some(out),
        CompareOptions { resamples: resamples.max(1), seed, ..Default::default() },
        false,
        record_verdict,
        pairwise,
    )
    .await?;
    let shown = Some((judged.comparison.as_ref(), judged.verdict.as_ref()));
    crate::ci::after(resolver, index, &cand, junit, shown, false).await?;
    Ok(judged.code)
}

/// `agenteval compare --set SET`: every run of a set against its base combination.
pub async fn compare_set_cmd(
    resolver: &dyn Resolver,
    index: &dyn RunIndex,
    set: &str,
    against: Option<&str>,
    out: &ReportArgs,
    opts: CompareOptions,
) -> Result<u8, Failure> {
    let format = out.format().map_err(Failure::from)?;
    if format == Format::Html {
        return Err(Error::invalid(
            "a set has no HTML report: use --format text, md or json, or open the set in `agenteval ui`",
        )
        .into());
    }
    let (set_id, records) = set_members(index, set).await?;
    let mut runs = Vec::with_capacity(records.len());
    for r in &records {
        runs.push(load(resolver, index, &r.run_id).await?.0);
    }
    runs.sort_by_key(|r| r.meta.set.as_ref().map(|s| s.position).unwrap_or(u32::MAX));
    let base = match against {
        None => 0,
        Some(a) => match a.parse::<usize>() {
            Ok(n) if (1..=runs.len()).contains(&n) => n - 1,
            Ok(n) => {
                return Err(
                    Error::invalid(format!("--against {n}: the set has combinations 1 to {}", runs.len())).into()
                );
            }
            Err(_) => {
                let id = resolve_ref(index, a).await?;
                runs.iter().position(|r| r.meta.run_id == id).ok_or_else(|| {
                    Failure::from(Error::invalid(format!("--against {a}: run {id} is not one of set {set_id}")))
                })?
            }
        },
    };
    let s = agenteval_judge::set::compare_set(&set_id, &runs, base, opts);
    // Every format named: a new one must say what a set looks like in it.
    let text = match format {
        Format::Json => format!("{}\n", serde_json::to_string_pretty(&s).expect("serializes")),
        Format::Md => agenteval_judge::set::md(&s),
        Format::Text => set_text(&s),
        Format::Html => unreachable!("refused before the set is read"),
    };
    emit(out, &text)?;
    Ok(exit::OK)
}

/// The runs of a set (its id or a unique prefix of one), as the index lists them.
async fn set_members(
    index: &dyn RunIndex,
    set: &str,
) -> Result<(String, Vec<agenteval_core::model::RunRecord>), Failure> {
    let runs = index.list_runs(LATEST_WINDOW).await?;
    let mut ids: Vec<&str> = runs.iter().filter_map(|r| r.set_id.as_deref()).filter(|id| id.starts_with(set)).collect();
    ids.sort_unstable();
    ids.dedup();
    let id = match ids.as_slice() {
        [one] => one.to_string(),
        [] => return Err(Error::not_found(format!("no set `{set}` in the index (`submit --matrix` makes one)")).into()),
        many => {
            return Err(
                Error::invalid(format!("`{set}` is the start of {} set ids: give more of it", many.len())).into()
            );
        }
    };
    let members = runs.into_iter().filter(|r| r.set_id.as_deref() == Some(id.as_str())).collect();
    Ok((id, members))
}

/// The set's table for a terminal, within 80 columns.
fn set_text(s: &agenteval_judge::set::SetComparison) -> String {
    let mut t = crate::output::table();
    t.set_header(["#", "combination", "pass % [95% CI]", "vs base, points", "$/task", ""]);
    for row in agenteval_judge::set::rows(s) {
        let [n, label, rate, diff, cost, word] = row;
        t.add_row([n, wrap_label(&label, 16), rate, diff, cost, word]);
    }
    let t = crate::output::compact(t);
    let mut out = format!("set {}\n{t}\n", s.set_id);
    if let Some(line) = agenteval_judge::set::best_line(s) {
        out.push_str(&line);
        out.push('\n');
    }
    for e in &s.entries {
        out.push_str(&format!("#{} run {}\n", e.position + 1, e.run_id));
    }
    out
}

/// A combination's label on lines of about `width` characters, broken between its values (and
/// after the `=` of a value too long for one line).
pub(crate) fn wrap_label(label: &str, width: usize) -> String {
    let mut lines: Vec<String> = vec![];
    let parts = label.split(", ").flat_map(|p| match p.split_once('=') {
        Some((k, v)) if p.chars().count() > width => vec![format!("{k}="), format!("  {v}")],
        _ => vec![p.to_string()],
    });
    for part in parts {
        let part = part.as_str();
        match lines.last_mut() {
            Some(l) if l.chars().count() + 2 + part.chars().count() <= width => {
                l.push_str(", ");
                l.push_str(part);
            }
            _ => lines.push(part.to_string()),
        }
    }
    lines.join("\n")
}

/// The comparison of the candidate with the base run `base`, with the pairwise judge's metric
/// when one is given.
async fn compared(
    resolver: &dyn Resolver,
    index: &dyn RunIndex,
    base: &RunId,
    (cand, cand_at): (&RunResults, &controller::Located),
    pairwise: Option<&agenteval_core::config::EvaluatorConfig>,
    (opts, cluster_by): (CompareOptions, Option<&str>),
) -> Result<Comparison, Failure> {
    let (base_results, base_at) = load(resolver, index, base).await?;
    let mut c = compare_clustered(&base_results, cand, opts, cluster_by)?;
    if let Some(judge) = pairwise {
        let sides = [(&base_results, base_at.store.as_ref()), (cand, cand_at.store.as_ref())];
        add_pairwise(judge, sides, &mut c, opts).await?;
    }
    Ok(c)
}

/// `compare --pairwise FILE`: the judge's settings, those of an `llm_pairwise` evaluator
/// without `baseline` (model, criteria, endpoint fields), read before anything else; every
/// problem is named with its line and column.
pub fn load_pairwise(path: &Path) -> Result<agenteval_core::config::EvaluatorConfig, Failure> {
    let file = path.display().to_string();
    let usage = |msg: String| Failure { code: exit::USAGE, error: anyhow::anyhow!(msg) };
    let text = std::fs::read_to_string(path).map_err(|e| usage(format!("{file}: cannot read: {e}")))?;
    let fill = [("kind", json!("llm_pairwise")), ("baseline", json!("(compare)"))];
    let cfg = agenteval_core::config::load_evaluator_str(&text, &file, &fill).map_err(|e| usage(e.to_string()))?;
    if let Some(judge) = cfg.judge()
        && let Err(e) = agenteval_llm::ModelSpec::parse(&judge.model)
    {
        return Err(usage(format!("{file}: model: {e}")));
    }
    if !cfg.compares_runs() {
        return Err(usage(format!("{file}: a pairwise judge's kind is llm_pairwise (or leave it out)")));
    }
    Ok(cfg)
}

/// Most pairwise verdicts asked for at once.
const PAIRWISE_IN_FLIGHT: usize = 8;

/// Asks the pairwise judge about every paired task (both runs' answers, both orders) and adds
/// its score as the `pairwise` metric: 0.5 is a tie, the interval is the paired bootstrap's over
/// the tasks. The judge's key comes from the environment (the variable its provider uses, or
/// the names in its `secrets`).
async fn add_pairwise(
    cfg: &agenteval_core::config::EvaluatorConfig,
    [(base, base_store), (cand, cand_store)]: [(&RunResults, &dyn agenteval_core::traits::BundleStore); 2],
    c: &mut Comparison,
    opts: CompareOptions,
) -> Result<(), Failure> {
    use futures::StreamExt;
    let (Some(kind), Some(judge), true) =
        (agenteval_engine::evaluators::judge_kind(cfg), cfg.judge(), cfg.compares_runs())
    else {
        return Err(Error::internal("compare --pairwise takes an llm_pairwise judge").into());
    };
    let key = match agenteval_engine::evaluators::judge_secret(judge) {
        Some((_, name)) => Some(agenteval_core::secret::Secret::new(std::env::var(&name).map_err(|_| {
            Failure::from(Error::invalid(format!(
                "the pairwise judge needs its key in the environment variable {name}"
            )))
        })?)),
        None => None,
    };
    let host = match &judge.bedrock {
        Some(b) => Some(crate::wiring::Wiring::new(crate::session::exe()?, None).model_host(b).await?),
        None => None,
    };
    let llm = agenteval_llm::LlmJudge::new("pairwise".into(), kind, judge, key.as_ref(), host)
        .map_err(|e| Failure::from(Error::invalid(format!("the pairwise judge: {e}"))))?;
    // The tasks the comparison pairs: on both sides, the same content, no infrastructure failure.
    let infra = |l: &agenteval_core::format::ResultLine| l.terminated_by.says_nothing_about_the_agent();
    let ids: Vec<String> = cand
        .lines
        .iter()
        .enumerate()
        .filter(|(_, l)| !infra(l))
        .filter(|(i, l)| {
            base.task(l.task_id.as_str()).is_some_and(|b| !infra(b))
                && base.fingerprint_of(l.task_id.as_str()) == cand.fingerprint(*i)
        })
        .map(|(_, l)| l.task_id.to_string())
        .collect();
    let wanted: std::collections::BTreeSet<String> = ids.iter().cloned().collect();
    let specs = agenteval_judge::samples::specs(cand_store, &cand.meta.run_id, &wanted).await;
    let answer = |r: Option<agenteval_core::model::TaskResult>| {
        r.and_then(|r| r.agent.final_answer).map(|a| agenteval_core::model::answer_text(&a)).unwrap_or_default()
    };
    let (llm, specs) = (&llm, &specs);
    let verdicts: Vec<Result<f64, Error>> = futures::stream::iter(ids.iter())
        .map(|id| async move {
            let spec = specs.get(id).ok_or_else(|| Error::not_found(format!("task {id} is not in tasks.jsonl")))?;
            let b = answer(agenteval_judge::samples::result(base_store, &base.meta.run_id, id).await?);
            let a = answer(agenteval_judge::samples::result(cand_store, &cand.meta.run_id, id).await?);
            Ok(llm.compare_answers(&spec.input, spec.expected.as_ref(), &a, &b).await?.score)
        })
        .buffered(PAIRWISE_IN_FLIGHT)
        .collect()
        .await;
    let mut scores = Vec::new();
    let mut errors = Vec::new();
    for v in verdicts {
        match v {
            Ok(s) => scores.push(s),
            Err(e) => errors.push(e),
        }
    }
    if scores.is_empty()
        && let Some(e) = errors.first()
    {
        return Err(Failure { code: exit::FAILED, error: anyhow::anyhow!("the pairwise judge decided no task: {e}") });
    }
    let tally = agenteval_judge::compare::PairwiseTally {
        judge: judge.model.clone(),
        wins: scores.iter().filter(|s| **s > 0.5).count(),
        ties: scores.iter().filter(|s| **s == 0.5).count(),
        losses: scores.iter().filter(|s| **s < 0.5).count(),
        errors: errors.len(),
    };
    let diffs: Vec<f64> = scores.iter().map(|s| s - 0.5).collect();
    let d = agenteval_judge::stats::paired_bootstrap(&diffs, opts.resamples, opts.seed ^ 0x5041_4952);
    c.metrics.push(agenteval_judge::compare::MetricDiff {
        metric: "pairwise".into(),
        better: agenteval_judge::compare::Better::Higher,
        base: 0.5,
        cand: 0.5 + d.mean,
        diff: Some(d),
        regressed: d.hi < 0.0,
        improved: d.lo > 0.0,
        within_noise: false,
        paired_test: Some(agenteval_judge::stats::paired_test(&diffs)),
        mde: agenteval_judge::stats::minimum_detectable(&diffs),
    });
    c.pairwise = Some(tally);
    Ok(())
}

/// `agenteval baseline set RUN`.
/// `agenteval baseline set|show`.
pub async fn baseline(command: crate::cli::BaselineCommand) -> Result<u8, Failure> {
    match command {
        crate::cli::BaselineCommand::Set { run, force, index, json } => {
            let (_, index) = crate::session::open_index(&index).await?;
            baseline_set(index.as_ref(), &run, force, json).await
        }
        crate::cli::BaselineCommand::Show { name, index, json } => {
            let (_, index) = crate::session::open_index(&index).await?;
            let name = agenteval_engine::refs::history_name(index.as_ref(), &name).await?;
            baseline_show(index.as_ref(), &name, json).await
        }
        crate::cli::BaselineCommand::Unset { name, index, json } => {
            let (_, index) = crate::session::open_index(&index).await?;
            let name = agenteval_engine::refs::history_name(index.as_ref(), &name).await?;
            let was = index.unset_baseline(&name).await?;
            if json {
                say!("{}", json!({"name": name, "was": was}));
            } else {
                match was {
                    Some(id) => {
                        say!("baseline:{name} unpinned (it was {id}); `latest:{name}` still names its newest run")
                    }
                    None => say!("baseline:{name} was not pinned: nothing to do"),
                }
            }
            Ok(exit::OK)
        }
    }
}

pub async fn baseline_set(index: &dyn RunIndex, run: &str, force: bool, json: bool) -> Result<u8, Failure> {
    let id = resolve_ref(index, run).await?;
    let record = index.get_run(&id).await?.ok_or_else(|| Error::not_found(format!("run {id} is not in the index")))?;
    if record.status != RunStatus::Complete && !force {
        return Err(Error::invalid(format!(
            "run {id} is {}, not complete: a baseline must be a run that finished (--force pins it anyway)",
            record.status.as_str()
        ))
        .into());
    }
    index.set_baseline(&record.name, &id).await?;
    if json {
        say!("{}", json!({"name": record.name, "run_id": id}));
    } else {
        say!("baseline:{} is now {id}", record.name);
    }
    Ok(exit::OK)
}

/// `agenteval baseline show NAME`.
pub async fn baseline_show(index: &dyn RunIndex, name: &str, json: bool) -> Result<u8, Failure> {
    let id =
        index.get_baseline(name).await?.ok_or_else(|| Error::not_found(format!("no baseline pinned for `{name}`")))?;
    let record = index.get_run(&id).await?;
    if json {
        say!("{}", json!({"name": name, "run_id": id, "run": record}));
    } else {
        match record {
            Some(r) => {
                say!("baseline:{name} = {id} ({}, {})", r.status.as_str(), r.created_at.format("%Y-%m-%d %H:%M"))
            }
            None => say!("baseline:{name} = {id} (no longer in the index)"),
        }
    }
    Ok(exit::OK)
}
