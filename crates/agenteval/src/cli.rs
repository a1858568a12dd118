//! Command-line arguments (clap). Raw values only; `commands` turns them into work.

use std::path::PathBuf;

use agenteval_judge::report::Format;
use agenteval_llm::CassetteMode;
use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "agenteval", version, about = "Run AI-agent benchmarks as a fleet", propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// More log output (repeat for more); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors; no progress bar.
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

#[derive(Debug, Args, Clone)]
pub struct IndexArgs {
    /// The run index (SQLite file). Defaults to the config's, else ./runs/index.sqlite.
    #[arg(long, env = "AGENTEVAL_INDEX", global = true)]
    pub index: Option<PathBuf>,
    /// Take the index location from this run config.
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Use this backend's index: `aws` is the DynamoDB index (`AGENTEVAL_AWS_INDEX`, default
    /// dynamodb://agenteval-runs).
    #[arg(long, global = true, value_parser = crate::wiring::backend_parser())]
    pub backend: Option<String>,
}

/// A run config and what the command line changes in it.
#[derive(Debug, Args, Clone)]
pub struct RunConfigArgs {
    /// The run config (YAML).
    #[arg(long, short)]
    pub config: PathBuf,
    /// Override a config value: `--set benchmark.size=100` (repeatable).
    #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
    pub sets: Vec<String>,
    /// The backend that runs the jobs; overrides `backend.id`.
    #[arg(long, value_parser = crate::wiring::backend_parser())]
    pub backend: Option<String>,
    /// Run a shipped agent (`agenteval agents list`): `--agent codex` is `--set
    /// agent.kind=installed --set agent.preset=codex` (the config's `agent.upstream` and limits
    /// stay; its `command` and `setup` must not be set).
    #[arg(long, value_name = "PRESET")]
    pub agent: Option<String>,
    /// The agent's model; overrides `agent.model`.
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
}

impl RunConfigArgs {
    /// The overrides `--agent` and `--model` make, as a run records them
    /// (`Metadata::agent_flags`).
    pub fn agent_flags(&self) -> Vec<String> {
        let mut sets = vec![];
        if let Some(a) = &self.agent {
            sets.push("agent.kind=installed".into());
            sets.push(format!("agent.preset={a}"));
        }
        if let Some(m) = &self.model {
            sets.push(format!("agent.model={m}"));
        }
        sets
    }

    /// The `--set` overrides, with `--backend` as one more.
    pub fn overrides(&self) -> Vec<String> {
        let mut sets = self.sets.clone();
        if let Some(b) = &self.backend {
            sets.push(format!("backend.id={b}"));
        }
        sets.extend(self.agent_flags());
        sets
    }
}

/// What a run is called: `submit`'s `--name` and `--try`.
#[derive(Debug, Args, Clone, Default)]
pub struct Naming {
    /// The run's name. Without it the run takes the config's `name` with its agent added,
    /// `NAME [AGENT · MODEL]` however they were set: runs of two agents are never one history,
    /// and `latest:NAME`, `baseline:NAME` and `runs list --name NAME` find a name's one agent.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// A try: the run is named `NAME (try)`, so it never joins NAME's history in the UI, is never
    /// `latest:NAME` and never its baseline.
    #[arg(long = "try")]
    pub try_run: bool,
}

