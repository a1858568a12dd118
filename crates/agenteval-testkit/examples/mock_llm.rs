//! The scripted model server on its own, for trying an agent by hand against it: prints its
//! base URL and serves until killed (`cargo run -p agenteval-testkit --example mock_llm`).

fn main() {
    let mock = agenteval_testkit::llm_mock::MockLlm::start(std::time::Duration::ZERO);
    println!("{}", mock.base_url());
    loop {
        std::thread::park();
    }
}
