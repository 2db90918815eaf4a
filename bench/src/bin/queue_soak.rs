//! Queue soak: millions of pushes and pops through one list (RPUSH + LPOP) and one sorted set
//! (ZADD + ZPOPMIN) on a running server, to show that a pop costs the same after ten million
//! pops as after the first thousand. Prints pop latency p50/p99 for the first and the last
//! percent of the pops and the engine's tombstone counters (`INFO lsm`).
//!
//! ```text
//! cargo run --release -p shale-server -- --port 16390 --dir /tmp/soak &
//! cargo run --release -p bench --bin queue_soak -- --port 16390 --ops 10000000
//! ```

// A command-line tool: its report goes to stdout.
#![allow(clippy::print_stdout)]

use std::time::Instant;

use clap::Parser;
use hdrhistogram::Histogram;

#[derive(Parser, Debug)]
#[command(about = "Pushes and pops through one list and one sorted set; pop latency at the start and at the end")]
struct Args {
    /// Server address.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Server port.
    #[arg(long, default_value_t = 6379)]
    port: u16,
    /// Pops per structure (each preceded by a push).
    #[arg(long, default_value_t = 10_000_000)]
    ops: u64,
    /// Elements kept queued.
    #[arg(long, default_value_t = 1000)]
    backlog: u64,
    /// Pushes sent per pipeline between runs of pops.
    #[arg(long, default_value_t = 100)]
    batch: u64,
}

/// Pop latency of one window of the run.
struct Window {
    hist: Histogram<u64>,
}

impl Window {
    fn new() -> Self {
        Window { hist: Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds") }
    }

    fn line(&self) -> String {
        format!(
            "p50 {:>6} µs  p99 {:>6} µs  max {:>7} µs",
            self.hist.value_at_quantile(0.5),
            self.hist.value_at_quantile(0.99),
            self.hist.max()
        )
    }
}

fn lsm_info(con: &mut redis::Connection) -> redis::RedisResult<Vec<(String, String)>> {
    let text: String = redis::cmd("INFO").arg("lsm").query(con)?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| k.contains("tombstone") || k.contains("iter_entries") || k.contains("marked"))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect())
}

/// Runs one queue: `push(i)` adds element i, `pop()` removes the oldest and must return `i`.
fn soak(
    con: &mut redis::Connection,
    args: &Args,
    name: &str,
    push: impl Fn(u64) -> redis::Cmd,
    pop: impl Fn() -> redis::Cmd,
) -> redis::RedisResult<()> {
    let window = (args.ops / 100).max(1);
    let (mut first, mut last) = (Window::new(), Window::new());
    let mut pushed = 0u64;
    let mut popped = 0u64;
    let mut push_batch = |con: &mut redis::Connection, n: u64| -> redis::RedisResult<()> {
        let mut p = redis::pipe();
        for _ in 0..n {
            p.add_command(push(pushed)).ignore();
            pushed += 1;
        }
        p.query::<()>(con)
    };
    push_batch(con, args.backlog)?;
    let entries_before = entries(con)?;
    let started = Instant::now();
    while popped < args.ops {
        let n = args.batch.min(args.ops - popped);
        push_batch(con, n)?;
        for _ in 0..n {
            let t = Instant::now();
            let got: redis::Value = pop().query(con)?;
            let micros = t.elapsed().as_micros() as u64;
            if !matches!(got, redis::Value::BulkString(_) | redis::Value::Array(_)) {
                return Err(redis::RedisError::from((redis::ErrorKind::TypeError, "pop returned nothing")));
            }
            if popped < window {
                first.hist.record(micros.max(1)).ok();
            } else if popped >= args.ops - window {
                last.hist.record(micros.max(1)).ok();
            }
            popped += 1;
        }
        if popped % 1_000_000 < args.batch {
            eprintln!("{name}: {popped} pops, {:.0} s", started.elapsed().as_secs_f64());
        }
    }
    let per_pop = (entries(con)? - entries_before) as f64 / args.ops as f64;
    println!("{name}: {} pops in {:.1} s", args.ops, started.elapsed().as_secs_f64());
    println!("  first {window} pops: {}", first.line());
    println!("  last  {window} pops: {}", last.line());
    println!("  engine entries examined per push + pop: {per_pop:.1}");
    Ok(())
}

fn entries(con: &mut redis::Connection) -> redis::RedisResult<u64> {
    Ok(lsm_info(con)?.iter().find(|(k, _)| k == "lsm_iter_entries").and_then(|(_, v)| v.parse().ok()).unwrap_or(0))
}

fn main() -> redis::RedisResult<()> {
    let args = Args::parse();
    let client = redis::Client::open(format!("redis://{}:{}/", args.host, args.port))?;
    let mut con = client.get_connection()?;
    redis::cmd("DEL").arg("soak:list").arg("soak:zset").query::<()>(&mut con)?;
    soak(
        &mut con,
        &args,
        "list (RPUSH + LPOP)",
        |i| redis::cmd("RPUSH").arg("soak:list").arg(i).clone(),
        || redis::cmd("LPOP").arg("soak:list").clone(),
    )?;
    soak(
        &mut con,
        &args,
        "sorted set (ZADD + ZPOPMIN)",
        |i| redis::cmd("ZADD").arg("soak:zset").arg(i).arg(format!("m{i}")).clone(),
        || redis::cmd("ZPOPMIN").arg("soak:zset").clone(),
    )?;
    for (k, v) in lsm_info(&mut con)? {
        println!("{k}: {v}");
    }
    Ok(())
}
