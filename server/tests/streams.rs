//! Streams against a real `shale-server`: IDs and their errors, ranges, XDEL and trimming
//! (exact and by whole nodes, as Redis trims), XREAD with and without BLOCK, RESP3 replies,
//! a stream surviving a restart and a crash, consumer groups (pending entries, claims, blocked
//! readers told their stream or group is gone) and a work queue across a dead consumer and a
//! restart.

mod common;

use std::time::Duration;

use common::Server;
use redis::{cmd, Value};

fn err(r: redis::RedisResult<Value>) -> String {
    let e = r.unwrap_err();
    format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
}

/// `(id, [field, value, …])` entries of an XRANGE-style reply.
type Entries = Vec<(String, Vec<String>)>;

fn xrange(c: &mut redis::Connection, key: &str, start: &str, end: &str) -> Entries {
    cmd("XRANGE").arg(key).arg(start).arg(end).query(c).unwrap()
}

fn ids(entries: &Entries) -> Vec<&str> {
    entries.iter().map(|(id, _)| id.as_str()).collect()
}

#[test]
fn ids_ranges_and_deletes_follow_redis() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let add = |c: &mut redis::Connection, id: &str| -> redis::RedisResult<Value> {
        cmd("XADD").arg("s").arg(id).arg("f").arg(id).query(c)
    };
    assert_eq!(add(&mut c, "1-1").unwrap(), Value::BulkString(b"1-1".to_vec()));
    assert_eq!(add(&mut c, "1-*").unwrap(), Value::BulkString(b"1-2".to_vec()));
    assert_eq!(add(&mut c, "5").unwrap(), Value::BulkString(b"5-0".to_vec()));
    assert_eq!(
        err(add(&mut c, "5-0")),
        "ERR The ID specified in XADD is equal or smaller than the target stream top item"
    );
    assert_eq!(err(add(&mut c, "0-0")), "ERR The ID specified in XADD must be greater than 0-0");
    assert_eq!(err(add(&mut c, "x")), "ERR Invalid stream ID specified as stream command argument");
    assert_eq!(
        err(cmd("XADD").arg("s").arg("*").arg("lonely").query(&mut c)),
        "ERR wrong number of arguments for 'xadd' command"
    );
    // An automatic ID is after the last one, even when the clock is behind it.
    cmd("XADD").arg("future").arg("99999999999999-5").arg("a").arg("b").query::<()>(&mut c).unwrap();
    let next: String = cmd("XADD").arg("future").arg("*").arg("a").arg("b").query(&mut c).unwrap();
    assert_eq!(next, "99999999999999-6");

    assert_eq!(ids(&xrange(&mut c, "s", "-", "+")), ["1-1", "1-2", "5-0"]);
    assert_eq!(ids(&xrange(&mut c, "s", "(1-1", "5")), ["1-2", "5-0"]);
    assert_eq!(ids(&xrange(&mut c, "s", "1", "1")), ["1-1", "1-2"], "ms-only bounds span every sequence");
    let rev: Entries = cmd("XREVRANGE").arg("s").arg("+").arg("-").arg("COUNT").arg(2).query(&mut c).unwrap();
    assert_eq!(ids(&rev), ["5-0", "1-2"]);
    assert_eq!(rev[0].1, ["f", "5"]);
    assert_eq!(
        cmd("XRANGE").arg("s").arg("-").arg("+").arg("COUNT").arg(0).query::<Value>(&mut c).unwrap(),
        Value::Nil
    );
    assert_eq!(
        err(cmd("XRANGE").arg("s").arg("(-").arg("+").query(&mut c)),
        "ERR Invalid stream ID specified as stream command argument"
    );
    assert!(xrange(&mut c, "missing", "-", "+").is_empty());

    // XDEL: counted once, the first ID moves, the largest deleted ID is kept.
    assert_eq!(cmd("XDEL").arg("s").arg("1-1").arg("1-1").arg("9-9").query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(ids(&xrange(&mut c, "s", "-", "+")), ["1-2", "5-0"]);
    assert_eq!(cmd("XLEN").arg("s").query::<i64>(&mut c).unwrap(), 2);
    let info: std::collections::HashMap<String, Value> = cmd("XINFO").arg("STREAM").arg("s").query(&mut c).unwrap();
    assert_eq!(info["recorded-first-entry-id"], Value::BulkString(b"1-2".to_vec()));
    assert_eq!(info["max-deleted-entry-id"], Value::BulkString(b"1-1".to_vec()));
    assert_eq!(info["entries-added"], Value::Int(3));
    assert_eq!(info["last-generated-id"], Value::BulkString(b"5-0".to_vec()));

    // Deleting every entry leaves an empty stream, which still exists.
    assert_eq!(cmd("XDEL").arg("s").arg("1-2").arg("5-0").query::<i64>(&mut c).unwrap(), 2);
    assert_eq!(cmd("TYPE").arg("s").query::<String>(&mut c).unwrap(), "stream");
    assert_eq!(cmd("XLEN").arg("s").query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(
        err(add(&mut c, "4-0")),
        "ERR The ID specified in XADD is equal or smaller than the target stream top item",
        "the last ID outlives the entries"
    );
    // NOMKSTREAM, XSETID, wrong types.
    assert_eq!(
        cmd("XADD").arg("none").arg("NOMKSTREAM").arg("*").arg("a").arg("b").query::<Value>(&mut c).unwrap(),
        Value::Nil
    );
    assert_eq!(cmd("EXISTS").arg("none").query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(err(cmd("XSETID").arg("none").arg("1-1").query(&mut c)), "ERR no such key");
    cmd("XSETID").arg("s").arg("100-0").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("XADD").arg("s").arg("100-*").arg("a").arg("b").query::<String>(&mut c).unwrap(), "100-1");
    cmd("SET").arg("str").arg("x").query::<()>(&mut c).unwrap();
    assert!(err(cmd("XADD").arg("str").arg("*").arg("a").arg("b").query(&mut c)).starts_with("WRONGTYPE"));
    assert!(err(cmd("XLEN").arg("str").query(&mut c)).starts_with("WRONGTYPE"));
    assert_eq!(cmd("OBJECT").arg("ENCODING").arg("s").query::<String>(&mut c).unwrap(), "stream");
}

#[test]
fn trimming_is_exact_or_by_whole_nodes() {
    let server = Server::start(&["--stream-node-max-entries", "10"]);
    let mut c = server.client();
    for i in 1..=95 {
        cmd("XADD").arg("s").arg(format!("{i}-0")).arg("n").arg(i).query::<()>(&mut c).unwrap();
    }
    // `~` removes whole nodes of ten entries only: 95 → keep at least 50 → 55 left.
    assert_eq!(cmd("XTRIM").arg("s").arg("MAXLEN").arg("~").arg(50).query::<i64>(&mut c).unwrap(), 40);
    assert_eq!(xrange(&mut c, "s", "-", "+")[0].0, "41-0");
    // LIMIT caps the work: one node of ten.
    assert_eq!(
        cmd("XTRIM").arg("s").arg("MAXLEN").arg("~").arg(0).arg("LIMIT").arg(15).query::<i64>(&mut c).unwrap(),
        10
    );
    // Exact trimming cuts inside a node.
    assert_eq!(cmd("XTRIM").arg("s").arg("MAXLEN").arg(7).query::<i64>(&mut c).unwrap(), 38);
    assert_eq!(ids(&xrange(&mut c, "s", "-", "+")), ["89-0", "90-0", "91-0", "92-0", "93-0", "94-0", "95-0"]);
    assert_eq!(cmd("XTRIM").arg("s").arg("MINID").arg("93").query::<i64>(&mut c).unwrap(), 4);
    assert_eq!(cmd("XLEN").arg("s").query::<i64>(&mut c).unwrap(), 3);
    assert_eq!(
        err(cmd("XTRIM").arg("s").arg("MAXLEN").arg(1).arg("LIMIT").arg(1).query(&mut c)),
        "ERR syntax error, LIMIT cannot be used without the special ~ option"
    );
    assert_eq!(
        err(cmd("XTRIM").arg("s").arg("MAXLEN").arg(1).arg("MINID").arg(1).query(&mut c)),
        "ERR syntax error, MAXLEN and MINID options at the same time are not compatible"
    );
    // XADD trims the entry it adds too: MAXLEN 0 leaves an empty stream.
    cmd("XADD").arg("s").arg("MAXLEN").arg(0).arg("*").arg("a").arg("b").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("XLEN").arg("s").query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(cmd("EXISTS").arg("s").query::<i64>(&mut c).unwrap(), 1);
    // Pipelined adds run as one write group: each sees the one before it.
    let mut pipe = redis::pipe();
    for i in 0..100 {
        pipe.cmd("XADD").arg("piped").arg("MAXLEN").arg(50).arg("*").arg("i").arg(i);
    }
    pipe.cmd("XLEN").arg("piped");
    let mut replies: Vec<Value> = pipe.query(&mut c).unwrap();
    assert_eq!(replies.pop(), Some(Value::Int(50)));
    let added: Vec<String> = replies.into_iter().map(|v| redis::from_redis_value(&v).unwrap()).collect();
    let parsed: Vec<(u64, u64)> = added
        .iter()
        .map(|id| {
            let (ms, seq) = id.split_once('-').unwrap();
            (ms.parse().unwrap(), seq.parse().unwrap())
        })
        .collect();
    assert!(parsed.windows(2).all(|w| w[0] < w[1]), "{added:?}");
    assert_eq!(xrange(&mut c, "piped", "-", "+")[0].0, added[50]);
    // A capped stream: each add drops the oldest entry, reads start at the live head.
    for i in 0..500 {
        cmd("XADD").arg("capped").arg("MAXLEN").arg(3).arg("*").arg("i").arg(i).query::<()>(&mut c).unwrap();
    }
    let tail = xrange(&mut c, "capped", "-", "+");
    assert_eq!(tail.iter().map(|(_, f)| f[1].as_str()).collect::<Vec<_>>(), ["497", "498", "499"]);
}

#[test]
fn xread_serves_now_or_blocks_until_xadd() {
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("XADD").arg("a").arg("1-0").arg("k").arg("v1").query::<()>(&mut c).unwrap();
    cmd("XADD").arg("a").arg("2-0").arg("k").arg("v2").query::<()>(&mut c).unwrap();
    let got: Vec<(String, Entries)> =
        cmd("XREAD").arg("COUNT").arg(1).arg("STREAMS").arg("nokey").arg("a").arg("0").arg("0").query(&mut c).unwrap();
    assert_eq!(got, [("a".to_string(), vec![("1-0".to_string(), vec!["k".to_string(), "v1".to_string()])])]);
    assert_eq!(cmd("XREAD").arg("STREAMS").arg("a").arg("$").query::<Value>(&mut c).unwrap(), Value::Nil);
    assert_eq!(
        err(cmd("XREAD").arg("STREAMS").arg("a").arg("b").arg("0").query(&mut c)),
        "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified."
    );
    assert_eq!(
        err(cmd("XREAD").arg("BLOCK").arg(-1).arg("STREAMS").arg("a").arg("$").query(&mut c)),
        "ERR timeout is negative"
    );
    // A timeout answers a null array.
    let none: Value = cmd("XREAD").arg("BLOCK").arg(50).arg("STREAMS").arg("a").arg("$").query(&mut c).unwrap();
    assert_eq!(none, Value::Nil);
    // Blocked on `$` of two streams: the XADD to one wakes it with just that stream.
    let port = server.port;
    let reader = std::thread::spawn(move || {
        let mut r = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
        cmd("XREAD")
            .arg("BLOCK")
            .arg(10_000)
            .arg("STREAMS")
            .arg("a")
            .arg("b")
            .arg("$")
            .arg("$")
            .query::<Vec<(String, Entries)>>(&mut r)
            .unwrap()
    });
    for _ in 0..200 {
        let clients: String = cmd("INFO").arg("clients").query(&mut c).unwrap();
        if clients.contains("blocked_clients:1") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cmd("XADD").arg("b").arg("*").arg("new").arg("x").query::<()>(&mut c).unwrap();
    let woke = reader.join().unwrap();
    assert_eq!(woke.len(), 1);
    assert_eq!(woke[0].0, "b");
    assert_eq!(woke[0].1[0].1, ["new", "x"]);
    // RESP3: a map from key to entries.
    let mut r3 =
        redis::Client::open(format!("redis://127.0.0.1:{port}/?protocol=resp3")).unwrap().get_connection().unwrap();
    let v: Value = cmd("XREAD").arg("STREAMS").arg("a").arg("1-0").query(&mut r3).unwrap();
    assert!(matches!(v, Value::Map(ref m) if m.len() == 1), "{v:?}");
}

#[test]
fn streams_survive_restart_and_crash_and_move_with_their_key() {
    let server = Server::start(&["--stream-node-max-entries", "4"]);
    let mut c = server.client();
    for i in 0..20 {
        cmd("XADD").arg("s").arg("*").arg("i").arg(i).query::<()>(&mut c).unwrap();
    }
    cmd("XTRIM").arg("s").arg("MAXLEN").arg("~").arg(10).query::<()>(&mut c).unwrap();
    let before = xrange(&mut c, "s", "-", "+");
    assert_eq!(before.len(), 12, "three whole nodes of four went");
    cmd("COPY").arg("s").arg("copy").query::<()>(&mut c).unwrap();
    cmd("RENAME").arg("copy").arg("renamed").query::<()>(&mut c).unwrap();
    drop(c);
    let server = server.restart(&["--stream-node-max-entries", "4"]);
    let mut c = server.client();
    assert_eq!(xrange(&mut c, "s", "-", "+"), before);
    assert_eq!(xrange(&mut c, "renamed", "-", "+"), before);
    cmd("XADD").arg("s").arg("*").arg("after").arg("restart").query::<()>(&mut c).unwrap();
    drop(c);
    let server = server.crash_restart(&[]);
    let mut c = server.client();
    assert_eq!(cmd("XLEN").arg("s").query::<i64>(&mut c).unwrap(), 13);
    assert_eq!(cmd("XLEN").arg("renamed").query::<i64>(&mut c).unwrap(), 12);
    // DUMP / RESTORE round trip, groups included.
    cmd("XGROUP").arg("CREATE").arg("s").arg("g").arg("0").query::<()>(&mut c).unwrap();
    cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g")
        .arg("alice")
        .arg("COUNT")
        .arg(2)
        .arg("STREAMS")
        .arg("s")
        .arg(">")
        .query::<()>(&mut c)
        .unwrap();
    let payload: Vec<u8> = cmd("DUMP").arg("s").query(&mut c).unwrap();
    cmd("RESTORE").arg("restored").arg(0).arg(&payload).query::<()>(&mut c).unwrap();
    assert_eq!(xrange(&mut c, "restored", "-", "+"), xrange(&mut c, "s", "-", "+"));
    let pending =
        |c: &mut redis::Connection, key: &str| -> Value { cmd("XPENDING").arg(key).arg("g").query(c).unwrap() };
    assert_eq!(pending(&mut c, "restored"), pending(&mut c, "s"));
}

/// Streams move between Redis and Shale with DUMP / RESTORE, both ways: entries, deleted-entry
/// bookkeeping and groups with their pending entries.
#[test]
fn stream_payloads_cross_to_and_from_redis() {
    let Some((_redis, mut r, _)) = common::start_redis() else { return };
    let server = Server::start(&[]);
    let mut c = server.client();
    for i in 1..=150 {
        cmd("XADD")
            .arg("s")
            .arg(format!("{i}-1"))
            .arg("f")
            .arg(i)
            .arg("g")
            .arg(format!("x{i}"))
            .query::<()>(&mut r)
            .unwrap();
    }
    cmd("XADD").arg("s").arg("200-1").arg("other").arg("1").query::<()>(&mut r).unwrap();
    cmd("XDEL").arg("s").arg("3-1").query::<()>(&mut r).unwrap();
    cmd("XGROUP").arg("CREATE").arg("s").arg("g").arg("0").query::<()>(&mut r).unwrap();
    cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g")
        .arg("alice")
        .arg("COUNT")
        .arg(3)
        .arg("STREAMS")
        .arg("s")
        .arg(">")
        .query::<()>(&mut r)
        .unwrap();
    cmd("XGROUP").arg("CREATECONSUMER").arg("s").arg("g").arg("bob").query::<()>(&mut r).unwrap();
    let payload: Vec<u8> = cmd("DUMP").arg("s").query(&mut r).unwrap();
    cmd("RESTORE").arg("s").arg(0).arg(&payload).query::<()>(&mut c).unwrap();
    let same = |r: &mut redis::Connection, c: &mut redis::Connection, key: &str| {
        for args in [
            vec!["XRANGE", key, "-", "+"],
            vec!["XPENDING", key, "g"],
            vec!["XLEN", key],
            vec!["XPENDING", key, "g", "-", "+", "10", "alice"],
        ] {
            let mut theirs: Value = cmd(args[0]).arg(&args[1..]).query(r).unwrap();
            let mut ours: Value = cmd(args[0]).arg(&args[1..]).query(c).unwrap();
            if args.len() > 4 {
                // Idle times differ by the time between the two calls.
                for v in [&mut theirs, &mut ours] {
                    if let Value::Array(rows) = v {
                        rows.iter_mut().for_each(|row| {
                            if let Value::Array(f) = row {
                                f[2] = Value::Nil
                            }
                        });
                    }
                }
            }
            assert_eq!(ours, theirs, "{args:?}");
        }
        let info = |conn: &mut redis::Connection| {
            let m: std::collections::HashMap<String, Value> = cmd("XINFO").arg("STREAM").arg(key).query(conn).unwrap();
            [
                "length",
                "last-generated-id",
                "max-deleted-entry-id",
                "entries-added",
                "recorded-first-entry-id",
                "groups",
            ]
            .map(|k| m[k].clone())
        };
        assert_eq!(info(c), info(r));
    };
    same(&mut r, &mut c, "s");
    // And back: Shale's payload restores in Redis.
    let ours: Vec<u8> = cmd("DUMP").arg("s").query(&mut c).unwrap();
    cmd("RESTORE").arg("back").arg(0).arg(&ours).query::<()>(&mut r).unwrap();
    cmd("RESTORE").arg("back").arg(0).arg(&ours).query::<()>(&mut c).unwrap();
    same(&mut r, &mut c, "back");
}

/// `(key, entries)` of an XREADGROUP reply (nil when nothing came).
type Read = Option<Vec<(String, Entries)>>;

fn read_group(c: &mut redis::Connection, consumer: &str, count: usize, block_ms: u64) -> Entries {
    let got: Read = cmd("XREADGROUP")
        .arg("GROUP")
        .arg("workers")
        .arg(consumer)
        .arg("COUNT")
        .arg(count)
        .arg("BLOCK")
        .arg(block_ms)
        .arg("STREAMS")
        .arg("jobs")
        .arg(">")
        .query(c)
        .unwrap();
    got.map(|mut streams| streams.pop().map(|(_, e)| e).unwrap_or_default()).unwrap_or_default()
}

/// The work queue: producers XADD, consumers of one group XREADGROUP and XACK, one
/// consumer dies holding entries and XAUTOCLAIM hands them to another, the server restarts in
/// the middle; every job is processed exactly once and nothing stays pending.
#[test]
fn a_work_queue_processes_every_job_exactly_once_across_a_crashed_consumer_and_a_restart() {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    const PRODUCERS: usize = 4;
    const PER_PHASE: usize = 250;
    let server = Server::start(&[]);
    let mut admin = server.client();
    cmd("XGROUP").arg("CREATE").arg("jobs").arg("workers").arg("$").arg("MKSTREAM").query::<()>(&mut admin).unwrap();
    let tally: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
    let mut server = Some(server);
    for phase in 0..2u64 {
        let port = server.as_ref().unwrap().port;
        let connect =
            move || redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let producers: Vec<_> = (0..PRODUCERS as u64)
            .map(|p| {
                std::thread::spawn(move || {
                    let mut c = connect();
                    for i in 0..PER_PHASE as u64 {
                        let job = (phase * PRODUCERS as u64 + p) * 1_000_000 + i;
                        cmd("XADD").arg("jobs").arg("*").arg("job").arg(job).query::<()>(&mut c).unwrap();
                    }
                })
            })
            .collect();
        let consumers: Vec<_> = (0..4)
            .map(|n| {
                let (tally, done) = (Arc::clone(&tally), Arc::clone(&done));
                std::thread::spawn(move || {
                    let mut c = connect();
                    let me = format!("worker-{n}");
                    while !done.load(Ordering::Acquire) {
                        let mut jobs = read_group(&mut c, &me, 20, 50);
                        // Worker 3 of the first phase dies with what it just read.
                        if phase == 0 && n == 3 && !jobs.is_empty() {
                            return;
                        }
                        // Worker 0 also takes over entries idle for 200 ms (the dead worker's).
                        if n == 0 {
                            let (_next, claimed, _gone): (String, Entries, Vec<String>) = cmd("XAUTOCLAIM")
                                .arg("jobs")
                                .arg("workers")
                                .arg(&me)
                                .arg(200)
                                .arg("0-0")
                                .arg("COUNT")
                                .arg(50)
                                .query(&mut c)
                                .unwrap();
                            jobs.extend(claimed);
                        }
                        if jobs.is_empty() {
                            continue;
                        }
                        {
                            let mut t = tally.lock().unwrap();
                            for (_, fields) in &jobs {
                                *t.entry(fields[1].parse().unwrap()).or_default() += 1;
                            }
                        }
                        let acked: usize =
                            cmd("XACK").arg("jobs").arg("workers").arg(ids(&jobs)).query(&mut c).unwrap();
                        assert_eq!(acked, jobs.len());
                    }
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        let want = (phase as usize + 1) * PRODUCERS * PER_PHASE;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let pending: (u64, Value, Value, Value) =
                cmd("XPENDING").arg("jobs").arg("workers").query(&mut admin).unwrap();
            if tally.lock().unwrap().len() == want && pending.0 == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "jobs left: {} of {want}, {} pending",
                tally.lock().unwrap().len(),
                pending.0
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        done.store(true, Ordering::Release);
        for c in consumers {
            c.join().unwrap();
        }
        if phase == 0 {
            drop(admin);
            server = Some(server.take().unwrap().restart(&[]));
            admin = server.as_ref().unwrap().client();
        }
    }
    let tally = tally.lock().unwrap();
    assert_eq!(tally.len(), 2 * PRODUCERS * PER_PHASE);
    assert!(tally.values().all(|&n| n == 1), "a job processed twice");
    let groups: Vec<std::collections::HashMap<String, Value>> =
        cmd("XINFO").arg("GROUPS").arg("jobs").query(&mut admin).unwrap();
    assert_eq!(groups[0]["pending"], Value::Int(0));
    assert_eq!(groups[0]["lag"], Value::Int(0));
    assert_eq!(groups[0]["entries-read"], Value::Int((2 * PRODUCERS * PER_PHASE) as i64));
    let consumers: Vec<std::collections::HashMap<String, Value>> =
        cmd("XINFO").arg("CONSUMERS").arg("jobs").arg("workers").query(&mut admin).unwrap();
    assert_eq!(consumers.len(), 4, "{consumers:?}");
}

#[test]
fn consumer_groups_track_pending_entries_and_answer_blocked_readers_when_their_stream_goes() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(
        err(cmd("XGROUP").arg("CREATE").arg("s").arg("g").arg("$").query(&mut c)),
        "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically."
    );
    for i in 1..=3 {
        cmd("XADD").arg("s").arg(format!("{i}-0")).arg("f").arg(i).query::<()>(&mut c).unwrap();
    }
    cmd("XGROUP").arg("CREATE").arg("s").arg("g").arg("0").query::<()>(&mut c).unwrap();
    assert_eq!(
        err(cmd("XGROUP").arg("CREATE").arg("s").arg("g").arg("0").query(&mut c)),
        "BUSYGROUP Consumer Group name already exists"
    );
    assert_eq!(ids(&read_group_of(&mut c, "s", "alice", 2)), ["1-0", "2-0"]);
    assert_eq!(ids(&read_group_of(&mut c, "s", "bob", 10)), ["3-0"]);
    // Summary: count, smallest and largest pending IDs, and each consumer's count.
    let summary: (u64, String, String, Vec<(String, String)>) =
        cmd("XPENDING").arg("s").arg("g").query(&mut c).unwrap();
    assert_eq!(
        summary,
        (3, "1-0".into(), "3-0".into(), vec![("alice".into(), "2".into()), ("bob".into(), "1".into())])
    );
    // History: alice reads her own pending entries again (delivery counts go up).
    let again: Vec<(String, Entries)> =
        cmd("XREADGROUP").arg("GROUP").arg("g").arg("alice").arg("STREAMS").arg("s").arg("0").query(&mut c).unwrap();
    assert_eq!(ids(&again[0].1), ["1-0", "2-0"]);
    let detail: Vec<(String, String, u64, u64)> =
        cmd("XPENDING").arg("s").arg("g").arg("-").arg("+").arg(10).arg("alice").query(&mut c).unwrap();
    assert_eq!(detail.iter().map(|d| (d.0.as_str(), d.3)).collect::<Vec<_>>(), [("1-0", 2), ("2-0", 2)]);
    // XCLAIM moves an entry to bob; XACK removes it once.
    let claimed: Vec<String> =
        cmd("XCLAIM").arg("s").arg("g").arg("bob").arg(0).arg("1-0").arg("JUSTID").query(&mut c).unwrap();
    assert_eq!(claimed, ["1-0"]);
    assert_eq!(cmd("XACK").arg("s").arg("g").arg("1-0").arg("1-0").arg("9-9").query::<i64>(&mut c).unwrap(), 1);
    let summary: (u64, String, String, Vec<(String, String)>) =
        cmd("XPENDING").arg("s").arg("g").query(&mut c).unwrap();
    assert_eq!(summary.3, vec![("alice".to_string(), "1".to_string()), ("bob".to_string(), "1".to_string())]);
    // FORCE makes an entry pending that was not: one delivery, plus one unless JUSTID.
    cmd("XCLAIM").arg("s").arg("g").arg("carol").arg(0).arg("1-0").arg("FORCE").query::<()>(&mut c).unwrap();
    let forced: Vec<(String, String, u64, u64)> =
        cmd("XPENDING").arg("s").arg("g").arg("1-0").arg("1-0").arg(1).query(&mut c).unwrap();
    assert_eq!((forced[0].1.as_str(), forced[0].3), ("carol", 2));
    cmd("XACK").arg("s").arg("g").arg("1-0").query::<()>(&mut c).unwrap();
    // DELCONSUMER answers how many entries the consumer still had.
    assert_eq!(cmd("XGROUP").arg("DELCONSUMER").arg("s").arg("g").arg("alice").query::<i64>(&mut c).unwrap(), 1);
    // A reader blocked in a group is told when its stream is deleted, or its group destroyed.
    let port = server.port;
    for (key, end) in [("s", "DEL"), ("s2", "DESTROY")] {
        if key == "s2" {
            cmd("XGROUP").arg("CREATE").arg("s2").arg("g").arg("$").arg("MKSTREAM").query::<()>(&mut c).unwrap();
        }
        let waiter = std::thread::spawn(move || {
            let mut r = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
            let e = cmd("XREADGROUP")
                .arg("GROUP")
                .arg("g")
                .arg("x")
                .arg("BLOCK")
                .arg(0)
                .arg("STREAMS")
                .arg(key)
                .arg(">")
                .query::<Value>(&mut r);
            err(e)
        });
        for _ in 0..200 {
            let clients: String = cmd("INFO").arg("clients").query(&mut c).unwrap();
            if clients.contains("blocked_clients:1") {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if end == "DEL" {
            cmd("DEL").arg(key).query::<()>(&mut c).unwrap();
            assert_eq!(waiter.join().unwrap(), "UNBLOCKED the stream key no longer exists");
        } else {
            cmd("XGROUP").arg("DESTROY").arg(key).arg("g").query::<()>(&mut c).unwrap();
            assert_eq!(
                waiter.join().unwrap(),
                "NOGROUP the consumer group this client was blocked on no longer exists"
            );
        }
    }
}

fn read_group_of(c: &mut redis::Connection, key: &str, consumer: &str, count: usize) -> Entries {
    let got: Vec<(String, Entries)> = cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g")
        .arg(consumer)
        .arg("COUNT")
        .arg(count)
        .arg("STREAMS")
        .arg(key)
        .arg(">")
        .query(c)
        .unwrap();
    got.into_iter().next().map(|(_, e)| e).unwrap_or_default()
}
