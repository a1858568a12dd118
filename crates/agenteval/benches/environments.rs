//! Environment benchmark: what an environment costs a task, and a fleet of them. Run with
//! `cargo bench -p agenteval --bench environments` (needs a Docker engine; the local base image
//! is made by `docker/build-local.sh --base-only`).
//!
//! Prints:
//! - prepare + teardown of a `docker` environment with its image cached, and of a `workspace`
//!   environment, median and p95 over 100 tasks (targets: docker ≤ 0.5 s, workspace ≤ 20 ms);
//! - a `workspace` task's whole environment cost to the worker (prepare, start snapshot, patch,
//!   teardown) on the shipped Python repository, and 99 tasks of the shipped `repo-tasks` (its 3
//!   × 33) with the `oracle` agent and 8 workspaces at once;
//! - 100 tasks of the shipped `harbor-mini` benchmark (its 5 tasks × 20 repetitions) with the
//!   `oracle` agent and 8 environments at once: wall time, and the peak memory of agenteval's
//!   processes (the controller and its workers; the containers' own memory is the engine's).
//!
//! - a task image's start on the Fargate stand-in's terms (a task definition of its own): the
//!   init container copying the worker from `agenteval:dev` into a fresh volume, then the worker
//!   starting inside the task image (`agenteval --version`), with the image on the engine and
//!   pulled from a registry on this machine (Debian's `docker-registry`); needs
//!   `docker/build-local.sh agenteval:dev`. Alone: `AGENTEVAL_BENCH_ONLY=task-image`.
//!
//! - containment (issue 43), alone with `AGENTEVAL_BENCH_ONLY=containment`: a task attempt's uid
//!   lease; the agent's snapshot and patch made by the worker's git over copies of the working
//!   folder, next to the old way (git run inside the environment); the environment socket's
//!   peer check; and the change report of a container holding 100,000 files the agent wrote.
//!   Median and p95 over 100 tasks each (targets: +10 ms or less a task; the report ≤ 100 ms).
//!
//! - Harbor's checks, alone with `AGENTEVAL_BENCH_ONLY=harbor-checks`: what a Harbor task pays
//!   for the agent's leftover processes held still while its tests run (the image's processes
//!   listed at the baseline, every other process stopped and listed, the woken ones looked for
//!   after), and for the change report's mounted files, with one leftover process; next to the
//!   check it replaced (the verifier folder read a second after the tests, and a `find` of the
//!   reward's change times). Median and p95 over 100 tasks.
//!
//! `AGENTEVAL_BENCH_SCALE=0.1` shrinks every scenario for a quick look.

#[path = "../tests/it/util/mod.rs"]
mod util;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agenteval_core::RunId;
use agenteval_core::environment::EnvSpec;
use agenteval_core::model::TaskSpec;
use agenteval_core::traits::Environment;

const BASE: &str = "agenteval-local/debian:bookworm";

fn scale(n: usize) -> usize {
    let s: f64 = std::env::var("AGENTEVAL_BENCH_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    ((n as f64 * s).round() as usize).max(2)
}

fn quantiles(mut xs: Vec<Duration>) -> (Duration, Duration) {
    xs.sort();
    let at = |q: f64| xs[((xs.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95))
}

async fn overhead(env: &dyn Environment, spec: &EnvSpec, n: usize) -> (Duration, Duration) {
    let run = RunId::new();
    let task: TaskSpec = serde_json::from_value(serde_json::json!({"id": "bench", "input": ""})).unwrap();
    // One first, off the clock: the image build (docker) or the cold cache.
    let h = env.prepare(&run, &task, 0, spec).await.expect("prepare");
    env.teardown(&h).await.unwrap();
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let start = Instant::now();
        let h = env.prepare(&run, &task, i as u32 + 1, spec).await.expect("prepare");
        env.teardown(&h).await.unwrap();
        times.push(start.elapsed());
    }
    quantiles(times)
}

/// Prepare, snapshot, patch and teardown: what the worker does around every task that acts.
async fn worker_overhead(env: Arc<dyn Environment>, spec: &EnvSpec, n: usize) -> (Duration, Duration) {
    let run = RunId::new();
    let task: TaskSpec = serde_json::from_value(serde_json::json!({"id": "bench", "input": ""})).unwrap();
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let start = Instant::now();
        let handle = env.prepare(&run, &task, i as u32 + 1, spec).await.expect("prepare");
        let session = agenteval_core::traits::EnvSession { env: env.clone(), handle };
        let snap = agenteval_engine::environments::snapshot::Snapshot::take(&session, &run)
            .await
            .expect("a snapshot (is git installed?)");
        let _ = snap.patch(&session, 1 << 20).await;
        env.teardown(&session.handle).await.unwrap();
        times.push(start.elapsed());
    }
    quantiles(times)
}

