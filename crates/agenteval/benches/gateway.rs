//! The model gateway's cost, measured through the real binary (`agenteval gateway serve`, a
//! process of its own) against the scripted mock model. Run with
//! `cargo bench -p agenteval --bench gateway`. Prints:
//! - the latency the gateway adds per call: p50 and p95 of 2,000 sequential calls to the mock
//!   (no latency of its own) directly and through the gateway, whole answers and the time to the
//!   first byte of streamed ones (target: at most 1 ms more at p50, 5 ms at p95);
//! - 10,000 calls, 1,000 in flight, against the mock answering each after 1 s: wall time directly
//!   and through the gateway (target: within 5%), and the gateway's peak memory (target: at most
//!   100 MB).
//!
//! - the rate governor's and the run budget's cost when idle: p50 and p95 of 2,000 bookings of a
//!   call under a limit it never reaches (`RateGovernor::wait_turn`, one request and one token
//!   bucket) and of 2,000 reads of the run's spend (`SpendLedger::spent`) in a SQLite run index,
//!   as every worker's gateway makes them before each call.
//!
//! The gateway runs with a token and a cost limit (so every call holds its budget and is clamped)
//! and a model of its own (so every call's body is checked). `AGENTEVAL_BENCH_BIN=PATH` measures
//! another build of agenteval (an older one, for a figure next to today's).
//!
//! `AGENTEVAL_BENCH_SCALE=0.1` shrinks both for a quick look.

use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agenteval_testkit::llm_mock::MockLlm;
use futures::StreamExt as _;

const BIN: &str = env!("CARGO_BIN_EXE_agenteval");

fn scale() -> f64 {
    std::env::var("AGENTEVAL_BENCH_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0)
}

/// A gateway process in front of `mock`; killed when dropped.
struct Served {
    child: Child,
    base: String,
    token: String,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    fn start(mock: &MockLlm) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("gateway.yaml");
        std::fs::write(dir.path().join("cases.jsonl"), "{\"id\": \"t\", \"input\": \"x\"}\n").unwrap();
        std::fs::write(
            &cfg,
            format!(
                "name: gateway-bench\nbenchmark: {{kind: jsonl, cases: cases.jsonl}}\nagent:\n  kind: command\n  command: ['true']\n  model: mock-model\n  limits: {{max_tokens: 1000000000, max_cost_usd: 1000000}}\n  upstream:\n    openai: {{base_url: '{}'}}\n    prices:\n      mock-model: {{input_per_mtok: 1, output_per_mtok: 2}}\n",
                mock.base_url()
            ),
        )
        .unwrap();
        let bin = std::env::var("AGENTEVAL_BENCH_BIN").unwrap_or_else(|_| BIN.to_string());
        let mut child = Command::new(bin)
            .args(["gateway", "serve", "--json", "--listen", "127.0.0.1:0", "--config"])
            .arg(&cfg)
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut first = String::new();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut first).unwrap();
        // A line per call follows: read and dropped, so the gateway never writes to a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let v: serde_json::Value = serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {first:?}"));
        Served {
            base: v["openai_base_url"].as_str().unwrap().to_string(),
            token: v["token"].as_str().unwrap().to_string(),
            child,
            _dir: dir,
        }
    }

    /// CPU seconds the process has used so far (user + system).
    fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
        let ticks: f64 = fields.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0)
            + fields.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
        ticks / 100.0
    }

    /// The process's peak resident memory so far, in MB.
    fn peak_mb(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        let kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
            .unwrap_or(0.0);
        kb / 1024.0
    }
}

fn body(stream: bool) -> serde_json::Value {
    serde_json::json!({"model": "mock-model", "stream": stream, "messages": [{"role": "user", "content": "hello"}]})
}

/// Time to the answer's last byte (whole) or first byte (streamed).
async fn one(client: &reqwest::Client, base: &str, token: &str, stream: bool) -> Duration {
    let started = Instant::now();
    let mut resp =
        client.post(format!("{base}/chat/completions")).bearer_auth(token).json(&body(stream)).send().await.unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    if stream {
        let first = resp.chunk().await.unwrap();
        let at = started.elapsed();
        assert!(first.is_some());
        while resp.chunk().await.unwrap().is_some() {}
        at
    } else {
        resp.bytes().await.unwrap();
        started.elapsed()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn latency(client: &reqwest::Client, base: &str, token: &str, stream: bool, n: usize) -> (Duration, Duration) {
    for _ in 0..50 {
        one(client, base, token, stream).await;
    }
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        times.push(one(client, base, token, stream).await);
    }
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.95))
}

