//! Pipelined writes run as write groups (one lock round, one buffer, one commit per run of
//! writes): tried on a real server, they must behave exactly as the same commands sent one by
//! one — every reply in order, errors confined to their command, increments from many clients
//! summing exactly, blocked clients woken, and nothing visible before it is committed.

mod common;

use std::thread;
use std::time::Duration;

use common::Server;
use redis::{cmd, Value};

#[test]
fn concurrent_pipelines_of_read_modify_writes_sum_exactly() {
    let server = Server::start(&[]);
    let clients: Vec<_> = (0..6)
        .map(|t| {
            let mut c = server.client();
            thread::spawn(move || {
                for round in 0..50 {
                    let mut p = redis::pipe();
                    for i in 0..40 {
                        p.cmd("INCR").arg("counter");
                        p.cmd("HINCRBY").arg("h").arg(format!("f{}", i % 4)).arg(1);
                        p.cmd("RPUSH").arg("list").arg(format!("{t}:{round}:{i}"));
                        p.cmd("ZINCRBY").arg("z").arg(1).arg("m");
                    }
                    let replies: Vec<Value> = p.query(&mut c).unwrap();
                    assert_eq!(replies.len(), 160);
                }
            })
        })
        .collect();
    for t in clients {
        t.join().unwrap();
    }
    let mut c = server.client();
    assert_eq!(cmd("GET").arg("counter").query::<i64>(&mut c).unwrap(), 6 * 50 * 40);
    let h: Vec<i64> = cmd("HMGET").arg("h").arg(&["f0", "f1", "f2", "f3"]).query(&mut c).unwrap();
    assert_eq!(h, vec![6 * 50 * 10; 4]);
    assert_eq!(cmd("LLEN").arg("list").query::<i64>(&mut c).unwrap(), 6 * 50 * 40);
    assert_eq!(cmd("ZSCORE").arg("z").arg("m").query::<f64>(&mut c).unwrap(), (6 * 50 * 40) as f64);
    // Each client's pushes kept their order.
    let all: Vec<String> = cmd("LRANGE").arg("list").arg(0).arg(-1).query(&mut c).unwrap();
    for t in 0..6 {
        let mine: Vec<&String> = all.iter().filter(|e| e.starts_with(&format!("{t}:"))).collect();
        let expected: Vec<String> = (0..50).flat_map(|r| (0..40).map(move |i| format!("{t}:{r}:{i}"))).collect();
        assert_eq!(mine.iter().map(|s| s.as_str()).collect::<Vec<_>>(), expected);
    }
}

#[test]
fn replies_and_errors_stay_with_their_commands() {
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("SET").arg("str").arg("x").query::<()>(&mut c).unwrap();
    // Raw RESP: the whole pipeline in one write, so the server runs it as one group.
    let mut raw = server.raw();
    let req = b"LPUSH l2 a\r\nLPUSH str b\r\nINCR str\r\nRPUSH l2 c\r\nLPOP l2\r\nSADD s2 m\r\nSPOP s2\r\nSPOP s2\r\nLRANGE l2 0 -1\r\n";
    let expect = ":1\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n\
                  -ERR value is not an integer or out of range\r\n:2\r\n$1\r\na\r\n:1\r\n$1\r\nm\r\n$-1\r\n*1\r\n$1\r\nc\r\n";
    let got = common::roundtrip(&mut raw, req, expect.len());
    assert_eq!(String::from_utf8_lossy(&got), expect);
}

#[test]
fn a_pipelined_push_wakes_a_blocked_client() {
    let server = Server::start(&[]);
    let mut waiter = server.client();
    let blocked = thread::spawn(move || cmd("BLPOP").arg("q").arg(5).query::<(String, String)>(&mut waiter).unwrap());
    thread::sleep(Duration::from_millis(200));
    let mut c = server.client();
    let _: Vec<Value> =
        redis::pipe().cmd("RPUSH").arg("q").arg("one").cmd("RPUSH").arg("q").arg("two").query(&mut c).unwrap();
    assert_eq!(blocked.join().unwrap(), ("q".to_string(), "one".to_string()));
    assert_eq!(cmd("LRANGE").arg("q").arg(0).arg(-1).query::<Vec<String>>(&mut c).unwrap(), ["two"]);
}

