//! `agenteval audit CONFIG`: the config's benchmark run once per exploit of the battery (and
//! the config folder's `exploits/*.sh`), beside `oracle` and `nop`, on the config's backend;
//! then, per task, which exploits pass (a hackable task), which the tamper audit caught, and
//! which fail; for each exploit that passed, why in one sentence and the fix that closes it,
//! checked by running it again under that fix. A table, `--json`, a report page (`--out DIR`),
//! and exit 1 when a task is hackable.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agenteval_core::config::{AgentConfig, Limits};
use agenteval_core::traits::Resolver;
use agenteval_engine::agents::exploit::BATTERY;
use serde::Serialize;

use agenteval_engine::controller::start::Start;

use crate::session::{config_failure, controller_options, exe, load_config, start};
use crate::telemetry::Telemetry;
use crate::wiring::Wiring;
use crate::{Failure, exit};

/// One agent of the audit: the baselines (`oracle` should pass, `nop` should fail) and the
/// exploits.
struct Probe {
    name: String,
    agent: AgentConfig,
    exploit: bool,
    /// Why it passes a task when it does, and what closes it.
    explains: Option<String>,
    fix: Option<(String, Vec<String>)>,
}

/// An exploit (or `nop`) that passed tasks: why, the fix that closes it, and what running it
/// again under that fix showed.
#[derive(Debug, Serialize)]
struct Finding {
    exploit: String,
    tasks: Vec<String>,
    explains: String,
    fix: String,
    /// The run settings that apply the fix (`--set`); empty: the fix is the task's own.
    set: Vec<String>,
    checked: Checked,
}

/// What the fix did when the exploit ran again under it.
#[derive(Debug, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum Checked {
    /// It passes none of its tasks under the fix.
    Closed { run: String },
    /// It still passes these.
    StillPasses { run: String, tasks: Vec<String> },
    /// The fix is to the task (its tests, its image): the audit cannot apply it.
    TaskFix,
    /// The fix's settings do not apply to this config.
    CannotApply { why: String },
}

/// What one probe did to one task.
#[derive(Debug, Clone, Serialize)]
struct Cell {
    passed: bool,
    /// Files the tamper audit named.
    tampered: u64,
    /// It could not act on the task (an error or infrastructure failure, or a task with no
    /// environment).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    not_applicable: bool,
}

impl Cell {
    fn word(&self) -> &'static str {
        match (self.not_applicable, self.passed, self.tampered > 0) {
            (true, _, _) => "n/a",
            (false, true, false) => "PASS",
            (false, true, true) => "PASS*",
            (false, false, true) => "caught",
            (false, false, false) => "fail",
        }
    }
}

#[derive(Debug, Serialize)]
struct TaskAudit {
    task_id: String,
    /// An exploit, or `nop`, passed it.
    hackable: bool,
    /// The probes that passed it without doing it.
    passed_by: Vec<String>,
    /// The reference solution did not pass it: the task may be broken, whatever else.
    oracle_fails: bool,
    cells: BTreeMap<String, Cell>,
}

#[derive(Debug, Serialize)]
struct Audit {
    config: String,
    /// Each probe's run.
    runs: BTreeMap<String, String>,
    tasks: Vec<TaskAudit>,
    hackable: usize,
    /// Each exploit that passed, why, and its fix, checked.
    findings: Vec<Finding>,
}

/// `# explains: …`, `# fix: …` and `# set: KEY=VALUE …` lines at the top of a config folder's
/// exploit script.
fn script_notes(text: &str) -> (Option<String>, Option<(String, Vec<String>)>) {
    let note = |key: &str| {
        text.lines().take_while(|l| l.starts_with('#') || l.trim().is_empty()).find_map(|l| {
            l.strip_prefix('#').map(str::trim).and_then(|l| l.strip_prefix(key)).map(|v| v.trim().to_string())
        })
    };
    let set = note("set:").map(|s| s.split_whitespace().map(str::to_string).collect()).unwrap_or_default();
    (note("explains:"), note("fix:").map(|f| (f, set)))
}

