//! Starts the AWS emulator for a test binary: moto on a port of 127.0.0.1 it picks itself, or
//! the endpoint in `AWS_ENDPOINT_URL` when one is already running (LocalStack, a shared moto).

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static ENDPOINT: OnceLock<String> = OnceLock::new();
static SERIALIZED: OnceLock<String> = OnceLock::new();

/// Starts moto on a port it picks itself (`threaded`: one thread per request, like
/// `moto_server`; else one request at a time) under a small shell watchdog that stops it when
/// this test process exits, and returns its endpoint once it listens. The server prints its port:
/// no port is chosen in advance, so no other process can take it first.
fn launch(threaded: bool) -> String {
    let port_file = std::env::temp_dir().join(format!("agenteval-moto-{}-{threaded}.port", std::process::id()));
    let _ = std::fs::remove_file(&port_file);
    let server = format!(
        "python3 -c 'from moto.server import DomainDispatcherApplication, create_backend_app; \
         from werkzeug.serving import make_server; \
         s = make_server(\"127.0.0.1\", 0, DomainDispatcherApplication(create_backend_app), threaded={}); \
         print(s.server_port, flush=True); s.serve_forever()'",
        if threaded { "True" } else { "False" }
    );
    let script = format!(
        "{server} >{port} 2>/dev/null & m=$!; while kill -0 {parent} 2>/dev/null; do sleep 1; done; kill $m",
        port = port_file.display(),
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
    loop {
        let port = std::fs::read_to_string(&port_file).ok().and_then(|s| s.trim().parse::<u16>().ok());
        if let Some(port) = port
            && TcpStream::connect(("127.0.0.1", port)).is_ok()
        {
            return format!("http://127.0.0.1:{port}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the emulator did not start: is moto installed (`pip install 'moto[server]'`)?"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The emulator's endpoint, starting moto on first use.
pub fn endpoint() -> &'static str {
    ENDPOINT.get_or_init(|| match std::env::var("AWS_ENDPOINT_URL") {
        Ok(e) => e,
        Err(_) => launch(true),
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
        Err(_) => launch(false),
    })
}

/// A name unique to this test and process (buckets and tables are shared per emulator).
pub fn unique(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("{prefix}-{}-{n}", std::process::id())
}