impl Naming {
    /// The name of a run of a config named `config_name` whose agent (after every override) is
    /// `agent`: `NAME [AGENT · MODEL]`, unless `--name` named it outright.
    pub fn name(&self, config_name: &str, agent: &agenteval_core::config::AgentConfig) -> String {
        let mut name = match &self.name {
            Some(n) => n.trim().to_string(),
            None => format!("{config_name} [{}]", agent.label()),
        };
        if self.try_run {
            name.push_str(" (try)");
        }
        name
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a run and drive it to the end.
    Submit {
        #[command(flatten)]
        run: RunConfigArgs,
        #[command(flatten)]
        naming: Naming,
        /// Print one JSON object with run_id, status and bundle, nothing else on stdout.
        #[arg(long)]
        json: bool,
        /// Compare the finished run with this one (a run id, `latest:NAME` or `baseline:NAME`).
        #[arg(long, value_name = "REF")]
        baseline: Option<String>,
        /// Judge the comparison with this gates file (exit 1 when a gate fails).
        #[arg(long, value_name = "FILE")]
        gates: Option<PathBuf>,
        #[command(flatten)]
        cassettes: CassetteArgs,
        /// Run only the first N tasks of the benchmark (after its filter).
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
        /// Also write a JUnit XML report to FILE: one test case per task attempt (a failure
        /// with its why; errored and infra tasks as errors; tasks never run as skipped), and
        /// the gates as a suite of their own when the run is judged.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// Run one run per combination: `--matrix agent.model=a,b,c --matrix
        /// agent.system=@p1.txt,@p2.txt` makes 6 runs (`@FILE` is the file's text), driven
        /// together as one set sharing `backend.max_concurrent_jobs` and `max_run_cost_usd`;
        /// `agenteval compare --set SET` puts them side by side (repeatable; at most 64 runs).
        #[arg(long, value_name = "KEY.PATH=V1,V2,…", conflicts_with_all = ["baseline", "gates", "junit"])]
        matrix: Vec<String>,
    },
    /// Grade a finished run's answers again, without running any agent.
    ///
    /// The benchmark's check, the evaluators and the judges run again on RUN's recorded
    /// answers, traces and patches (a task in an environment gets a new one with RUN's patch
    /// applied, so its tests see what the agent left), into a new run `NAME (regrade)` that
    /// records RUN as `regrade_of`. `--config FILE` grades with that config's benchmark
    /// settings and evaluators (the agent stays RUN's); `--set` changes either. Then `compare
    /// RUN NEW` shows what the new grading changed.
    Regrade {
        /// The run: an id, a prefix of one, `latest`, `latest:NAME` or `baseline:NAME`.
        run: String,
        /// Override a value of the grading config: `--set evaluators.0.value=Paris` (repeatable).
        #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
        sets: Vec<String>,
        #[command(flatten)]
        index: IndexArgs,
        #[arg(long)]
        json: bool,
    },
    /// Start a new run of a run's tasks, with its config: those that did not pass (`--failed`)
    /// or every one (`--all`).
    ///
    /// `--failed`: the tasks that failed, errored or were infra failures. The new run is named
    /// `NAME (rerun)` and records the run in its metadata (`rerun_of`). `--all` runs the whole
    /// run again, as its `replay_command.txt` does for a bundle in a bucket.
    Rerun {
        /// The run: an id, a prefix of one, `latest`, `latest:NAME` or `baseline:NAME`.
        run: String,
        /// Re-run the tasks that did not pass.
        #[arg(long, required_unless_present = "all", conflicts_with = "all")]
        failed: bool,
        /// Re-run every task of the run.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        index: IndexArgs,
        #[arg(long)]
        json: bool,
    },
    /// One task of a run: its outcome and why, its trace, its scores.
    ///
    /// The trace as a tree (steps, tool calls, tokens, cost, timings) and every score with its
    /// reason.
    Show {
        /// The run: an id, a prefix of one, `latest`, `latest:NAME` or `baseline:NAME`.
        run: String,
        /// The task id (as `runs show RUN --tasks` lists them).
        task: String,
        #[command(flatten)]
        index: IndexArgs,
        /// Every tool call, tool result and the answer whole (else each is cut, its middle left
        /// out).
        #[arg(long)]
        full: bool,
        #[arg(long)]
        json: bool,
    },
    /// Re-run an `llm` run, or a run whose agent called its model through the gateway
    /// (`agent.upstream`), from the model calls in its bundle and compare, task by task.
    ///
    /// Says per task MATCH, DIFFER (with the first difference) or CODE_CHANGED (agenteval's
    /// version, or how it reads the config, changed); exit 1 when any task is not MATCH. Proves
    /// the platform did not change a result. Runs on the local backend; needs no model key.
    Replay {
        /// The run to replay: an id, a prefix of one, `latest`, `latest:NAME` or `baseline:NAME`;
        /// or a bundle folder (`runs/<run_id>`, or a copy kept in a repository), read with no
        /// index.
        run: String,
        /// For CI: the replay goes to a scratch folder that is removed afterwards (so it adds
        /// nothing to an index or a runs folder), and only the verdicts are printed; exit 0 only
        /// when every task MATCHes (its tool calls and, for the `llm` agent, their results, a
        /// simulated user's turns, the final state, scores, answer and cost), 1 naming each
        /// task's first difference, 3 when the replay did not complete. A check that did not
        /// pass keeps the replay's bundle, and says where. Give `--with-config`
        /// the repository's config when the recording's paths are another machine's.
        #[arg(long)]
        check: bool,
        /// Replay with this config instead of the bundle's (e.g. a changed system prompt). The
        /// `--agent` and `--model` the run was submitted with apply to it too.
        #[arg(long = "with-config", value_name = "FILE")]
        with_config: Option<PathBuf>,
        #[command(flatten)]
        index: IndexArgs,
        #[arg(long)]
        json: bool,
    },
    /// Compare two runs task by task: paired bootstrap intervals, regressions, gates.
    ///
    /// Or, with `--set SET`, every run of a set (`submit --matrix`) against its first
    /// combination (or `--against N`): each one's pass rate with its interval, its difference
    /// from the base, its cost, and the best combination.
    Compare {
        /// The base run: a run id, `latest:NAME` (newest complete run of that name) or
        /// `baseline:NAME` (the pinned one).
        #[arg(required_unless_present = "set")]
        base: Option<String>,
        /// The candidate run, same forms.
        #[arg(required_unless_present = "set")]
        cand: Option<String>,
        /// Compare the runs of this set (its id, or a unique prefix of it) side by side.
        #[arg(long, value_name = "SET", conflicts_with_all = ["base", "cand", "gates", "record"])]
        set: Option<String>,
        /// With `--set`: the combination the others are compared with, by its number in the
        /// set's table (1 is the first) or its run id.
        #[arg(long, value_name = "N|RUN", requires = "set")]
        against: Option<String>,
        /// Gates file: exit 1 when a gate fails.
        #[arg(long, value_name = "FILE")]
        gates: Option<PathBuf>,
        /// Keep the verdict: into the candidate's bundle (`comparison.json`) and the index
        /// (`runs list` shows it). Without it `compare` changes nothing (`submit --baseline`
        /// always keeps it).
        #[arg(long, requires = "gates")]
        record: bool,
        /// Also ask a pairwise judge which run answered each paired task better (both orders;
        /// a tie when they disagree): FILE holds its settings as an `llm_pairwise` evaluator's
        /// (model, criteria, endpoint fields), its key comes from the environment. Adds the
        /// `pairwise` metric (50% is a tie) and the wins, ties and losses.
        #[arg(long, value_name = "FILE", conflicts_with = "set")]
        pairwise: Option<PathBuf>,
        /// The comparison as JSON (same as `--format json`).
        #[arg(long, conflicts_with = "format")]
        json: bool,
        #[command(flatten)]
        out: ReportArgs,
        /// Also write a JUnit XML report to FILE: the candidate's tasks as test cases (a task
        /// that regressed from the base is a failure saying so) and the gates as a suite.
        #[arg(long, value_name = "FILE", conflicts_with = "set")]
        junit: Option<PathBuf>,
        /// Bootstrap resamples.
        #[arg(long, default_value_t = 10_000)]
        resamples: usize,
        /// Bootstrap seed (recorded in the output).
        #[arg(long, default_value_t = 20_211_207)]
        seed: u64,
        #[command(flatten)]
        index: IndexArgs,
    },
    /// One task across a name's last nights: its outcome, cost, tokens and why each night,
    /// oldest first (`--json` for a chart). A night that did not complete is marked (`-`, its
    /// status beside the run), never counted as a failure or a zero.
    History {
        /// The runs' name (a config's `name`; its agents' runs `NAME [AGENT · MODEL]` too).
        name: String,
        /// The task.
        #[arg(long, value_name = "ID")]
        task: String,
        /// How many of the name's newest runs.
        #[arg(long, default_value_t = 30, value_name = "N")]
        last: usize,
        #[command(flatten)]
        index: IndexArgs,
        #[arg(long)]
        json: bool,
    },
    /// Pin or show the baseline that `baseline:NAME` refers to.
    Baseline {
        #[command(subcommand)]
        command: BaselineCommand,
    },
    /// Show the state of a run.
    Status {
        run: String,
        #[command(flatten)]
        index: IndexArgs,
        #[arg(long)]
        json: bool,
    },
    /// List or show runs.
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// Serve a read-only web UI over the run index, until Ctrl-C
    ///
    /// Runs and each name's history, a run's report or live progress, a task's trace,
    /// comparisons, and the same as JSON under /api/ (docs/ui.md). It listens on 127.0.0.1 and
    /// every request carries a token (--token-file, AGENTEVAL_UI_TOKEN, else a new one, in the
    /// printed address); --no-token on a loopback address only.
    Ui {
        #[command(flatten)]
        index: IndexArgs,
        /// Address to listen on (a loopback address unless you mean other machines to reach it).
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Port (0: any free one; the address is printed).
        #[arg(long, default_value_t = 8765)]
        port: u16,
        /// Read the token every request must carry from this file (else from
        /// AGENTEVAL_UI_TOKEN, else a new one is made); the printed address carries it.
        #[arg(long, value_name = "FILE")]
        token_file: Option<std::path::PathBuf>,
        /// No token: any process of this machine may read the UI (a single-user machine that
        /// runs no agent). Loopback binds only.
        #[arg(long, conflicts_with = "token_file")]
        no_token: bool,
        /// Refused: a token on the command line is readable by every process of the machine.
        #[arg(long, hide = true)]
        token: Option<String>,
        /// A gates file the comparison page can judge with.
        #[arg(long, value_name = "FILE")]
        gates: Option<std::path::PathBuf>,
        /// Open the UI in the default browser (through a page only you can read: the token stays
        /// off the browser's command line).
        #[arg(long)]
        open: bool,
    },
    /// Stop a run; its bundle is sealed as `interrupted`.
    Cancel {
        run: String,
        #[command(flatten)]
        index: IndexArgs,
        /// Seconds to wait for a running controller to stop.
        #[arg(long, default_value_t = 60)]
        wait: u64,
        #[arg(long)]
        json: bool,
    },
    /// Finish an interrupted run: only tasks without a result, into the same bundle.
    Resume {
        run: String,
        #[command(flatten)]
        index: IndexArgs,
        #[arg(long)]
        json: bool,
        /// Change a setting for the rest of the run: `max_run_cost_usd`, `agent.limits.*`,
        /// `backend.max_concurrent_jobs`, `backend.max_attempts`, `backend.tasks_per_job`,
        /// `backend.tasks_in_parallel` (repeatable; recorded in the bundle's metadata).
        #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
        sets: Vec<String>,
        /// Take the run over even though another controller's lease on it is live: its workers
        /// are stopped first, and it stops at its next heartbeat.
        #[arg(long)]
        force: bool,
    },
    /// Print a run's report (Markdown, JSON, or one HTML page with a trace viewer).
    ///
    /// `--format html -o report.html` writes the page. RUN may also be `latest:NAME` or
    /// `baseline:NAME`, or a saved results JSON (`FILE.json`, as `report RUN --json` or `submit
    /// --json` wrote it): its report is rendered again (text, `md` or `json`) without the index
    /// or the bundle, its verdict included when it was judged.
    Report {
        run: String,
        #[command(flatten)]
        index: IndexArgs,
        /// The summary as JSON (same as `--format json`).
        #[arg(long)]
        json: bool,
        /// Also write a JUnit XML report to FILE: one test case per task attempt (a failure
        /// with its why; errored and infra tasks as errors; tasks never run as skipped), and
        /// the gates as a suite of their own when the run is judged.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        #[command(flatten)]
        out: ReportArgs,
    },
    /// Export a run to an experiment tracker: `--to mlflow` makes one MLflow run per agenteval
    /// run (parameters, metrics, tags, the reports as artifacts); exporting again updates it.
    /// `--to swebench` writes a SWE-bench run's predictions (`predictions.jsonl`), the official
    /// harness's run report (`<model>.<run>.json`) and each instance's `report.json` and
    /// `test_output.txt` (`logs/run_evaluation/<run>/<model>/<instance>/`) into `--out`.
    /// `--to atif` writes each task attempt's trajectory as an ATIF v1.8 document
    /// (`<task>.json`: the instruction, every model call with the gateway's tokens and cost,
    /// the agent's text, tool calls and their results; scores and the agent's own usage report
    /// under `extra`) and `summary.json` (what went under `extra`, the tasks with no trace).
    /// `--to otlp` writes the run's spans (the controller's and every task's) as OTLP JSON
    /// lines, one `ExportTraceServiceRequest` per line, into `--out FILE`.
    ///
    /// The tracking server comes from `--tracking-uri` or `MLFLOW_TRACKING_URI` (an http(s)://
    /// server; `MLFLOW_TRACKING_TOKEN` or `MLFLOW_TRACKING_USERNAME`/`PASSWORD` authenticate).
    /// The experiment is the run's name unless `--experiment` says otherwise.
    Export {
        /// The run: an id, a prefix, `latest`, `latest:NAME` or `baseline:NAME`.
        run: String,
        #[command(flatten)]
        index: IndexArgs,
        /// Where to: `mlflow`, `swebench`, `atif`, `harbor` or `otlp`.
        #[arg(long, value_enum)]
        to: ExportTarget,
        /// The folder `--to swebench`, `--to atif` or `--to harbor` writes into (default:
        /// `swebench-<run id>`, `atif-<run id>`; `harbor` needs one: the job folder), or the
        /// file `--to otlp` writes (default `traces-<run id>.jsonl`).
        #[arg(long, value_name = "DIR")]
        out: Option<std::path::PathBuf>,
        /// The MLflow tracking server (default: `MLFLOW_TRACKING_URI`).
        #[arg(long, env = "MLFLOW_TRACKING_URI", value_name = "URI")]
        tracking_uri: Option<String>,
        /// The MLflow experiment (created if missing; default: the run's name).
        #[arg(long, value_name = "NAME")]
        experiment: Option<String>,
        /// Print one JSON object (the MLflow run id, its URL, what was logged).
        #[arg(long)]
        json: bool,
    },
    /// Package a complete run for a leaderboard, sealed and checkable offline: each task
    /// attempt's ATIF trajectory (`atif/`), the run as a Harbor job (`harbor/`), the tamper
    /// audit per task (`audit/`, with the exploit battery's row from `--exploits`), the digests
    /// of every input (`inputs.json`: tasks, images, agent, config), the metered cost per task
    /// (`costs.json`) and a judge's review of every passing trial (`reviews/`: whether the pass
    /// looks earned and why; a flag for people, never a change to the verdict), with
    /// `manifest.json` listing every file's sha256. The judge's calls are recorded in the
    /// package (`reviews/calls/`): `--replay PKG` makes the same reviews from them with no key.
    ///
    /// `certify --check DIR` checks a package offline: every file against the manifest (none
    /// changed, missing or added), a trajectory and a review for every passing trial, no task
    /// tampered, suspect or hackable. Exit 0 when it holds, 1 when not (each problem named).
    Certify {
        /// The run: an id, a prefix, `latest`, `latest:NAME` or `baseline:NAME`.
        #[arg(required_unless_present = "check")]
        run: Option<String>,
        /// Check the package in DIR instead, offline.
        #[arg(long, value_name = "DIR", conflicts_with_all = ["run", "judge", "out", "replay", "exploits", "judge_prompt"])]
        check: Option<PathBuf>,
        /// The folder to write (new or empty; default `certified-<run id>`).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// The reviewing judge's settings: an `llm_pass_fail` judge's fields (`model`,
        /// `base_url`, `secrets`, `price`, `bedrock`); its key comes from the environment.
        #[arg(long, value_name = "FILE", required_unless_present = "check")]
        judge: Option<PathBuf>,
        /// The review prompt (default: the shipped one, kept in every package as
        /// `reviews/prompt.md`; docs/coming-from-harbor.md). Its variables are
        /// `{{task_id}}`, `{{instruction}}`, `{{trajectory}}`, `{{grading}}` and `{{verdict}}`;
        /// any other is an error at load.
        #[arg(long, value_name = "FILE")]
        judge_prompt: Option<PathBuf>,
        /// Make the reviews from the recorded calls of this package (no key, no call).
        #[arg(long, value_name = "PKG")]
        replay: Option<PathBuf>,
        /// `agenteval audit --out DIR`'s `audit.json`: each task's exploit battery row.
        #[arg(long, value_name = "FILE")]
        exploits: Option<PathBuf>,
        #[command(flatten)]
        index: IndexArgs,
        /// Print one JSON object (the package, whether it checks, each problem).
        #[arg(long)]
        json: bool,
    },
    /// Why a run's failed tasks failed, grouped by cause: a pinned judge model reads each failed
    /// task (its instruction, why it was judged a failure, the end of its trajectory) and names
    /// the cause in a few words; tasks with the same cause form a group, largest first.
    /// Infrastructure failures are grouped apart without asking. Writes `analysis.json`, the
    /// prompt and every call (`calls/`) into `--out`; `--replay DIR` makes the same analysis from
    /// those calls with no key and no call.
    Analyze {
        /// The run: an id, a prefix, `latest`, `latest:NAME` or `baseline:NAME`.
        run: String,
        /// The judge's settings: an `llm_pass_fail` judge's fields (`model`, `base_url`,
        /// `secrets`, `price`, `bedrock`); its key comes from the environment.
        #[arg(long, value_name = "FILE")]
        judge: PathBuf,
        /// The folder to write (default `analysis-<run id>`).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Answer every call from an earlier analysis's folder (its `calls/`): no key, no call.
        #[arg(long, value_name = "DIR")]
        replay: Option<PathBuf>,
        /// Read at most this many failed tasks (the rest are listed as not read).
        #[arg(long, value_name = "N", default_value_t = 200)]
        max_tasks: usize,
        #[command(flatten)]
        index: IndexArgs,
        /// Print `analysis.json` instead of the groups.
        #[arg(long)]
        json: bool,
    },
    /// Read another tool's run into the index: `import harbor JOB_DIR` makes a Harbor job
    /// folder (`harbor run`'s `jobs/<name>/`) a run that `runs show`, `compare`, gates,
    /// baselines, `report` and `ui` read like any other; `import otlp FILE --config CONFIG`
    /// makes an agent's OTLP traces a run of CONFIG's tasks for `regrade` to grade.
    Import {
        #[command(subcommand)]
        command: ImportCommand,
    },
    /// Check a bundle: required files, checksums, consistency. Exit 0 only when valid.
    ValidateBundle {
        /// The bundle: a folder (`runs/<run_id>`), an `s3://` URI, or a run reference (id,
        /// prefix, `latest`, `latest:NAME`, `baseline:NAME`) looked up in the index.
        path: String,
        #[command(flatten)]
        index: IndexArgs,
        #[arg(long)]
        json: bool,
    },
    /// Check that everything a run needs exists, before launching anything.
    ///
    /// Locally: the bundle folder, the agent's program (readable by the agents' uids under a
    /// root worker), the secrets, each model endpoint the agent's calls go to (answers from this
    /// machine); for tasks in containers the Docker engine, each task image and, for an installed
    /// agent behind the gateway, whether the model gateway answers a task's token from a
    /// container of the first task.
    /// On AWS: credentials, region, bucket, table, cluster, task definition, network, secrets.
    Doctor {
        #[command(flatten)]
        run: RunConfigArgs,
        #[arg(long)]
        json: bool,
        /// Also run the agent once, on the benchmark's first task, on the local backend in a
        /// throw-away folder, and say what happened (a mistyped script, a debug print on stdout).
        #[arg(long)]
        probe: bool,
        /// Also build the task images not built yet (tasks in containers), and say which fail.
        #[arg(long)]
        build: bool,
    },
    /// Work with run configs.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Act in a task's environment, from inside a `command` agent (`docs/agent-protocol.md`).
    Env {
        #[command(subcommand)]
        command: EnvCommand,
    },
    /// The tasks' environment images: build them, and push them where the fleet runs them.
    Images {
        #[command(subcommand)]
        command: ImagesCommand,
    },
    /// The shipped agents (`agent: {kind: installed, preset: NAME}`).
    Agents {
        #[command(subcommand)]
        command: AgentsCommand,
    },
    /// Find the tasks an agent can pass without doing them (exploit agents beside oracle and nop).
    ///
    /// The config's benchmark runs once per exploit of a built-in battery (write the reward, plant test configuration, shadow the
    /// modules Python loads, edit the tests, print a fake test summary, outlive the verifier,
    /// exhaust its time, fetch later commits, reuse a reachable solution) and per `.sh` file in
    /// the config folder's `exploits/`, beside `oracle` and `nop`, on the config's backend.
    /// Prints per task which exploits pass (hackable), which the tamper audit caught, which
    /// fail; for each exploit that passed, why in one sentence and the fix that closes it,
    /// checked by running it again under that fix. Exit 1 when any task is hackable
    /// (docs/judging.md).
    Audit {
        #[command(flatten)]
        run: RunConfigArgs,
        /// Only these exploits (comma-separated names).
        #[arg(long, value_delimiter = ',', value_name = "NAME,...")]
        exploits: Vec<String>,
        /// The audit as JSON.
        #[arg(long)]
        json: bool,
        /// Also write audit.json, audit.md and audit.html into this folder.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// The packaged price table (USD per million tokens: input, cached input, cache write,
    /// output) and the provider page each price came from; with `--config`, the prices that
    /// config adds and whether each model it calls has one (a model without a price has an
    /// unknown cost, and a cost limit on it is refused).
    Prices {
        /// Also the prices this run config gives and the models it calls.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Harbor datasets a registry names (`benchmark: {kind: harbor, dataset: NAME@VERSION}`).
    Datasets {
        #[command(subcommand)]
        command: DatasetsCommand,
    },
    /// The model gateway on its own, for an agent you are developing (`docs/agents.md`).
    Gateway {
        #[command(subcommand)]
        command: GatewayCommand,
    },
    /// The AWS stack: deploy it, and remember its settings for every `--backend aws` command.
    ///
    /// `aws deploy` creates or updates the stack (`infra/agenteval.yaml`, built into this
    /// binary), waits for it, and keeps its outputs (bucket, table, cluster, task definitions,
    /// security groups, image repository) as a stack profile on this machine. Then a config
    /// with `backend.id: aws` takes them for every field it leaves out, and `runs list
    /// --backend aws`, `status`, `resume`, `baseline`, `report` and `ui` find the stack's
    /// table. What the config, `--set`, `--index` or `AGENTEVAL_AWS_INDEX` says wins.
    Aws {
        #[command(subcommand)]
        command: AwsCommand,
    },
    /// The run index: recreate it from the bundles when it was lost.
    Index {
        #[command(subcommand)]
        command: IndexCommand,
    },
    /// Supervise one program of a task: its process tree, and its view of the machine (started by workers).
    #[command(hide = true)]
    AgentSandbox {
        #[arg(long)]
        view: Option<String>,
        /// The supervised side: apply the view, then become the program.
        #[arg(long)]
        inner: bool,
        /// With `--inner`: the program and all it starts cannot trace another process
        /// (`ptrace`, `process_vm_*`; a fleet's environment commands).
        #[arg(long)]
        no_trace: bool,
        /// With `--inner`: the agent's command: it and all it starts cannot reach the memory,
        /// variables or files of a process they did not start (`CAP_MKNOD` dropped).
        #[arg(long)]
        agent: bool,
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Run one job (started by a backend, not by people).
    #[command(hide = true)]
    Worker {
        #[arg(long, required_unless_present = "fork_server")]
        job: Option<String>,
        /// Start each job's worker by fork when the controller asks, over stdin (a socket).
        #[arg(long, conflicts_with = "job")]
        fork_server: bool,
        /// Room in the fork server's command line for its workers' (`agenteval-forkserver`).
        #[arg(long, hide = true, requires = "fork_server")]
        title_room: Option<String>,
    },
}

/// Model-call cassettes of the `llm` agent and of agents whose calls go through the gateway
/// (`docs/agents.md`).
#[derive(Debug, Args, Clone)]
pub struct CassetteArgs {
    /// A folder of cassettes, one `<task id>.jsonl` per task (local backend), or a run's
    /// bundle on S3 (`s3://BUCKET/PREFIX/RUN_ID`: the calls it kept) to replay on any backend.
    #[arg(long, value_name = "DIR|S3_BUNDLE")]
    pub cassettes: Option<PathBuf>,
    /// `record` (call the model, write every call), `replay` (answer from the cassettes only;
    /// a request that differs fails its task) or `replay-or-live` (misses go to the model).
    #[arg(long, value_name = "MODE", default_value = "replay", value_parser = cassette_mode_parser(), requires = "cassettes")]
    pub cassette_mode: CassetteMode,
}

/// Parses `--cassette-mode` into the `llm` crate's own modes (its words, one list).
fn cassette_mode_parser() -> impl clap::builder::TypedValueParser<Value = CassetteMode> {
    use clap::builder::{PossibleValuesParser, TypedValueParser as _};
    let modes = [CassetteMode::Record, CassetteMode::Replay, CassetteMode::ReplayOrLive];
    PossibleValuesParser::new(modes.map(CassetteMode::as_str))
        .map(|s| CassetteMode::parse(&s).expect("a possible value"))
}

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Runs, newest first.
    List {
        #[command(flatten)]
        index: IndexArgs,
        /// Only runs with this name (a history, with each run's gate verdict).
        #[arg(long)]
        name: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[arg(long)]
        json: bool,
    },
    /// One run in detail.
    Show {
        run: String,
        #[command(flatten)]
        index: IndexArgs,
        /// Include every task, with why each one that did not pass did not.
        #[arg(long)]
        tasks: bool,
        /// Only the tasks that did not pass (failed, errored, infra); implies --tasks.
        #[arg(long)]
        failed: bool,
        /// Only the tasks with this tag (repeatable); implies --tasks.
        #[arg(long, value_name = "TAG")]
        tag: Vec<String>,
        /// Only the tasks whose agent called this tool (its trace's tool calls); implies --tasks.
        #[arg(long, value_name = "NAME")]
        tool: Option<String>,
        /// Only the tasks that ended this way: completed, agent_error, infra_failure,
        /// replay_miss, limit_tokens, limit_time, limit_cost, limit_turns, limit_trace,
        /// limit_disk or limit_memory; implies --tasks.
        #[arg(long = "ended-by", value_name = "KIND", value_parser = ended_by_parser())]
        ended_by: Option<String>,
        /// Only the tasks whose why holds this text (any case); implies --tasks.
        #[arg(long, value_name = "TEXT")]
        why: Option<String>,
        /// Each task's reason whole, however long (else cut to the terminal's width); implies
        /// --tasks.
        #[arg(long)]
        full: bool,
        #[arg(long)]
        json: bool,
    },
}

/// Parses `--ended-by`: the ways a task ends, as results and the index name them.
fn ended_by_parser() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(agenteval_core::model::TerminatedBy::ALL.map(|t| t.as_str()))
}

/// Parses `--format`: the judge's formats, each listed with what it is for.
fn format_parser() -> impl clap::builder::TypedValueParser<Value = Format> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser as _};
    PossibleValuesParser::new(Format::ALL.map(|f| PossibleValue::new(f.as_str()).help(f.about())))
        .map(|s| s.parse::<Format>().expect("a possible value"))
}