async fn load(client: &reqwest::Client, base: &str, token: &str, calls: usize, in_flight: usize) -> Duration {
    let started = Instant::now();
    futures::stream::iter(0..calls)
        .map(|_| one(client, base, token, false))
        .buffer_unordered(in_flight)
        .for_each(|_| async {})
        .await;
    started.elapsed()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The governor and the budget's ledger when nothing waits: what each call pays for them.
async fn idle_governor(n: usize) {
    use agenteval_core::gateway::{RateGovernor, RateLedger, SpendLedger};
    use agenteval_core::traits::RunIndex as _;
    struct Ledger(agenteval_local::SqliteRunIndex, agenteval_core::RunId);
    #[async_trait::async_trait]
    impl RateLedger for Ledger {
        async fn book(&self, key: &str, now_ms: i64, cost_ms: i64) -> agenteval_core::Result<i64> {
            self.0.book_rate(&self.1, key, now_ms, cost_ms).await
        }
    }
    #[async_trait::async_trait]
    impl SpendLedger for Ledger {
        async fn spent(&self) -> agenteval_core::Result<f64> {
            self.0.spend(&self.1).await
        }
        async fn add(&self, usd: f64) -> agenteval_core::Result<f64> {
            self.0.add_spend(&self.1, usd).await
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let index = agenteval_local::SqliteRunIndex::open(&dir.path().join("index.sqlite")).unwrap();
    let run = agenteval_core::RunId::new();
    index.create_run(&agenteval_testkit::conformance::run_record(run, "bench"), &[]).await.unwrap();
    let ledger = std::sync::Arc::new(Ledger(index, run));
    let limit = agenteval_core::config::RateLimit {
        model: None,
        requests_per_minute: Some(10_000_000),
        tokens_per_minute: Some(10_000_000_000),
    };
    let governor = RateGovernor { limits: vec![limit], ledger: ledger.clone() };
    let mut booked = Vec::with_capacity(n);
    let mut read = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let waited = governor.wait_turn("mock-model", 100).await.expect("a turn at once").waited;
        booked.push(t.elapsed());
        assert!(waited.is_zero(), "an idle governor never waits");
        let t = Instant::now();
        ledger.spent().await.unwrap();
        read.push(t.elapsed());
    }
    booked.sort();
    read.sort();
    println!("rate governor and run budget when idle (SQLite run index, {n} calls each)");
    println!(
        "  governor booking p50 {:.3} ms p95 {:.3} ms | budget read p50 {:.3} ms p95 {:.3} ms",
        ms(percentile(&booked, 0.5)),
        ms(percentile(&booked, 0.95)),
        ms(percentile(&read, 0.5)),
        ms(percentile(&read, 0.95))
    );
}

#[tokio::main]
async fn main() {
    let scale = scale();
    idle_governor(((2000.0 * scale) as usize).max(100)).await;
    let client = reqwest::Client::builder().pool_max_idle_per_host(2048).build().unwrap();

    let mock = MockLlm::start(Duration::ZERO);
    let served = Served::start(&mock);
    let n = ((2000.0 * scale) as usize).max(100);
    println!("model gateway: added latency per call ({n} sequential calls each)");
    for (label, stream) in [("whole answer", false), ("streamed, first byte", true)] {
        let (d50, d95) = latency(&client, &mock.base_url(), "direct", stream, n).await;
        let (g50, g95) = latency(&client, &served.base, &served.token, stream, n).await;
        println!(
            "  {label:<22} direct p50 {:.3} ms p95 {:.3} ms | gateway p50 {:.3} ms p95 {:.3} ms | added p50 {:+.3} ms p95 {:+.3} ms",
            ms(d50),
            ms(d95),
            ms(g50),
            ms(g95),
            ms(g50) - ms(d50),
            ms(g95) - ms(d95)
        );
    }
    drop(served);
    drop(mock);

    let slow = MockLlm::start(Duration::from_secs(1));
    let served = Served::start(&slow);
    let calls = ((10_000.0 * scale) as usize).max(1000);
    let in_flight = 1000;
    println!("model gateway: {calls} calls, {in_flight} in flight, against a mock answering after 1 s");
    let direct = load(&client, &slow.base_url(), "direct", calls, in_flight).await;
    let cpu = served.cpu_seconds();
    let through = load(&client, &served.base, &served.token, calls, in_flight).await;
    let cpu = served.cpu_seconds() - cpu;
    println!(
        "  direct {:.2} s | through the gateway {:.2} s ({:+.1}%) | gateway peak memory {:.1} MB, CPU {:.0} µs a call",
        direct.as_secs_f64(),
        through.as_secs_f64(),
        (through.as_secs_f64() / direct.as_secs_f64() - 1.0) * 100.0,
        served.peak_mb(),
        cpu / calls as f64 * 1e6
    );
}