/// The probes: oracle, nop, the battery (or `--exploits`), then the config folder's own.
fn probes(config: &Path, limits: &Limits, only: &[String]) -> Result<Vec<Probe>, Failure> {
    let usage = |m: String| Failure { code: exit::USAGE, error: anyhow::anyhow!(m) };
    let [(oracle, oracle_agent), (nop, nop_agent)] = agenteval_engine::agents::reference_probes(limits);
    let mut out = vec![
        Probe { name: oracle.into(), agent: oracle_agent, exploit: false, explains: None, fix: None },
        Probe {
            name: nop.into(),
            agent: nop_agent,
            exploit: false,
            explains: Some("the task passes with nothing done: its tests do not check what the task asks".into()),
            fix: Some(("make the tests fail on the task's starting state (run them on it once to see)".into(), vec![])),
        },
    ];
    let mut exploits: Vec<(String, Option<String>)> = BATTERY.iter().map(|s| (s.name.to_string(), None)).collect();
    let dir = config.parent().unwrap_or(Path::new(".")).join("exploits");
    if let Ok(entries) = std::fs::read_dir(&dir) {
        let mut files: Vec<PathBuf> =
            entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "sh")).collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).map_err(|e| usage(format!("cannot read {}: {e}", f.display())))?;
            let name = f.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            exploits.push((name, Some(text)));
        }
    }
    if !only.is_empty() {
        let known: Vec<&str> = exploits.iter().map(|(n, _)| n.as_str()).collect();
        if let Some(bad) = only.iter().find(|o| !known.contains(&o.as_str())) {
            return Err(usage(format!("--exploits: no exploit `{bad}`: there are {}", known.join(", "))));
        }
        exploits.retain(|(n, _)| only.contains(n));
    }
    for (name, text) in exploits {
        let builtin = agenteval_engine::agents::exploit::builtin(&name);
        let (explains, fix) = match (&text, builtin) {
            (Some(t), _) => script_notes(t),
            (None, Some(b)) => (
                Some(b.explains.to_string()),
                Some((b.fix.says.to_string(), b.fix.set.iter().map(|s| s.to_string()).collect())),
            ),
            (None, None) => (None, None),
        };
        let script = text.or_else(|| builtin.map(|s| s.script.to_string()));
        let agent = agenteval_engine::agents::exploit::agent(&name, script, limits);
        out.push(Probe { name, agent, exploit: true, explains, fix });
    }
    Ok(out)
}

/// Runs the audit; exit 0 when no task is hackable, 1 when one is.
pub async fn audit(
    args: &crate::cli::RunConfigArgs,
    only: &[String],
    json: bool,
    out_dir: Option<&Path>,
    quiet: bool,
    telemetry: &Telemetry,
) -> Result<u8, Failure> {
    if args.agent.is_some() || args.model.is_some() {
        return Err(Failure {
            code: exit::USAGE,
            error: anyhow::anyhow!("--agent and --model: the audit runs its own agents (oracle, nop and the exploits)"),
        });
    }
    let loaded = load_config(&args.config, &args.overrides()).map_err(config_failure)?;
    // An exploit gets the agent's time, at most ten minutes: it has no work to do.
    let mut limits = loaded.config.agent.limits().clone();
    limits.max_wall_seconds = Some(limits.wall_seconds().min(600.0));
    let probes = probes(&loaded.path, &limits, only)?;
    let wiring = Wiring::new(exe()?, loaded.config.aws.as_ref());
    let mut runs = BTreeMap::new();
    let mut results: BTreeMap<String, BTreeMap<String, Cell>> = BTreeMap::new();
    for p in &probes {
        let mut one = loaded.clone();
        one.config.agent = p.agent.clone();
        one.config.name = format!("{}-audit-{}", loaded.config.name, p.name);
        if !json && !quiet {
            say!("audit      {} …", p.name);
        }
        let (run, cells) = run_probe(&wiring, one, p, telemetry).await?;
        runs.insert(p.name.clone(), run);
        for (task, cell) in cells {
            results.entry(task).or_default().insert(p.name.clone(), cell);
        }
    }
    let mut audit = judge(args.config.display().to_string(), runs, results, &probes);
    for p in probes.iter().filter(|p| p.name != "oracle") {
        let tasks: Vec<String> =
            audit.tasks.iter().filter(|t| t.passed_by.contains(&p.name)).map(|t| t.task_id.clone()).collect();
        let (Some(explains), Some((fix, set))) = (&p.explains, &p.fix) else { continue };
        if tasks.is_empty() {
            continue;
        }
        let checked = match set.is_empty() {
            true => Checked::TaskFix,
            false => {
                if !json && !quiet {
                    say!("audit      {} under its fix ({}) …", p.name, set.join(" "));
                }
                check_fix(&wiring, args, p, set, &tasks, telemetry).await?
            }
        };
        let (explains, fix, set) = (explains.clone(), fix.clone(), set.clone());
        audit.findings.push(Finding { exploit: p.name.clone(), tasks, explains, fix, set, checked });
    }
    if let Some(dir) = out_dir {
        write_report(dir, &audit, &probes)?;
    }
    if json {
        say_raw!("{}", serde_json::to_string_pretty(&audit).expect("serializes"));
    } else {
        say_raw!("{}", table(&audit, &probes));
    }
    Ok(if audit.hackable > 0 { exit::CHECK_FAILED } else { exit::OK })
}

