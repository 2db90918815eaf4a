//! Embedding the `lsm` engine: open a database, write, read, batch, snapshot and scan.
//!
//! ```text
//! cargo run --release -p examples --example embed            # uses ./embed-data
//! cargo run --release -p examples --example embed -- /tmp/db
//! RUST_LOG=lsm=debug cargo run -p examples --example embed  # watch flushes and recovery
//! ```
#![allow(clippy::print_stdout)] // an example program talks to its user on stdout

use std::time::Instant;

use lsm::{Db, Options, ReadOptions, WriteBatch, WriteOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let path = std::env::args().nth(1).unwrap_or_else(|| "embed-data".into());
    let db = Db::open(&path, Options::default())?;
    println!("opened {path} at sequence {}", db.latest_sequence());

    // Single writes and reads.
    db.put(b"greeting", b"hello, world")?;
    let v = db.get(b"greeting")?.expect("just written");
    println!("greeting = {}", String::from_utf8_lossy(&v));

    // An atomic batch, durable when it returns.
    let mut batch = WriteBatch::new();
    for (id, name) in [(1, "ada"), (2, "grace"), (3, "barbara")] {
        batch.put(format!("user:{id}"), name);
    }
    db.write(batch, &WriteOptions::synced())?;

    // A snapshot keeps seeing the old state.
    let snapshot = db.snapshot();
    db.put(b"user:2", b"hopper")?;
    db.delete(b"user:3")?;
    let old = db.get_with(b"user:2", &ReadOptions::new().snapshot(&snapshot))?;
    println!("user:2 now = {:?}, at snapshot = {:?}", db.get(b"user:2")?, old);

    // Prefix scans, forwards and backwards.
    for kv in db.prefix(b"user:") {
        let (k, v) = kv?;
        println!("  {} -> {}", String::from_utf8_lossy(&k), String::from_utf8_lossy(&v));
    }
    let newest = db.prefix(b"user:").next_back().transpose()?;
    println!("last user key: {:?}", newest.map(|(k, _)| String::from_utf8_lossy(&k).into_owned()));

    // A quick bulk load to show the engine at work.
    let n = 200_000u32;
    let start = Instant::now();
    let mut batch = WriteBatch::new();
    for i in 0..n {
        batch.put(format!("bulk:{i:08}"), format!("value-{i}"));
        if batch.len() == 1000 {
            db.write(std::mem::take(&mut batch), &WriteOptions::default())?;
        }
    }
    db.write(batch, &WriteOptions::default())?;
    let wrote = start.elapsed();
    let start = Instant::now();
    let found = (0..n).step_by(7).filter(|i| matches!(db.get(format!("bulk:{i:08}")), Ok(Some(_)))).count();
    println!(
        "bulk: {n} puts in {:.2?} ({:.2} µs/put), {found} gets in {:.2?}",
        wrote,
        wrote.as_secs_f64() * 1e6 / f64::from(n),
        start.elapsed()
    );
    db.close()?;
    println!("closed cleanly; run again to see the data recovered");
    Ok(())
}
