//! Stream throughput on a running server (shale-server or redis-server), the numbers issue
//! #19 asks for:
//! - `xadd`: many clients append to one stream (`XADD key * field value`), pipelined;
//! - `group`: as many consumers of one group take the entries one at a time
//!   (`XREADGROUP … COUNT 1 … >`) and acknowledge each (`XACK`), pipelined; every entry must be
//!   delivered exactly once and none left pending, or the run fails;
//! - `xrange`: one client reads the whole stream in pages of 1,000 (`XRANGE`), entries/s.
//!
//! One line per phase: `phase <name> ops <n> secs <s> per_sec <rate>`.
//!
//! ```text
//! cargo run --release -p bench --bin stream_bench -- --port 6379 --entries 200000 --pipeline 16
//! ```

// A command-line tool: its report goes to stdout.
#![allow(clippy::print_stdout)]

use std::time::Instant;

use clap::Parser;
use redis::Value;

#[derive(Parser, Debug, Clone)]
#[command(about = "XADD, XREADGROUP+XACK and XRANGE throughput of one stream")]
struct Args {
    /// Server address.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Server port.
    #[arg(long, default_value_t = 6379)]
    port: u16,
    /// Concurrent clients (producers in `xadd`, consumers in `group`).
    #[arg(long, default_value_t = 50)]
    clients: usize,
    /// Requests each client sends per round trip.
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// Entries the stream gets (and the group consumes).
    #[arg(long, default_value_t = 200_000)]
    entries: u64,
    /// Phases to run, in order: xadd, group, xrange.
    #[arg(long, value_delimiter = ',', default_value = "xadd,group,xrange")]
    phases: Vec<String>,
    /// The stream's key (deleted first).
    #[arg(long, default_value = "bench:stream")]
    key: String,
}

type Fallible<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn connect(args: &Args) -> Fallible<redis::Connection> {
    let client = redis::Client::open(format!("redis://{}:{}/", args.host, args.port))?;
    Ok(client.get_connection()?)
}

fn report(phase: &str, ops: u64, started: Instant) {
    let secs = started.elapsed().as_secs_f64();
    println!("phase {phase} ops {ops} secs {secs:.3} per_sec {:.0}", ops as f64 / secs);
}

/// Runs `work(client index, connection)` on `clients` threads at once; the sum of what they
/// return.
fn on_clients(args: &Args, work: impl Fn(usize, &mut redis::Connection) -> Fallible<u64> + Sync) -> Fallible<u64> {
    let mut connections = (0..args.clients).map(|_| connect(args)).collect::<Fallible<Vec<_>>>()?;
    std::thread::scope(|scope| {
        let work = &work;
        let handles: Vec<_> =
            connections.iter_mut().enumerate().map(|(i, con)| scope.spawn(move || work(i, con))).collect();
        handles.into_iter().map(|h| h.join().map_err(|_| "a client thread panicked")?).sum()
    })
}

/// `entries` XADDs from all clients, `pipeline` per round trip.
fn xadd(args: &Args) -> Fallible<()> {
    let per_client = args.entries.div_ceil(args.clients as u64);
    let started = Instant::now();
    let added = on_clients(args, |i, con| {
        let mine = per_client.min(args.entries.saturating_sub(i as u64 * per_client));
        let mut sent = 0;
        while sent < mine {
            let n = (args.pipeline as u64).min(mine - sent);
            let mut pipe = redis::pipe();
            for _ in 0..n {
                pipe.cmd("XADD").arg(&args.key).arg("*").arg("field").arg("value");
            }
            let ids: Vec<String> = pipe.query(con)?;
            if ids.len() as u64 != n {
                return Err(format!("{} ids for {n} XADDs", ids.len()).into());
            }
            sent += n;
        }
        Ok(sent)
    })?;
    report("xadd", added, started);
    Ok(())
}

/// The entry IDs of an XREADGROUP reply (nil when nothing was new).
fn delivered(reply: &Value, ids: &mut Vec<Vec<u8>>) -> Fallible<()> {
    let streams = match reply {
        Value::Nil => return Ok(()),
        Value::Array(streams) => streams,
        Value::Map(pairs) => {
            for (_, entries) in pairs {
                entry_ids(entries, ids)?;
            }
            return Ok(());
        }
        other => return Err(format!("XREADGROUP replied {other:?}").into()),
    };
    for stream in streams {
        match stream {
            Value::Array(pair) if pair.len() == 2 => entry_ids(&pair[1], ids)?,
            other => return Err(format!("XREADGROUP stream reply {other:?}").into()),
        }
    }
    Ok(())
}