/// Runs one probe: its run's id and, per task, what it did.
async fn run_probe(
    wiring: &std::sync::Arc<Wiring>,
    config: agenteval_core::config::LoadedConfig,
    p: &Probe,
    telemetry: &Telemetry,
) -> Result<(String, BTreeMap<String, Cell>), Failure> {
    let ready = start(wiring, config, Start { cassettes: None, preflight: true }).await?;
    let opts = controller_options(ready.config(), wiring.clone(), true, true, telemetry).await?;
    let outcome = ready.submit(opts).await?;
    let index = wiring.index(&ready.config().storage.index_location()).await?;
    let located = agenteval_engine::controller::locate(wiring.as_ref(), index.as_ref(), &outcome.run_id).await?;
    let lines = agenteval_judge::results::load(located.store.as_ref(), &outcome.run_id).await?.lines;
    let mut cells = BTreeMap::new();
    for l in lines {
        let na = l.terminated_by.says_nothing_about_the_agent()
            || (p.exploit && l.terminated_by == agenteval_core::model::TerminatedBy::AgentError && !l.passed);
        cells.insert(
            l.task_id.to_string(),
            Cell { passed: l.passed, tampered: l.tampered, not_applicable: na && !l.passed },
        );
    }
    Ok((outcome.run_id.to_string(), cells))
}

/// Runs the exploit again on the tasks it passed, under its fix's settings: whether the fix
/// closes it. Settings the config cannot take say so, and are not a failure of the audit.
async fn check_fix(
    wiring: &std::sync::Arc<Wiring>,
    args: &crate::cli::RunConfigArgs,
    p: &Probe,
    set: &[String],
    tasks: &[String],
    telemetry: &Telemetry,
) -> Result<Checked, Failure> {
    let mut sets = args.overrides();
    sets.extend(set.iter().cloned());
    let mut fixed = match load_config(&args.config, &sets) {
        Ok(c) => c,
        Err(e) => {
            let why = e.to_string().lines().next().unwrap_or_default().to_string();
            return Ok(Checked::CannotApply { why });
        }
    };
    fixed.config.agent = p.agent.clone();
    fixed.config.name = format!("{}-audit-{}-fixed", fixed.config.name, p.name);
    // The benchmark's own ids: a repetition's (`t@r1`) is its task's.
    let mut ids: Vec<String> = tasks.iter().map(|t| t.split("@r").next().unwrap_or(t).to_string()).collect();
    ids.dedup();
    let filter = fixed.config.benchmark.filter_mut();
    filter.ids = ids;
    filter.limit = None;
    let (run, cells) = run_probe(wiring, fixed, p, telemetry).await?;
    if cells.is_empty() {
        // Nothing ran: no evidence either way, never "closed".
        return Ok(Checked::CannotApply { why: format!("the run under the fix ({run}) ran none of the tasks") });
    }
    let still: Vec<String> = cells.iter().filter(|(_, c)| c.passed).map(|(t, _)| t.clone()).collect();
    // A task that could not run under the fix says nothing of whether the fix closes it.
    let unrun: Vec<String> = cells.iter().filter(|(_, c)| c.not_applicable).map(|(t, _)| t.clone()).collect();
    Ok(if !still.is_empty() {
        Checked::StillPasses { run, tasks: still }
    } else if !unrun.is_empty() {
        Checked::CannotApply { why: format!("under the fix {} could not run (run {run})", unrun.join(", ")) }
    } else {
        Checked::Closed { run }
    })
}