/// The resident memory of `pid` and all its descendants, in KiB.
fn tree_rss_kb(pid: u32) -> u64 {
    let mut total = 0;
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{p}/status")) {
            total += s
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0);
        }
        if let Ok(c) = std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")) {
            todo.extend(c.split_whitespace().filter_map(|x| x.parse::<u32>().ok()));
        }
    }
    total
}

fn main() {
    let out =
        std::process::Command::new(util::repo().join("docker/build-local.sh")).arg("--base-only").output().unwrap();
    assert!(out.status.success(), "no Docker engine: {}", String::from_utf8_lossy(&out.stderr));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let n = scale(100);
    let dir = tempfile::tempdir().unwrap();
    let context = dir.path().join("env");
    std::fs::create_dir_all(&context).unwrap();
    std::fs::write(
        context.join("Dockerfile"),
        "FROM debian:bookworm-slim\nWORKDIR /app\nCOPY data.txt /app/data.txt\n",
    )
    .unwrap();
    std::fs::write(context.join("data.txt"), "some task files\n".repeat(100)).unwrap();
    let spec = EnvSpec { context: Some(context.clone()), ..Default::default() };

    let docker = agenteval_docker::DockerEnvironment::new(Some(BASE.into()));
    if std::env::var("AGENTEVAL_BENCH_ONLY").as_deref() == Ok("task-image") {
        task_image_start(&rt, &docker, &context, scale(10));
        return;
    }
    if std::env::var("AGENTEVAL_BENCH_ONLY").as_deref() == Ok("harbor-checks") {
        rt.block_on(harbor_checks(Arc::new(docker), &spec, n));
        return;
    }
    if std::env::var("AGENTEVAL_BENCH_ONLY").as_deref() == Ok("containment") {
        containment(&rt, Arc::new(docker), &dir, n);
        return;
    }
    let (p50, p95) = rt.block_on(overhead(&docker, &spec, n));
    println!(
        "docker environment, image cached: prepare + teardown p50 {:.0} ms, p95 {:.0} ms over {n} tasks (target ≤ 500 ms)",
        p50.as_secs_f64() * 1e3,
        p95.as_secs_f64() * 1e3
    );

    let workspace = agenteval_engine::environments::workspace::WorkspaceEnvironment::new(dir.path().join("ws"), vec![]);
    let (p50, p95) = rt.block_on(overhead(&workspace, &spec, n));
    println!(
        "workspace environment: prepare + teardown p50 {:.1} ms, p95 {:.1} ms over {n} tasks (target ≤ 20 ms)",
        p50.as_secs_f64() * 1e3,
        p95.as_secs_f64() * 1e3
    );

    // What a workspace task costs the worker in all: prepare, the start snapshot, the patch and
    // teardown, on the shipped Python repository.
    let repo =
        EnvSpec { context: Some(util::repo().join("configs/repo-tasks/fix-slugify/repo")), ..Default::default() };
    let (p50, p95) = rt.block_on(worker_overhead(Arc::new(workspace), &repo, n));
    println!(
        "workspace environment with its snapshot and patch (git): p50 {:.1} ms, p95 {:.1} ms over {n} tasks",
        p50.as_secs_f64() * 1e3,
        p95.as_secs_f64() * 1e3
    );
    let cfg = dir.path().join("repo-tasks.yaml");
    std::fs::write(
        &cfg,
        format!(
            "name: bench-repo-tasks\nbenchmark:\n  kind: jsonl\n  cases: {}\nagent:\n  kind: oracle\nrepetitions: {}\nenvironment:\n  kind: workspace\nbackend:\n  max_concurrent_jobs: 8\n  concurrency: fixed\n  tasks_per_job: 1\nstorage:\n  bundle_root: {}\n",
            util::repo().join("configs/repo-tasks/cases.jsonl").display(),
            scale(33),
            dir.path().join("runs").display()
        ),
    )
    .unwrap();
    let (wall, peak_kb, v) = util::submit_sampled(&cfg, tree_rss_kb);
    println!(
        "repo-tasks, {} tasks, oracle, 8 workspaces at once: {:.1} s wall ({} passed), agenteval's processes peak {} MiB",
        v["summary"]["tasks_finished"],
        wall.as_secs_f64(),
        v["summary"]["passed"],
        peak_kb / 1024
    );

    let reps = scale(20);
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        format!(
            "name: bench-harbor\nbenchmark:\n  kind: harbor\n  path: {}\nagent:\n  kind: oracle\nrepetitions: {reps}\nenvironment:\n  kind: docker\n  base_image: {BASE}\nbackend:\n  max_concurrent_jobs: 8\n  concurrency: fixed\n  tasks_per_job: 1\nstorage:\n  bundle_root: {}\n",
            util::repo().join("configs/harbor-mini").display(),
            dir.path().join("runs").display()
        ),
    )
    .unwrap();
    // Once to build the images, then measured.
    let _ = util::submit_sampled(&cfg, |_| 0);
    let (wall, peak_kb, v) = util::submit_sampled(&cfg, tree_rss_kb);
    println!(
        "harbor-mini, {} tasks, oracle, 8 environments at once: {:.1} s wall ({} passed), agenteval's processes peak {} MiB",
        v["summary"]["tasks_finished"],
        wall.as_secs_f64(),
        v["summary"]["passed"],
        peak_kb / 1024
    );
}

