//! Prints each task folder's digest as Harbor computes it: `cargo run -p agenteval-interchange
//! --example harbor_digest -- DIR...` (a check beside `harbor`'s own Packager).

fn main() {
    for dir in std::env::args().skip(1) {
        match agenteval_interchange::harbor::digest::task_digest(std::path::Path::new(&dir)) {
            Ok(d) => println!("{dir} {d}"),
            Err(e) => println!("{dir} error: {e}"),
        }
    }
}