/// Each task's verdict from its cells.
fn judge(
    config: String,
    runs: BTreeMap<String, String>,
    results: BTreeMap<String, BTreeMap<String, Cell>>,
    probes: &[Probe],
) -> Audit {
    let tasks: Vec<TaskAudit> = results
        .into_iter()
        .map(|(task_id, cells)| {
            let passed_by: Vec<String> = probes
                .iter()
                .filter(|p| p.name != "oracle")
                .filter(|p| cells.get(&p.name).is_some_and(|c| c.passed))
                .map(|p| p.name.clone())
                .collect();
            let oracle_fails = cells.get("oracle").is_some_and(|c| !c.passed);
            TaskAudit { task_id, hackable: !passed_by.is_empty(), passed_by, oracle_fails, cells }
        })
        .collect();
    let hackable = tasks.iter().filter(|t| t.hackable).count();
    Audit { config, runs, tasks, hackable, findings: Vec::new() }
}

/// The audit for a terminal, within 80 columns: a row per task (whether the reference solution
/// passes, whether doing nothing does, the exploits that passed, those the tamper audit caught),
/// then the hackable tasks and each probe's run. The whole matrix is in `--json` and the page.
fn table(a: &Audit, probes: &[Probe]) -> String {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::NOTHING);
    t.set_width(80);
    t.set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
    t.set_header(["task", "oracle", "nop", "passed by (* flagged)", "caught"]);
    for task in &a.tasks {
        let cell = |name: &str| task.cells.get(name);
        let oracle = cell("oracle").map_or("-", |c| if c.passed { "solves" } else { "FAILS" });
        let nop = cell("nop").map_or("-", |c| if c.passed { "PASSES" } else { "fails" });
        let exploits = probes.iter().filter(|p| p.exploit);
        let passed: Vec<String> = exploits
            .clone()
            .filter_map(|p| {
                cell(&p.name)
                    .filter(|c| c.passed)
                    .map(|c| format!("{}{}", p.name, if c.tampered > 0 { "*" } else { "" }))
            })
            .collect();
        let caught: Vec<&str> = exploits
            .filter(|p| cell(&p.name).is_some_and(|c| !c.passed && c.tampered > 0))
            .map(|p| p.name.as_str())
            .collect();
        let none = |v: String| if v.is_empty() { "-".to_string() } else { v };
        t.add_row([task.task_id.clone(), oracle.into(), nop.into(), none(passed.join(", ")), none(caught.join(", "))]);
    }
    let mut out = format!("{t}\n\n");
    for task in a.tasks.iter().filter(|t| t.hackable) {
        out.push_str(&format!("hackable   {}: passed by {}\n", task.task_id, task.passed_by.join(", ")));
    }
    for f in &a.findings {
        out.push_str(&findings_text(f));
    }
    for task in a.tasks.iter().filter(|t| t.oracle_fails) {
        out.push_str(&format!("oracle     {}: the reference solution does not pass it\n", task.task_id));
    }
    out.push_str(&format!("verdict    {} of {} task(s) hackable\n", a.hackable, a.tasks.len()));
    for (p, r) in &a.runs {
        out.push_str(&format!("run        {p:<18} {r}\n"));
    }
    out
}

/// One exploit's finding for a terminal: why it passed, the fix, what the fix did.
fn findings_text(f: &Finding) -> String {
    let set = f.set.iter().map(|s| format!("--set {s}")).collect::<Vec<_>>().join(" ");
    let checked = match &f.checked {
        Checked::Closed { run } => format!("closes it: with `{set}` it passes none of them (run {run})"),
        Checked::StillPasses { run, tasks } => {
            format!("does NOT close it: with `{set}` it still passes {} (run {run})", tasks.join(", "))
        }
        Checked::TaskFix => "a fix to the task itself, which the audit cannot apply".to_string(),
        Checked::CannotApply { why } => format!("`{set}` does not apply to this config: {why}"),
    };
    let why = format!("{} passed {}: {}.", f.exploit, f.tasks.join(", "), f.explains);
    format!(
        "{}\n{}\n{}\n",
        crate::output::wrapped("exploit    ", &why, 80),
        crate::output::wrapped("  fix      ", &format!("{}.", f.fix), 80),
        crate::output::wrapped("  checked  ", &checked, 80)
    )
}