/// Harbor's checks around a task's tests, new and replaced, per task (see the header).
async fn harbor_checks(env: Arc<dyn Environment>, spec: &EnvSpec, n: usize) {
    use agenteval_core::environment::ExecRequest;
    use agenteval_engine::environments::leftovers;
    let run = RunId::new();
    let task: TaskSpec = serde_json::from_value(serde_json::json!({"id": "bench", "input": ""})).unwrap();
    let root = |cmd: &str| ExecRequest { user: Some("0".into()), ..ExecRequest::new(cmd, Duration::from_secs(30)) };
    let (mut new, mut old, mut report) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let h = env.prepare(&run, &task, i as u32, spec).await.expect("prepare");
        let session = agenteval_core::traits::EnvSession { env: env.clone(), handle: h.clone() };
        // The baseline's process listing (one more exec at prepare), then the agent leaves one
        // process behind and the tests' turn comes.
        let started = Instant::now();
        env.exec(&h, &root("for p in /proc/[0-9]*; do echo ${p#/proc/}; done")).await.unwrap();
        let listing = started.elapsed();
        env.exec(&h, &root("nohup sh -c 'while true; do sleep 1; done' >/dev/null 2>&1 &")).await.unwrap();
        let started = Instant::now();
        let held = leftovers::hold(&session).await.expect("held").expect("a container's leftovers are held");
        assert!(!held.frozen.is_empty() && held.running.is_empty(), "{held:?}");
        let _ = leftovers::woken(&session, &held).await;
        new.push(started.elapsed() + listing);
        let started = Instant::now();
        let _ = env.changed_outside(&h).await;
        report.push(started.elapsed());
        // What it replaced: a second's wait, then a `find` of the reward's change times.
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let find = "cd /logs/verifier 2>/dev/null || exit 0; find . -type f -newerct @1 -printf 'after %P\\n'; find . -type f ! -newerct @1 -printf 'before %P\\n'";
        let _ = env.exec(&h, &root(find)).await;
        old.push(started.elapsed());
        env.teardown(&h).await.unwrap();
    }
    let show = |what: &str, xs: Vec<Duration>| {
        let (p50, p95) = quantiles(xs);
        println!("{what}: p50 {:.1} ms, p95 {:.1} ms over {n} tasks", ms(p50), ms(p95));
    };
    show("Harbor's rules, leftovers held still (baseline listing, stop and list, woken after)", new);
    show("the change report with its mounted files (/etc/hosts, resolv.conf, hostname)", report);
    show("the check it replaced (a 1 s wait, then a find of the reward's change times)", old);
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The snapshot and patch as they were made before issue 43: git inside the environment, over
/// its working folder, with a git folder beside it.
async fn in_env_snapshot_and_patch(session: &agenteval_core::traits::EnvSession) {
    use agenteval_core::environment::ExecRequest;
    let root = session.env.worker_root(&session.handle);
    let git = format!(
        "GIT_DIR={}/tmp/.agenteval-start GIT_WORK_TREE={} git -c user.name=a -c user.email=a@b -c core.autocrlf=false",
        root.trim_end_matches('/'),
        session.handle.workdir
    );
    let snap = format!(
        "mkdir -p {}/tmp && {git} init -q && {git} add -A && {git} commit -q --allow-empty -m start",
        root.trim_end_matches('/')
    );
    let patch = format!("{git} add -A >/dev/null 2>&1 && {git} diff --cached --binary HEAD");
    for cmd in [snap, patch] {
        let req = ExecRequest { user: Some("0".into()), ..ExecRequest::new(cmd, Duration::from_secs(120)) };
        let out = session.env.exec(&session.handle, &req).await.expect("exec");
        assert!(out.ok(), "{}", out.stderr);
    }
}