fn entry_ids(entries: &Value, ids: &mut Vec<Vec<u8>>) -> Fallible<()> {
    let Value::Array(entries) = entries else { return Err(format!("entries {entries:?}").into()) };
    for entry in entries {
        match entry {
            Value::Array(e) if !e.is_empty() => match &e[0] {
                Value::BulkString(id) => ids.push(id.clone()),
                other => return Err(format!("entry id {other:?}").into()),
            },
            other => return Err(format!("entry {other:?}").into()),
        }
    }
    Ok(())
}

/// One consumer group: every client reads new entries one at a time and acknowledges each,
/// until the stream has none left for the group.
fn group(args: &Args) -> Fallible<()> {
    let mut con = connect(args)?;
    // A group left by an earlier run goes (an error if the stream is missing: XGROUP CREATE
    // then says so).
    let _: redis::RedisResult<Value> = redis::cmd("XGROUP").arg("DESTROY").arg(&args.key).arg("bench").query(&mut con);
    let _: () = redis::cmd("XGROUP").arg("CREATE").arg(&args.key).arg("bench").arg("0").query(&mut con)?;
    let length: u64 = redis::cmd("XLEN").arg(&args.key).query(&mut con)?;
    let started = Instant::now();
    let consumed = on_clients(args, |i, con| {
        let consumer = format!("consumer-{i}");
        let mut taken = 0;
        loop {
            let mut pipe = redis::pipe();
            for _ in 0..args.pipeline {
                pipe.cmd("XREADGROUP")
                    .arg("GROUP")
                    .arg("bench")
                    .arg(&consumer)
                    .arg("COUNT")
                    .arg(1)
                    .arg("STREAMS")
                    .arg(&args.key)
                    .arg(">");
            }
            let replies: Vec<Value> = pipe.query(con)?;
            let mut ids = Vec::new();
            for reply in &replies {
                delivered(reply, &mut ids)?;
            }
            if ids.is_empty() {
                return Ok(taken);
            }
            let mut acks = redis::pipe();
            for id in &ids {
                acks.cmd("XACK").arg(&args.key).arg("bench").arg(&id[..]);
            }
            let acked: Vec<u64> = acks.query(con)?;
            if acked.iter().any(|&n| n != 1) {
                return Err(format!("XACK acknowledged {acked:?}").into());
            }
            taken += ids.len() as u64;
        }
    })?;
    report("group", consumed, started);
    let pending: Vec<Value> = redis::cmd("XPENDING").arg(&args.key).arg("bench").query(&mut con)?;
    let still = match pending.first() {
        Some(Value::Int(n)) => *n,
        other => return Err(format!("XPENDING replied {other:?}").into()),
    };
    if consumed != length || still != 0 {
        return Err(format!("{length} entries, {consumed} delivered, {still} still pending").into());
    }
    Ok(())
}

/// The whole stream in pages of 1,000, one client.
fn xrange(args: &Args) -> Fallible<()> {
    let mut con = connect(args)?;
    let length: u64 = redis::cmd("XLEN").arg(&args.key).query(&mut con)?;
    let started = Instant::now();
    let (mut read, mut from) = (0u64, "-".to_string());
    loop {
        let page: Vec<Value> =
            redis::cmd("XRANGE").arg(&args.key).arg(&from).arg("+").arg("COUNT").arg(1000).query(&mut con)?;
        let mut ids = Vec::new();
        entry_ids(&Value::Array(page), &mut ids)?;
        let Some(last) = ids.last() else { break };
        read += ids.len() as u64;
        from = format!("({}", String::from_utf8_lossy(last));
    }
    report("xrange", read, started);
    if read != length {
        return Err(format!("XRANGE read {read} of {length} entries").into());
    }
    Ok(())
}

fn main() -> Fallible<()> {
    let args = Args::parse();
    if args.clients == 0 || args.pipeline == 0 {
        return Err("--clients and --pipeline must be at least 1".into());
    }
    if args.phases.iter().any(|p| p == "xadd") {
        let _: u64 = redis::cmd("DEL").arg(&args.key).query(&mut connect(&args)?)?;
    }
    for phase in &args.phases {
        match phase.as_str() {
            "xadd" => xadd(&args)?,
            "group" => group(&args)?,
            "xrange" => xrange(&args)?,
            other => return Err(format!("unknown phase {other} (xadd, group, xrange)").into()),
        }
    }
    Ok(())
}
