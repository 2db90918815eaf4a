//! The execution model, tried on a real server: a panicking command leaves nothing behind,
//! stalled writers and clients that never read their replies stall nobody else, every request
//! passes the one gate, and DBSIZE stays exact.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{roundtrip, Server};
use rand::{Rng, SeedableRng};
use redis::{cmd, Value};

/// Milliseconds since an arbitrary start (for "when did the last write finish").
fn now_ms(start: Instant) -> u64 {
    start.elapsed().as_millis() as u64
}

/// Sends one inline command on a fresh connection and reads its reply, within `limit`.
fn answered_within(server: &Server, req: &[u8], expect: &[u8], limit: Duration) -> bool {
    let started = Instant::now();
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", server.port)) else { return false };
    s.set_read_timeout(Some(limit)).unwrap();
    let reply = roundtrip(&mut s, req, expect.len());
    reply == expect && started.elapsed() < limit
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_panicking_command_answers_an_error_and_leaves_no_lock_buffer_or_snapshot() {
    let server = Server::start(&["--enable-debug-command", "yes", "--executor-threads", "2"]);
    let mut c = server.client();
    cmd("SET").arg("k").arg(0).query::<()>(&mut c).unwrap();
    // On several connections, so every executor thread takes a panic.
    for _ in 0..6 {
        let mut other = server.client();
        let err = cmd("DEBUG").arg("PANIC-COMMAND").arg("k").query::<Value>(&mut other).unwrap_err();
        assert!(err.to_string().contains("internal error running 'debug'"), "{err}");
        // The same connection goes on working.
        assert!(cmd("INCR").arg("k").query::<i64>(&mut other).unwrap() > 0);
    }
    // Inside EXEC: the whole transaction fails and nothing of it is committed.
    let mut t = server.client();
    cmd("MULTI").query::<()>(&mut t).unwrap();
    cmd("SET").arg("t").arg("written").query::<()>(&mut t).unwrap();
    cmd("DEBUG").arg("PANIC-COMMAND").arg("t").query::<()>(&mut t).unwrap();
    assert!(cmd("EXEC").query::<Value>(&mut t).is_err());
    assert_eq!(cmd("GET").arg("t").query::<Option<String>>(&mut c).unwrap(), None);
    assert_eq!(cmd("SET").arg("t").arg("later").query::<String>(&mut t).unwrap(), "OK", "the client left MULTI");

    // Optimistic increments (WATCH/MULTI/INCR/EXEC) from four clients, with panics between them:
    // a leaked lock would hang them, a leaked buffer would lose increments.
    let port = server.port;
    let workers: Vec<_> = (0..4)
        .map(|w| {
            std::thread::spawn(move || {
                let mut c =
                    redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
                let mut done = 0;
                while done < 100 {
                    if done % 25 == 0 && w % 2 == 0 {
                        let _ = cmd("DEBUG").arg("PANIC-COMMAND").arg("counter").query::<Value>(&mut c);
                    }
                    cmd("WATCH").arg("counter").query::<()>(&mut c).unwrap();
                    let v: Option<i64> = cmd("GET").arg("counter").query(&mut c).unwrap();
                    let result: Value = redis::pipe()
                        .atomic()
                        .cmd("SET")
                        .arg("counter")
                        .arg(v.unwrap_or(0) + 1)
                        .cmd("INCR")
                        .arg("k")
                        .query(&mut c)
                        .unwrap();
                    if result != Value::Nil {
                        done += 1;
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(cmd("GET").arg("counter").query::<i64>(&mut c).unwrap(), 400);
    assert_eq!(cmd("GET").arg("k").query::<i64>(&mut c).unwrap(), 6 + 400);
}

#[test]
fn debug_panic_command_is_refused_unless_enabled() {
    let server = Server::start(&[]);
    let mut c = server.client();
    for sub in ["PANIC-COMMAND", "SLEEP", "COMPACT"] {
        let err = cmd("DEBUG").arg(sub).arg("k").query::<Value>(&mut c).unwrap_err();
        assert!(err.to_string().contains("DEBUG command not allowed"), "{err}");
    }
    let err = cmd("CONFIG").arg("SET").arg("enable-debug-command").arg("yes").query::<Value>(&mut c).unwrap_err();
    assert!(err.to_string().contains("can't set immutable config"), "{err}");
}

#[test]
fn a_pipelined_set_from_a_resp2_subscriber_gets_the_subscribed_mode_error() {
    let server = Server::start(&[]);
    let mut s = server.raw();
    let first = roundtrip(&mut s, b"SUBSCRIBE ch\r\n", b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n".len());
    assert!(first.starts_with(b"*3\r\n$9\r\nsubscribe"), "{}", String::from_utf8_lossy(&first));
    let expected = b"-ERR Can't execute 'set': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n";
    let reply = roundtrip(&mut s, b"SET k v\r\nSET k2 v\r\n", 2 * expected.len());
    assert_eq!(String::from_utf8_lossy(&reply), String::from_utf8_lossy(&[&expected[..], &expected[..]].concat()));
    let mut c = server.client();
    assert_eq!(cmd("EXISTS").arg("k").arg("k2").query::<i64>(&mut c).unwrap(), 0, "nothing was written");
}

#[test]
fn stalled_writers_stall_neither_readers_nor_new_connections() {
    let server = Server::start(&[
        "--write-buffer-size",
        "4096",
        "--level0-slowdown-writes-trigger",
        "1",
        "--level0-stop-writes-trigger",
        "2",
        "--compaction-rate-limit",
        "1024",
        "--executor-threads",
        "2",
    ]);
    let mut c = server.client();
    cmd("SET").arg("cached").arg("here").query::<()>(&mut c).unwrap();
    let start = Instant::now();
    let last_write = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // More writers than executor threads; with compaction throttled to 1 KiB/s they soon stop
    // in a write stall (two L0 tables stop writes). Half send plain SETs (queued from their
    // connections' tasks, held in the engine's commit thread), half BITFIELD SETs of 2 KiB
    // strings (run one by one on executor threads, one each, which they block; a write that
    // may join a write group runs on its connection's task or queues behind the other in a
    // combined group on one thread).
    for w in 0..4 {
        let (port, last_write, stop) = (server.port, Arc::clone(&last_write), Arc::clone(&stop));
        std::thread::spawn(move || {
            let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else { return };
            let Ok(mut c) = client.get_connection() else { return };
            let value = vec![b'x'; 2048];
            for i in 0.. {
                let mut set = if w % 2 == 0 { cmd("SET") } else { cmd("BITFIELD") };
                set.arg(format!("w{w}-{i}"));
                if w % 2 == 0 {
                    set.arg(&value);
                } else {
                    set.arg("SET").arg("u1").arg(value.len() * 8 - 1).arg(1);
                }
                if stop.load(Ordering::Relaxed) || set.query::<()>(&mut c).is_err() {
                    return;
                }
                last_write.store(now_ms(start), Ordering::Relaxed);
            }
        });
    }
    // Wait until no write has finished for a while: the writers are held in the stall.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let idle = now_ms(start).saturating_sub(last_write.load(Ordering::Relaxed));
        if last_write.load(Ordering::Relaxed) > 0 && idle >= 1000 {
            break;
        }
        assert!(Instant::now() < deadline, "the writers never stalled");
    }
    // Liveness, not speed: generous bounds.
    let limit = Duration::from_secs(2);
    assert!(answered_within(&server, b"PING\r\n", b"+PONG\r\n", limit), "a new connection's PING");
    assert!(answered_within(&server, b"GET cached\r\n", b"$4\r\nhere\r\n", limit), "a GET of a cached key");
    assert_eq!(cmd("GET").arg("cached").query::<String>(&mut c).unwrap(), "here");
    let stalled = now_ms(start).saturating_sub(last_write.load(Ordering::Relaxed));
    assert!(stalled >= 1000, "the writers were still stalled while the reads were answered");
    let info: String = cmd("INFO").arg("stats").query(&mut c).unwrap();
    let helpers: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("executor_helpers_started:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(helpers >= 1, "the blocked executors got helpers: {info}");
    stop.store(true, Ordering::Relaxed);
}

#[test]
fn clients_that_never_read_their_replies_stall_nobody_and_hold_little_memory() {
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("SET").arg("big").arg(vec![b'v'; 1 << 20]).query::<()>(&mut c).unwrap();
    cmd("SET").arg("small").arg("s").query::<()>(&mut c).unwrap();
    let before = rss_kib(server.child.id());
    // Four clients each ask for 2 GB of replies and never read them.
    let mut floods = Vec::new();
    for _ in 0..4 {
        let mut s = server.raw();
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let req = b"GET big\r\n".repeat(2000);
        let _ = s.write_all(&req);
        floods.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    let limit = Duration::from_secs(2);
    assert!(answered_within(&server, b"PING\r\n", b"+PONG\r\n", limit), "a new connection's PING");
    assert!(answered_within(&server, b"GET small\r\n", b"$1\r\ns\r\n", limit), "another client's GET");
    assert_eq!(cmd("GET").arg("small").query::<String>(&mut c).unwrap(), "s");
    let after = rss_kib(server.child.id());
    assert!(after < before + 256 * 1024, "RSS grew from {before} KiB to {after} KiB");
    // A flooding client that starts reading gets every reply, in order.
    let mut s = floods.pop().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let one = (1 << 20) + b"$1048576\r\n\r\n".len();
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    while got < 2000 * one {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    assert_eq!(got, 2000 * one);
}

/// What the model expects DBSIZE to be in each logical database.
fn model_sizes(model: &HashMap<(u32, String), ()>, dbs: u32) -> Vec<i64> {
    (0..dbs).map(|db| model.keys().filter(|(d, _)| *d == db).count() as i64).collect()
}

fn server_sizes(c: &mut redis::Connection, dbs: u32) -> Vec<i64> {
    let sizes = (0..dbs)
        .map(|db| {
            cmd("SELECT").arg(db).query::<()>(c).unwrap();
            cmd("DBSIZE").query::<i64>(c).unwrap()
        })
        .collect();
    cmd("SELECT").arg(0).query::<()>(c).unwrap();
    sizes
}

#[test]
fn dbsize_is_exact_after_random_keyspace_changes_and_restarts() {
    let ops: usize = std::env::var("SHALE_DBSIZE_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(1500);
    let mut server = Server::start(&[]);
    let mut c = server.client();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let dbs = 4u32;
    let mut model: HashMap<(u32, String), ()> = HashMap::new();
    let mut db = 0u32;
    for i in 0..ops {
        let key = format!("k{}", rng.random_range(0..40));
        let other = format!("k{}", rng.random_range(0..40));
        match rng.random_range(0..100) {
            0..=29 => {
                cmd("SET").arg(&key).arg(i).query::<()>(&mut c).unwrap();
                model.insert((db, key), ());
            }
            30..=39 => {
                // Collections count once, whatever their size.
                // An existing key of another type answers WRONGTYPE and stays as it was.
                let r = match rng.random_range(0..3) {
                    0 => cmd("HSET").arg(&key).arg("f").arg(i).query::<Value>(&mut c),
                    1 => cmd("SADD").arg(&key).arg(i).query::<Value>(&mut c),
                    _ => cmd("RPUSH").arg(&key).arg(i).query::<Value>(&mut c),
                };
                if r.is_ok() {
                    model.insert((db, key), ());
                }
            }
            40..=54 => {
                cmd("DEL").arg(&key).arg(&other).query::<i64>(&mut c).unwrap();
                model.remove(&(db, key));
                model.remove(&(db, other));
            }
            55..=64 => {
                let n: i64 = cmd("EXPIRE").arg(&key).arg(10_000).query(&mut c).unwrap();
                assert_eq!(n == 1, model.contains_key(&(db, key)));
            }
            65..=72 => {
                let ok = cmd("RENAME").arg(&key).arg(&other).query::<()>(&mut c).is_ok();
                assert_eq!(ok, model.contains_key(&(db, key.clone())));
                if ok {
                    model.remove(&(db, key));
                    model.insert((db, other), ());
                }
            }
            73..=80 => {
                let to = (db + 1) % dbs;
                let moved: i64 = cmd("MOVE").arg(&key).arg(to).query(&mut c).unwrap();
                let expect = model.contains_key(&(db, key.clone())) && !model.contains_key(&(to, key.clone()));
                assert_eq!(moved == 1, expect, "MOVE {key} {to}");
                if expect {
                    model.remove(&(db, key.clone()));
                    model.insert((to, key), ());
                }
            }
            81..=85 => {
                // A pipeline of plain SETs (committed as one batch) and an EXEC.
                let mut p = redis::pipe();
                for j in 0..5 {
                    p.cmd("SET").arg(format!("p{}", (i + j) % 30)).arg(j).ignore();
                    model.insert((db, format!("p{}", (i + j) % 30)), ());
                }
                p.query::<()>(&mut c).unwrap();
                let mut t = redis::pipe();
                t.atomic().cmd("SET").arg(&key).arg(1).ignore().cmd("DEL").arg(&other).ignore();
                t.query::<()>(&mut c).unwrap();
                model.insert((db, key), ());
                model.remove(&(db, other));
            }
            86..=88 => {
                cmd("FLUSHDB").query::<()>(&mut c).unwrap();
                model.retain(|(d, _), _| *d != db);
            }
            89..=92 => {
                let (a, b) = (rng.random_range(0..dbs), rng.random_range(0..dbs));
                cmd("SWAPDB").arg(a).arg(b).query::<()>(&mut c).unwrap();
                model = model
                    .into_iter()
                    .map(|((d, k), v)| {
                        (
                            (
                                if d == a {
                                    b
                                } else if d == b {
                                    a
                                } else {
                                    d
                                },
                                k,
                            ),
                            v,
                        )
                    })
                    .collect();
            }
            _ => {
                db = rng.random_range(0..dbs);
                cmd("SELECT").arg(db).query::<()>(&mut c).unwrap();
            }
        }
        if i % 100 == 0 {
            let selected = db;
            assert_eq!(server_sizes(&mut c, dbs), model_sizes(&model, dbs), "after op {i}");
            cmd("SELECT").arg(selected).query::<()>(&mut c).unwrap();
        }
    }
    let expected = model_sizes(&model, dbs);
    assert_eq!(server_sizes(&mut c, dbs), expected);
    let info: String = cmd("INFO").arg("keyspace").query(&mut c).unwrap();
    if expected[0] > 0 {
        assert!(info.contains(&format!("db0:keys={},", expected[0])), "{info}");
    }
    drop(c);
    // A clean restart reloads the stored counts; a crash makes the next start recount.
    server = server.restart(&[]);
    let mut c = server.client();
    assert_eq!(server_sizes(&mut c, dbs), expected, "after a clean restart");
    cmd("SET").arg("after-restart").arg(1).query::<()>(&mut c).unwrap();
    drop(c);
    let _ = server.child.kill();
    let _ = server.child.wait();
    let dir = std::mem::replace(&mut server.dir, tempfile::tempdir().unwrap());
    let server = Server::start_in(dir, None, &[]);
    let mut c = server.client();
    let mut expected = expected;
    expected[0] += 1;
    assert_eq!(server_sizes(&mut c, dbs), expected, "after kill -9 and a recount");
}

#[test]
fn expired_keys_leave_dbsize_once_reclaimed() {
    let server = Server::start(&[]);
    let mut c = server.client();
    for i in 0..50 {
        cmd("SET").arg(format!("e{i}")).arg(1).arg("PX").arg(50).query::<()>(&mut c).unwrap();
    }
    cmd("SET").arg("stays").arg(1).query::<()>(&mut c).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while cmd("DBSIZE").query::<i64>(&mut c).unwrap() != 1 {
        assert!(Instant::now() < deadline, "the expiry cycle never reclaimed the keys");
        std::thread::sleep(Duration::from_millis(50));
    }
    let info: String = cmd("INFO").arg("keyspace").query(&mut c).unwrap();
    assert!(info.contains("db0:keys=1,expires=0,avg_ttl=0"), "{info}");
}

/// Pipelined SETs run on the connections' own threads and release their key stripes once
/// queued; DELs and INCRs of the same keys from other clients run on executor threads. However
/// they interleave, DBSIZE ends equal to the number of keys that exist.
#[test]
fn dbsize_stays_exact_when_pipelined_sets_race_deletes_of_the_same_keys() {
    let rounds: usize = std::env::var("SHALE_DBSIZE_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let server = Server::start(&[]);
    let keys = 64;
    let workers: Vec<_> = (0..4u64)
        .map(|w| {
            let mut c = server.client();
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(w);
                for _ in 0..rounds {
                    let mut pipe = redis::pipe();
                    for _ in 0..16 {
                        let key = format!("race{}", rng.random_range(0..keys));
                        match (w % 2, rng.random_range(0..4)) {
                            (0, _) | (1, 0) => pipe.cmd("SET").arg(&key).arg(1).ignore(),
                            (_, 1) => pipe.cmd("INCR").arg(&key).ignore(),
                            _ => pipe.cmd("DEL").arg(&key).ignore(),
                        };
                    }
                    pipe.query::<()>(&mut c).unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let mut c = server.client();
    let existing: Vec<String> = cmd("KEYS").arg("race*").query(&mut c).unwrap();
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), existing.len() as i64);
    let info: String = cmd("INFO").arg("keyspace").query(&mut c).unwrap();
    let expected = format!("db0:keys={},", existing.len());
    assert!(existing.is_empty() || info.contains(&expected), "{info}");
}