/// Issue 43's costs per task: the uid lease, the snapshot and patch the new way and the old way
/// (workspace and docker), the socket's peer check, and the change report of 100,000 files.
fn containment(
    rt: &tokio::runtime::Runtime,
    docker: Arc<agenteval_docker::DockerEnvironment>,
    dir: &tempfile::TempDir,
    n: usize,
) {
    use agenteval_engine::environments::snapshot::Snapshot;
    let task: TaskSpec = serde_json::from_value(serde_json::json!({"id": "bench", "input": ""})).unwrap();
    let mut lease = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let l = agenteval_engine::isolation::uids::lease().expect("a lease");
        lease.push(t.elapsed());
        drop(l);
    }
    let (p50, p95) = quantiles(lease);
    println!(
        "uid lease (root: {}): p50 {:.3} ms, p95 {:.3} ms over {n}",
        nix::unistd::geteuid().is_root(),
        ms(p50),
        ms(p95)
    );

    let me = std::process::id() as i32;
    let child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let t = Instant::now();
    for _ in 0..1000 {
        assert!(agenteval_engine::environments::socket::descends_from(child.id() as i32, me));
    }
    println!("socket peer check (a child's ancestry): {:.1} µs a connection", t.elapsed().as_secs_f64() * 1e6 / 1000.0);
    let mut child = child;
    let _ = child.kill();
    let _ = child.wait();

    let workspace: Arc<dyn Environment> =
        Arc::new(agenteval_engine::environments::workspace::WorkspaceEnvironment::new(dir.path().join("ws-c"), vec![]));
    let repo =
        EnvSpec { context: Some(util::repo().join("configs/repo-tasks/fix-slugify/repo")), ..Default::default() };
    let image = dir.path().join("env-c");
    std::fs::create_dir_all(&image).unwrap();
    std::fs::write(
        image.join("Dockerfile"),
        "FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY data.txt /app/data.txt
",
    )
    .unwrap();
    std::fs::write(
        image.join("data.txt"),
        "some task files
"
        .repeat(100),
    )
    .unwrap();
    let in_docker = EnvSpec { context: Some(image), ..Default::default() };
    for (name, env, spec) in
        [("workspace", workspace, &repo), ("docker", docker.clone() as Arc<dyn Environment>, &in_docker)]
    {
        let run = RunId::new();
        let (mut new, mut old) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for i in 0..n {
            let handle = rt.block_on(env.prepare(&run, &task, i as u32 + 1, spec)).expect("prepare");
            let session = agenteval_core::traits::EnvSession { env: env.clone(), handle };
            let t = Instant::now();
            rt.block_on(async {
                let snap = Snapshot::take(&session, &run).await.expect("snapshot");
                snap.patch(&session, 1 << 20).await.expect("patch");
            });
            new.push(t.elapsed());
            let t = Instant::now();
            rt.block_on(in_env_snapshot_and_patch(&session));
            old.push(t.elapsed());
            rt.block_on(env.teardown(&session.handle)).unwrap();
        }
        let ((n50, n95), (o50, o95)) = (quantiles(new), quantiles(old));
        println!(
            "{name}: snapshot + patch by the worker's git p50 {:.1} ms, p95 {:.1} ms; in the environment (before) p50 {:.1} ms, p95 {:.1} ms; over {n} tasks: {:+.1} ms a task at the median",
            ms(n50),
            ms(n95),
            ms(o50),
            ms(o95),
            ms(n50) - ms(o50)
        );
    }

    // The change report of a container in which the agent wrote 100,000 files.
    let handle = rt.block_on(docker.prepare(&RunId::new(), &task, 1, &in_docker)).expect("prepare");
    let req = agenteval_core::environment::ExecRequest::new(
        "mkdir -p /opt/many && cd /opt/many && seq 1 100000 | xargs touch",
        Duration::from_secs(300),
    );
    assert!(rt.block_on(docker.exec(&handle, &req)).unwrap().ok());
    let mut times = Vec::new();
    let mut found = 0;
    for _ in 0..scale(10) {
        let t = Instant::now();
        found = rt.block_on(docker.changed_outside(&handle)).len();
        times.push(t.elapsed());
    }
    let (p50, p95) = quantiles(times);
    println!(
        "change report of 100,000 files the agent wrote: p50 {:.0} ms, p95 {:.0} ms ({found} listed; target ≤ 100 ms)",
        ms(p50),
        ms(p95)
    );
    rt.block_on(docker.teardown(&handle)).unwrap();
}