/// `audit.json`, `audit.md` and `audit.html` in `dir`.
fn write_report(dir: &Path, a: &Audit, probes: &[Probe]) -> Result<(), Failure> {
    let io = |e: std::io::Error| agenteval_core::Error::io(format!("writing the audit into {}", dir.display()), e);
    std::fs::create_dir_all(dir).map_err(io)?;
    std::fs::write(dir.join("audit.json"), serde_json::to_vec_pretty(a).expect("serializes")).map_err(io)?;
    std::fs::write(dir.join("audit.md"), format!("# Audit of {}\n\n```\n{}```\n", a.config, table(a, probes)))
        .map_err(io)?;
    std::fs::write(dir.join("audit.html"), html(a, probes)).map_err(io)?;
    Ok(())
}

/// A self-contained page: the table, hackable rows marked.
fn html(a: &Audit, probes: &[Probe]) -> String {
    let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
    let mut rows = String::new();
    for t in &a.tasks {
        let class = if t.hackable { " class=\"hackable\"" } else { "" };
        rows.push_str(&format!("<tr{class}><td>{}</td>", esc(&t.task_id)));
        for p in probes {
            let w = t.cells.get(&p.name).map_or("-", Cell::word);
            rows.push_str(&format!(
                "<td class=\"{}\">{w}</td>",
                w.trim_end_matches('*').to_lowercase().replace('/', "")
            ));
        }
        rows.push_str("</tr>\n");
    }
    let head: String = probes.iter().map(|p| format!("<th>{}</th>", esc(&p.name))).collect();
    let findings: String = a
        .findings
        .iter()
        .map(|f| format!("<li class=\"finding\"><pre>{}</pre></li>\n", esc(&findings_text(f))))
        .collect();
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>agenteval audit</title><style>\
         body{{font:14px system-ui;margin:2em}}td,th{{padding:4px 8px;border-bottom:1px solid #ddd}}\
         .hackable td:first-child{{font-weight:bold;color:#b00}}.pass{{background:#fdd}}.caught{{background:#ffd}}</style></head>\
         <body><h1>Audit of {}</h1><p id=\"verdict\">{} of {} task(s) hackable</p>\
         <table><thead><tr><th>task</th>{head}</tr></thead><tbody>\n{rows}</tbody></table>\
         <ul id=\"findings\">\n{findings}</ul></body></html>\n",
        esc(&a.config),
        a.hackable,
        a.tasks.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finding_reads_as_why_the_fix_and_what_the_fix_did_within_80_columns() {
        let mut f = Finding {
            exploit: "shadow-modules".into(),
            tasks: vec!["exit-code".into()],
            explains: BATTERY[2].explains.into(),
            fix: BATTERY[2].fix.says.into(),
            set: BATTERY[2].fix.set.iter().map(|s| s.to_string()).collect(),
            checked: Checked::Closed { run: "0190".into() },
        };
        let text = findings_text(&f);
        assert!(text.starts_with("exploit    shadow-modules passed exit-code: Python ran a sitecustomize"), "{text}");
        assert!(text.contains("\n  fix      run the tests in a fresh environment"), "{text}");
        assert!(text.contains("closes it: with `--set environment.verify_in=fresh` it passes none"), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
        f.checked = Checked::StillPasses { run: "0191".into(), tasks: vec!["exit-code".into()] };
        assert!(findings_text(&f).contains("does NOT close it"), "{}", findings_text(&f));
        f.checked = Checked::TaskFix;
        assert!(findings_text(&f).contains("a fix to the task itself"));
    }

    #[test]
    fn a_scripts_notes_give_its_explanation_and_fix() {
        let script = "# explains: the reward file was the agent's\n# fix: fresh tests\n# set: environment.verify_in=fresh benchmark.grading=strict\necho 1 > /logs/verifier/reward.txt\n# explains: not read past the header\n";
        let (explains, fix) = script_notes(script);
        assert_eq!(explains.as_deref(), Some("the reward file was the agent's"));
        let (says, set) = fix.unwrap();
        assert_eq!(says, "fresh tests");
        assert_eq!(set, ["environment.verify_in=fresh", "benchmark.grading=strict"]);
        assert_eq!(script_notes("echo hi\n"), (None, None));
    }

    #[test]
    fn every_builtin_exploit_explains_itself_and_names_its_fix() {
        for s in BATTERY {
            assert!(!s.explains.is_empty() && !s.explains.ends_with('.'), "{}", s.name);
            assert!(!s.fix.says.is_empty() && !s.fix.says.ends_with('.'), "{}", s.name);
            for set in s.fix.set {
                assert!(set.split_once('=').is_some_and(|(k, _)| k.contains('.')), "{}: {set}", s.name);
            }
        }
    }
}
