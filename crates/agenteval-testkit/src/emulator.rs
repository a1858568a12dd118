//! Starts the AWS emulator for a test binary: `moto_server` on a free port of 127.0.0.1, or
//! the endpoint in `AWS_ENDPOINT_URL` when one is already running (LocalStack, a shared moto).

use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static ENDPOINT: OnceLock<String> = OnceLock::new();
static SERIALIZED: OnceLock<String> = OnceLock::new();

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `server` (a shell command with `{port}` in it) under a small shell watchdog that stops
/// it when this test process exits, and waits until it listens.
fn launch(server: &str) -> String {
    let port = free_port();
    let script = format!(
        "{} >/dev/null 2>&1 & m=$!; while kill -0 {parent} 2>/dev/null; do sleep 1; done; kill $m",
        server.replace("{port}", &port.to_string()),
        parent = std::process::id()
    );
    // The watchdog shell outlives this call on purpose and is reaped when the test process
    // exits; waiting for it here would block for the whole test run.
    #[allow(clippy::zombie_processes)]
    let _watchdog = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start the emulator: install it with `pip install 'moto[server]'`");
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(start.elapsed() < Duration::from_secs(30), "the emulator did not start on port {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
    format!("http://127.0.0.1:{port}")
}

/// The emulator's endpoint, starting moto on first use.
pub fn endpoint() -> &'static str {
    ENDPOINT.get_or_init(|| match std::env::var("AWS_ENDPOINT_URL") {
        Ok(e) => e,
        Err(_) => launch("moto_server -H 127.0.0.1 -p {port}"),
    })
}

/// An emulator that handles one request at a time, for tests of concurrent conditional writes.
/// DynamoDB applies the writes to one item one after another, each condition checked against
/// the last; moto's threaded server evaluates racing conditions without a lock, so two
/// conflicting conditional updates can both succeed there. Serving one request at a time
/// restores DynamoDB's guarantee while the clients still race.
pub fn serialized_endpoint() -> &'static str {
    SERIALIZED.get_or_init(|| match std::env::var("AWS_ENDPOINT_URL") {
        Ok(e) => e,
        Err(_) => launch(
            "python3 -c 'import sys; from moto.server import DomainDispatcherApplication, create_backend_app, run_simple; \
             run_simple(\"127.0.0.1\", {port}, DomainDispatcherApplication(create_backend_app), threaded=False)'",
        ),
    })
}

/// A name unique to this test and process (buckets and tables are shared per emulator).
pub fn unique(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("{prefix}-{}-{n}", std::process::id())
}