fn docker(args: &[&str]) -> std::process::Output {
    std::process::Command::new("docker").args(args).output().unwrap()
}

/// The time from nothing to the worker running inside a task image, as the stand-in starts a
/// task image's ECS task: a volume, the init container, the task image's container.
fn start_once(image: &str) -> Duration {
    let vol = format!("agenteval-bench-{}", uuid::Uuid::now_v7());
    let t = Instant::now();
    assert!(docker(&["volume", "create", &vol]).status.success());
    let init = docker(&[
        "run",
        "--rm",
        "--user",
        "0",
        "-v",
        &format!("{vol}:/agenteval"),
        "--entrypoint",
        "/bin/sh",
        "agenteval:dev",
        "-c",
        "cp /usr/local/bin/agenteval /agenteval/agenteval",
    ]);
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    let run = docker(&[
        "run",
        "--rm",
        "--user",
        "0",
        "-v",
        &format!("{vol}:/agenteval:ro"),
        "--entrypoint",
        "/agenteval/agenteval",
        image,
        "--version",
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let took = t.elapsed();
    docker(&["volume", "rm", "-f", &vol]);
    took
}

fn task_image_start(
    rt: &tokio::runtime::Runtime,
    env: &agenteval_docker::DockerEnvironment,
    context: &std::path::Path,
    n: usize,
) {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cfg = dir.path().join("registry.yml");
    std::fs::write(
        &cfg,
        format!(
            "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let mut registry = std::process::Command::new("docker-registry")
        .args(["serve", cfg.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("docker-registry");
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (tag, _) = rt.block_on(env.build_image(context, Duration::from_secs(600))).unwrap();
    let pushed = format!("127.0.0.1:{port}/bench-envs:{}", tag.rsplit_once(':').unwrap().1);
    rt.block_on(env.push(&tag, &pushed, None)).unwrap();
    let size: u64 = String::from_utf8_lossy(&docker(&["image", "inspect", "--format", "{{.Size}}", &tag]).stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    let mut cached = Vec::new();
    let mut pulled = Vec::new();
    for _ in 0..n {
        cached.push(start_once(&pushed));
        docker(&["rmi", "-f", &pushed, &tag]);
        pulled.push(start_once(&pushed));
    }
    let (c50, c95) = quantiles(cached);
    let (p50, p95) = quantiles(pulled);
    println!(
        "task image start (volume + init container + worker in the task image), {} MB image, {n} times each: cached p50 {:.0} ms p95 {:.0} ms; pulled from a local registry p50 {:.0} ms p95 {:.0} ms (its base layers stay on the engine)",
        size / 1_000_000,
        c50.as_secs_f64() * 1e3,
        c95.as_secs_f64() * 1e3,
        p50.as_secs_f64() * 1e3,
        p95.as_secs_f64() * 1e3
    );
    let _ = registry.kill();
    let _ = registry.wait();
}
