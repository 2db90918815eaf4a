//! `db_bench`: the db_bench-style engine benchmark.
//!
//! Not built yet: it is the work of the "`bench`: db_bench-style engine benchmark" issue. Until
//! then this binary says so and exits with an error rather than printing made-up numbers.

fn main() -> std::process::ExitCode {
    eprintln!(
        "db_bench {}: not implemented yet (lsm engine {} is ready to be measured)",
        env!("CARGO_PKG_VERSION"),
        lsm::Compression::None.name()
    );
    std::process::ExitCode::from(2)
}
