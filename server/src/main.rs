//! `shale-server`: the Redis-protocol server on the `lsm` engine.
//!
//! Not built yet: the RESP server, command table and storage layer are the work of the
//! "`shale-server` core" issue. Until then this binary says so and exits with an error rather
//! than pretending to serve.

fn main() -> std::process::ExitCode {
    eprintln!(
        "shale-server {}: the RESP server is not implemented yet; the storage engine is.\n\
         Try the engine: cargo run --release -p examples --example embed",
        env!("CARGO_PKG_VERSION")
    );
    std::process::ExitCode::from(2)
}
