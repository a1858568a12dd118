//! The scripted model server on its own, for trying an agent by hand against it: prints its
//! base URL and serves until killed (`cargo run -p agenteval-testkit --example mock_llm`;
//! `MOCK_LATENCY_MS=1000` answers every call after a second).

fn main() {
    let latency = std::env::var("MOCK_LATENCY_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let mock = agenteval_testkit::llm_mock::MockLlm::start(std::time::Duration::from_millis(latency));
    println!("{}", mock.base_url());
    loop {
        std::thread::park();
    }
}