/// Where and how a report is written.
#[derive(Debug, Args, Clone)]
pub struct ReportArgs {
    /// `text` (the default), `md` (a PR comment), `json` or `html` (one self-contained file);
    /// with `-o FILE` and no `--format`, the file's extension says which.
    #[arg(long, value_parser = format_parser())]
    pub format: Option<Format>,
    /// Write to this file instead of standard output.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

impl ReportArgs {
    /// The format asked for: `--format`, else the output file's extension (`.md`, `.json`,
    /// `.html`, `.txt`), else text. An extension that says another format than `--format` is a
    /// usage error: `-o r.html --format md` would write Markdown into a page.
    pub fn format(&self) -> agenteval_core::Result<Format> {
        let by_extension = self.output.as_ref().and_then(|p| p.extension()).and_then(|e| e.to_str()).and_then(|e| {
            match e.to_ascii_lowercase().as_str() {
                "txt" => Some(Format::Text),
                "htm" => Some(Format::Html),
                other => other.parse().ok(),
            }
        });
        match (self.format, by_extension) {
            (Some(f), Some(e)) if f != e => Err(agenteval_core::Error::invalid(format!(
                "--format {} but {} is named like {}: drop one or make them agree",
                f.as_str(),
                self.output.as_deref().unwrap_or(std::path::Path::new("")).display(),
                e.as_str()
            ))),
            (Some(f), _) => Ok(f),
            (None, Some(e)) => Ok(e),
            (None, None) => Ok(Format::Text),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum BaselineCommand {
    /// Pin a run as the baseline of its name (only a complete run, unless --force).
    Set {
        run: String,
        /// Pin a run that did not complete.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        index: IndexArgs,
        #[arg(long)]
        json: bool,
    },
    /// The run pinned for a name.
    Show {
        name: String,
        #[command(flatten)]
        index: IndexArgs,
        #[arg(long)]
        json: bool,
    },
    /// Unpin a name's baseline (`baseline:NAME` then names none until one is pinned or
    /// promoted).
    Unset {
        name: String,
        #[command(flatten)]
        index: IndexArgs,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum EnvCommand {
    /// Run COMMAND (its words joined by spaces, run by `bash -c`) in the task's environment,
    /// through the socket `AGENTEVAL_ENV_SOCKET` names. Prints its stdout and stderr and exits
    /// with its exit code: 124 when it ran past its timeout, 125 when the environment failed.
    Exec {
        /// Seconds the command may run (default and ceiling: the agent's `max_wall_seconds`).
        #[arg(long)]
        timeout: Option<f64>,
        /// Where it runs in the environment (default: the agent's working folder there).
        #[arg(long)]
        workdir: Option<String>,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
    /// Serve this container as a task's environment to the worker that launched it, over the
    /// link `AGENTEVAL_ENVLINK_DIAL`, `_ID` and `_TOKEN` name (started by a fleet's environment
    /// task, not by people).
    #[command(hide = true)]
    Serve,
}

#[derive(Debug, Subcommand)]
pub enum ImagesCommand {
    /// Build every distinct environment image of the config's tasks on the local Docker engine,
    /// tagged `agenteval-env:<hash of its folder>` as runs tag them (a built one is reused), and
    /// with an `installed` agent each image's agent layer (`agenteval-agent:<hash>`; a `setup`
    /// that needs secrets is left to the run).
    ///
    /// With `--push REPOSITORY` (an ECR repository `<account>.dkr.ecr.<region>.amazonaws.com/NAME`,
    /// or any registry `HOST[:PORT]/NAME`) each is pushed as `REPOSITORY:<hash>`, which is what
    /// `submit --backend aws` runs each task in when `aws.image_repository` names that
    /// repository (it refuses to start, exit 2, while one is missing). Exit 4 when an image
    /// fails to build or push.
    Build {
        #[command(flatten)]
        run: RunConfigArgs,
        /// Push the images to this repository (ECR credentials come from the AWS chain).
        #[arg(long, value_name = "REPOSITORY")]
        push: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// Every preset with its pinned version, the wire its calls speak, its package and the
    /// record of its run that becomes the trace.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum DatasetsCommand {
    /// Every dataset of the registry: name, version, task count, description.
    List {
        /// A registry in Harbor's format: a URL or a file (default: Harbor's own).
        #[arg(long, value_name = "URL|FILE")]
        registry: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum GatewayCommand {
    /// Serve the config's `agent.upstream` behind one token until Ctrl-C: point your agent at
    /// the printed base URLs and token, and see each of its model calls metered (the provider's
    /// tokens, the price table's cost), budgeted (the agent's `limits.max_tokens` and
    /// `max_cost_usd`) and printed as it ends. The keys come from the config's backend (the
    /// environment or `backend.secrets_file` locally) and never leave this process.
    Serve {
        #[command(flatten)]
        run: RunConfigArgs,
        /// Where to listen (keep it on loopback: anyone who reaches it spends with your token).
        #[arg(long, default_value = "127.0.0.1:8787", value_name = "ADDR:PORT")]
        listen: String,
        /// Write every call (request, answer or stream, usage, timing) to this cassette file as
        /// it ends; the file is owner-only (0600): it holds every prompt and answer.
        #[arg(long, value_name = "FILE", conflicts_with = "replay")]
        record: Option<PathBuf>,
        /// Answer every call from this cassette file (by fingerprint), with no provider and no
        /// key; a call it does not have is refused.
        #[arg(long, value_name = "FILE")]
        replay: Option<PathBuf>,
        /// One JSON line per call (and one with the address and token first).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AwsCommand {
    /// Create the stack, or update it, wait until it is done, and remember its outputs as the
    /// stack profile in use (`~/.config/agenteval/stacks/PROFILE.json`; `AGENTEVAL_CONFIG_HOME`
    /// moves the folder).
    Deploy {
        #[command(flatten)]
        stack: StackArgs,
        /// The template (default: `infra/agenteval.yaml` as built into this binary).
        #[arg(long, value_name = "FILE")]
        template: Option<PathBuf>,
        /// A stack parameter (repeatable): `--param ImageUri=… --param Subnets=subnet-a,subnet-b
        /// --param SecurityGroups=sg-c --param VpcId=vpc-d`. An existing stack keeps the
        /// values of those not given.
        #[arg(long = "param", value_name = "KEY=VALUE")]
        params: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Remember a stack that is already deployed (by `aws cloudformation deploy`, a console, a
    /// colleague) as the stack profile in use.
    Use {
        #[command(flatten)]
        stack: StackArgs,
        #[arg(long)]
        json: bool,
    },
    /// The stack profile in use: its file, its stack and the settings it supplies.
    Show {
        #[arg(long)]
        json: bool,
    },
}

/// Which stack, and the profile it is remembered as.
#[derive(Debug, Args)]
pub struct StackArgs {
    /// The CloudFormation stack's name.
    #[arg(long, default_value = "agenteval")]
    pub stack: String,
    /// The name to remember it by (default: the stack's); `AGENTEVAL_STACK_PROFILE=NAME`
    /// chooses a profile other than the last one deployed or used.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// The region (default: the standard chain's, `AWS_REGION` or the AWS profile's).
    #[arg(long)]
    pub region: Option<String>,
    /// An endpoint other than AWS's own, such as an emulator (default: `AWS_ENDPOINT_URL`).
    #[arg(long, value_name = "URL")]
    pub endpoint_url: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum IndexCommand {
    /// Recreate the runs and task states of every bundle under a root that the index lacks
    /// (runs it has are left as they are). Unsealed bundles come back `interrupted`, so
    /// `agenteval resume` can finish them.
    Rebuild {
        /// The bundle root: a folder, or `s3://bucket/prefix`.
        #[arg(long)]
        bundles: String,
        /// The index to write (created if missing). Defaults to `index.sqlite` in a local root;
        /// an `s3://` root needs `--index dynamodb://TABLE`.
        #[command(flatten)]
        index: IndexArgs,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check a config file without running anything; every problem with file:line:column.
    Validate {
        file: PathBuf,
        #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
        sets: Vec<String>,
        #[arg(long)]
        json: bool,
    },
}

/// What `import` reads.
#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// A Harbor job folder: each trial a task attempt (a task's later trials its repetitions),
    /// graded by Harbor's rules from the rewards Harbor recorded; an exception of the agent's
    /// (its timeout, its exit status, its model's limits) is `errored`, any other (the
    /// environment, Docker) `infra`. Harbor's tokens and cost are kept as the agent's own
    /// report, never counted as metered. Trajectories, verifier output and logs are kept in each
    /// task's pack. A task whose folder is found (where Harbor ran it, or under `--tasks`) gets
    /// the fingerprint an agenteval run of it has, so `compare` pairs the two; the others carry
    /// Harbor's digest. The run goes to `--config FILE`'s storage and index, else to `--index
    /// FILE` (its bundles beside it; default: the nearest `runs/index.sqlite`, made if none).
    /// Importing the same job again changes nothing.
    Harbor {
        /// The job folder (it holds `config.json`, `result.json` and a folder per trial).
        job: PathBuf,
        /// A folder holding the job's task folders by name, when they are not where Harbor ran
        /// them.
        #[arg(long, value_name = "DIR")]
        tasks: Option<PathBuf>,
        /// The run's name (default: `JOB [harbor:AGENT · MODEL]`).
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        index: IndexArgs,
        /// Print one JSON object (the run id, its counts, its mean reward beside Harbor's).
        #[arg(long)]
        json: bool,
    },
    /// An agent's traces recorded elsewhere: OTLP JSON (one `ExportTraceServiceRequest` per
    /// line, as `export --to otlp` and a collector's file exporter write them, or one whole
    /// request). Each task is the spans under a span (or resource) with `agenteval.task.id`;
    /// its answer is its last model turn's text, its tool calls and results and its tokens come
    /// from its GenAI spans (`chat`, `execute_tool`; content captured), a judge's spans left out.
    /// The run is `--config CONFIG`'s tasks, unscored, in its storage and index: `agenteval
    /// regrade RUN` grades them with CONFIG's evaluators. Importing the same file again changes
    /// nothing.
    Otlp {
        /// The traces file.
        file: PathBuf,
        /// The run's name (default: `CONFIG's name [otlp]`).
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        index: IndexArgs,
        /// Print one JSON object (the run id, its tasks, its spans).
        #[arg(long)]
        json: bool,
    },
}

/// Where `export` sends a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportTarget {
    /// An MLflow tracking server, over its REST API.
    Mlflow,
    /// Files in the official SWE-bench harness's shapes (a `swebench` run).
    Swebench,
    /// Each task attempt's trajectory as an ATIF v1.8 document (Harbor's Agent Trajectory
    /// Interchange Format): `--out DIR/<task>.json`, with `summary.json` saying what ATIF
    /// could not hold.
    Atif,
    /// The run's spans (the controller's and every task's) in OTLP's JSON encoding, one
    /// `ExportTraceServiceRequest` per line (the OpenTelemetry file exporter's format; a
    /// collector's `otlpjsonfile` receiver reads it): `--out FILE`, default
    /// `traces-<run id>.jsonl`.
    Otlp,
    /// A Harbor job folder at `--out DIR`: the job's `config.json`, `result.json` and
    /// `lock.json` (task digests as Harbor computes them), a trial folder per task attempt
    /// with its `config.json`, `result.json`, `agent/trajectory.json` (ATIF), the verifier's
    /// rewards and output, and the attempt's log and files.
    Harbor,
}
