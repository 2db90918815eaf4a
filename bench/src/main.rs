//! `db_bench`: a db_bench-style benchmark of the `lsm` engine.
//!
//! ```text
//! cargo run --release -p bench --features zstd,jemalloc -- --benchmarks=fill_seq,read_random --compression=zstd
//! ```
// A benchmark tool's output is its product: it prints results on stdout like db_bench.
#![allow(clippy::print_stdout)]

mod db_benches;
mod error;
mod flags;
mod keys;
mod memory;
mod report;
mod runner;
mod table_benches;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::db_benches::{DbBench, DB_BENCHMARKS};
use crate::error::{Error, Result};
use crate::flags::{Command, Flags};
use crate::report::Header;
use crate::table_benches::{TableBench, TABLE_BENCHMARKS};

#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main`: freed pages go back to the OS at once instead of
/// after its ten-second decay, so the RSS a benchmark reports is what the engine holds rather
/// than what the allocator kept (10 M random writes, then 1 M random reads with a 116 MB block
/// cache: peak RSS 211 MB with the decay, 198 MB without; the same throughput).
///
/// The cached blocks' size classes (2.5–4 KiB) keep jemalloc's own slab sizes, one to a few
/// pages. Carved from 64 KiB slabs instead, they cost less metadata while the cache only
/// fills, but a cache that shrinks (memtables charged to it, `--cost_write_buffer_to_cache`,
/// take room from the blocks as they fill) evicts blocks all over the slabs and frees none of
/// them: with four readers beside a writer over 10 M entries, 48 MB stayed stranded in partly
/// used slabs and the peak RSS was 193 MB, against 137 MB with the default slabs.
#[cfg(feature = "jemalloc")]
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: lsm::allocator::MallocConf = lsm::allocator::MallocConf::new(c"dirty_decay_ms:0,muzzy_decay_ms:0");

fn main() -> ExitCode {
    // Engine logs on stderr: warnings by default, RUST_LOG for more (see RUST_LOG.md).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let flags = Flags::parse();
    let result = match &flags.command {
        Some(Command::Report { results, svg }) => report::svg_chart(results, svg).map(|_| {
            println!("wrote {}", svg.display());
        }),
        None => run(&flags),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("db_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(flags: &Flags) -> Result<()> {
    let compression: lsm::Compression = flags.compression.parse()?;
    if !compression.is_available() {
        return Err(lsm::Error::CodecUnavailable(compression.name(), compression.name()).into());
    }
    let names = flags.benchmark_list();
    if let Some(bad) =
        names.iter().find(|n| !DB_BENCHMARKS.contains(&n.as_str()) && !TABLE_BENCHMARKS.contains(&n.as_str()))
    {
        return Err(Error::Other(format!(
            "unknown benchmark '{bad}'; known: {}, {}",
            DB_BENCHMARKS.join(", "),
            TABLE_BENCHMARKS.join(", ")
        )));
    }
    let header = Header::new(flags);
    let mut out = std::io::stdout().lock();
    header.print(&mut out)?;
    let mut db: Option<DbBench> = None;
    let mut tables: Option<TableBench> = None;
    let mut results = Vec::new();
    for name in &names {
        let outcome = if TABLE_BENCHMARKS.contains(&name.as_str()) {
            if tables.is_none() {
                tables = Some(TableBench::new(flags)?);
            }
            tables.as_mut().map(|t| t.run(name)).transpose()?
        } else {
            if db.is_none() {
                db = Some(DbBench::new(flags)?);
            }
            match db.as_mut() {
                Some(d) => d.run(name)?,
                None => None,
            }
        };
        match outcome {
            Some(o) => {
                report::print_outcome(&mut out, &o)?;
                results.push(o);
            }
            None => println!("{name:<20} : skipped (--use_existing_db is set)"),
        }
    }
    if flags.statistics {
        if let Some(stats) = db.as_ref().and_then(DbBench::statistics) {
            writeln!(out, "STATISTICS:\n{stats}")?;
        }
    }
    if let Some(path) = &flags.json {
        let json = serde_json::to_string_pretty(&report::RunJson { header: &header, results: &results })
            .map_err(|e| Error::Other(format!("encoding JSON: {e}")))?;
        std::fs::write(path, json)?;
    }
    Ok(())
}
