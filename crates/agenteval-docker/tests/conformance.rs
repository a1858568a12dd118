//! The environment conformance suite against a real Docker engine (the local base image that
//! `docker/build-local.sh --base-only` makes, so no registry is needed).

use agenteval_core::environment::EnvSpec;

#[tokio::test(flavor = "multi_thread")]
async fn the_docker_environment_passes_the_environment_suite() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::process::Command::new(repo.join("docker/build-local.sh")).arg("--base-only").output().unwrap();
    assert!(out.status.success(), "no Docker engine: {}", String::from_utf8_lossy(&out.stderr));
    let context = tempfile::tempdir().unwrap();
    std::fs::write(
        context.path().join("Dockerfile"),
        "FROM debian:bookworm-slim\nWORKDIR /work\nCOPY seed.txt /work/seed.txt\n",
    )
    .unwrap();
    std::fs::write(context.path().join("seed.txt"), "hello\n").unwrap();
    let env = agenteval_docker::DockerEnvironment::new(Some("agenteval-local/debian:bookworm".into()));
    let spec = EnvSpec { context: Some(context.path().to_path_buf()), ..Default::default() };
    agenteval_testkit::conformance::environment_suite(&env, &spec, true).await;
}