/// A field of `INFO stats`.
fn stat(c: &mut redis::Connection, name: &str) -> u64 {
    let info: String = cmd("INFO").arg("stats").query(c).unwrap();
    let prefix = format!("{name}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name} in INFO"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn single_writes_of_many_clients_combined_into_groups_stay_exact() {
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("SET").arg("str").arg("x").query::<()>(&mut c).unwrap();
    let (clients, each) = (8, 400);
    let threads: Vec<_> = (0..clients)
        .map(|t| {
            let mut c = server.client();
            thread::spawn(move || {
                let mut counters = Vec::with_capacity(each);
                for i in 0..each {
                    // One write per round trip: what the combiner queues.
                    counters.push(cmd("INCR").arg("counter").query::<i64>(&mut c).unwrap());
                    cmd("RPUSH").arg("list").arg(format!("{t}:{i}")).query::<i64>(&mut c).unwrap();
                    let id: String = cmd("XADD").arg("stream").arg("*").arg("c").arg(t).query(&mut c).unwrap();
                    assert!(id.contains('-'));
                    // An error stays with its command, whatever it was combined with.
                    let err = cmd("LPUSH").arg("str").arg("v").query::<i64>(&mut c).unwrap_err();
                    assert_eq!(err.code(), Some("WRONGTYPE"));
                }
                counters
            })
        })
        .collect();
    let mut seen: Vec<i64> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    seen.sort_unstable();
    let total = (clients * each) as i64;
    // Every INCR saw a distinct value: no increment lost or doubled across combined groups.
    assert_eq!(seen, (1..=total).collect::<Vec<_>>());
    assert_eq!(cmd("GET").arg("counter").query::<i64>(&mut c).unwrap(), total);
    assert_eq!(cmd("LLEN").arg("list").query::<i64>(&mut c).unwrap(), total);
    assert_eq!(cmd("XLEN").arg("stream").query::<i64>(&mut c).unwrap(), total);
    assert_eq!(cmd("GET").arg("str").query::<String>(&mut c).unwrap(), "x");
    // Each client's pushes kept their order.
    let all: Vec<String> = cmd("LRANGE").arg("list").arg(0).arg(-1).query(&mut c).unwrap();
    for t in 0..clients {
        let mine: Vec<String> = all.iter().filter(|e| e.starts_with(&format!("{t}:"))).cloned().collect();
        assert_eq!(mine, (0..each).map(|i| format!("{t}:{i}")).collect::<Vec<_>>());
    }
    assert!(stat(&mut c, "combined_write_groups") > 0, "eight clients writing one key at once were combined");
    assert!(stat(&mut c, "combined_writes") >= 2 * stat(&mut c, "combined_write_groups"));
    // Combined or not, every command counted once.
    let stats: String = cmd("INFO").arg("commandstats").query(&mut c).unwrap();
    assert!(stats.contains(&format!("cmdstat_incr:calls={total},")), "{stats}");
    assert!(stats.contains(&format!("cmdstat_lpush:calls={total},")), "{stats}");
}

/// PFADD, PFCOUNT, GEOADD and SETBIT join write groups: a pipeline of them answers and stores
/// exactly what the same commands sent one by one do (HyperLogLog bytes, sparse and then dense,
/// with the cardinality PFCOUNT caches in them; scores; a bitmap that outgrows an inline string
/// into segments partway through a pipeline).
#[test]
fn pipelined_pfadd_and_geoadd_answer_and_store_as_one_by_one() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let n = 3000;
    let element = |i: usize| format!("e{}", (i * 7919) % 1500);
    let place = |i: usize| (((i * 37) % 360) as f64 - 180.0, ((i * 11) % 170) as f64 - 85.0);
    // Offsets that grow past 4 KiB (an inline string's limit) less than half way in, and
    // others anywhere below.
    let bit = |i: usize| if i.is_multiple_of(2) { i * 25 } else { (i * 7919) % (i * 25 + 1) };
    let mut piped = Vec::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(64) {
        let mut p = redis::pipe();
        for &i in chunk {
            p.cmd("PFADD").arg("hll:piped").arg(element(i));
            let (lon, lat) = place(i);
            p.cmd("GEOADD").arg("geo:piped").arg(lon).arg(lat).arg(format!("m{}", i % 500));
            p.cmd("SETBIT").arg("bits:piped").arg(bit(i)).arg(i % 3 % 2);
            if (i + 1).is_multiple_of(10) {
                p.cmd("PFCOUNT").arg("hll:piped");
            }
        }
        piped.extend(p.query::<Vec<i64>>(&mut c).unwrap());
    }
    let mut alone = Vec::new();
    for i in 0..n {
        alone.push(cmd("PFADD").arg("hll:alone").arg(element(i)).query::<i64>(&mut c).unwrap());
        let (lon, lat) = place(i);
        let mut add = cmd("GEOADD");
        add.arg("geo:alone").arg(lon).arg(lat).arg(format!("m{}", i % 500));
        alone.push(add.query::<i64>(&mut c).unwrap());
        alone.push(cmd("SETBIT").arg("bits:alone").arg(bit(i)).arg(i % 3 % 2).query::<i64>(&mut c).unwrap());
        if (i + 1).is_multiple_of(10) {
            alone.push(cmd("PFCOUNT").arg("hll:alone").query::<i64>(&mut c).unwrap());
        }
    }
    assert_eq!(piped, alone);
    let bytes = |c: &mut redis::Connection, k: &str| cmd("GET").arg(k).query::<Vec<u8>>(c).unwrap();
    assert_eq!(bytes(&mut c, "hll:piped"), bytes(&mut c, "hll:alone"));
    let bitmap = bytes(&mut c, "bits:piped");
    assert!(bitmap.len() > 8192 && bitmap.iter().any(|&b| b != 0), "{} bytes", bitmap.len());
    assert_eq!(bitmap, bytes(&mut c, "bits:alone"));
    let count = |c: &mut redis::Connection, k: &str| cmd("PFCOUNT").arg(k).query::<i64>(c).unwrap();
    assert_eq!(count(&mut c, "hll:piped"), count(&mut c, "hll:alone"));
    let scores = |c: &mut redis::Connection, k: &str| {
        cmd("ZRANGE").arg(k).arg(0).arg(-1).arg("WITHSCORES").query::<Vec<String>>(c).unwrap()
    };
    let geo = scores(&mut c, "geo:piped");
    assert_eq!(geo.len(), 2 * 500);
    assert_eq!(geo, scores(&mut c, "geo:alone"));
}
