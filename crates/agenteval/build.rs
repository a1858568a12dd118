//! Links the `agenteval` binary as a position-dependent executable.
//!
//! Every task of a run started one process at a time (`tasks_per_job: 1`) starts this binary:
//! as a position-independent executable it carries ~94,000 relocations, which the dynamic
//! loader applies on every start and which dirty the pages they touch (measured: most of the
//! per-process cost). Linked at a fixed address, the linker resolves them once.

fn main() {
    println!("cargo:rustc-link-arg-bins=-no-pie");
    println!("cargo:rerun-if-changed=build.rs");
}
