//! MULTI / EXEC / DISCARD / WATCH against a real `shale-server`: Redis's replies and errors,
//! optimistic locking under contention, isolation from concurrent readers, and what breaks a
//! WATCH (writes, DEL, expiry, FLUSHDB, SWAPDB).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{roundtrip, Server};
use redis::{cmd, Value};

#[test]
fn queueing_errors_and_exec_replies_match_redis() {
    let server = Server::start(&[]);
    let mut s = server.raw();
    let script: &[(&[u8], &str)] = &[
        (b"EXEC\r\n", "-ERR EXEC without MULTI\r\n"),
        (b"DISCARD\r\n", "-ERR DISCARD without MULTI\r\n"),
        (b"MULTI\r\n", "+OK\r\n"),
        (b"MULTI\r\n", "-ERR MULTI calls can not be nested\r\n"),
        (b"SET k 1\r\n", "+QUEUED\r\n"),
        (b"INCR k\r\n", "+QUEUED\r\n"),
        (b"LPUSH k x\r\n", "+QUEUED\r\n"),
        (b"GET k\r\n", "+QUEUED\r\n"),
        (
            b"EXEC\r\n",
            "*4\r\n+OK\r\n:2\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n$1\r\n2\r\n",
        ),
        (b"MULTI\r\n", "+OK\r\n"),
        (b"SET k 5\r\n", "+QUEUED\r\n"),
        (b"NOSUCHCOMMAND\r\n", "-ERR unknown command 'NOSUCHCOMMAND', with args beginning with: \r\n"),
        (b"GET\r\n", "-ERR wrong number of arguments for 'get' command\r\n"),
        (b"EXEC\r\n", "-EXECABORT Transaction discarded because of previous errors.\r\n"),
        (b"GET k\r\n", "$1\r\n2\r\n"),
        (b"MULTI\r\n", "+OK\r\n"),
        (b"WATCH k\r\n", "-ERR WATCH inside MULTI is not allowed\r\n"),
        (b"SET k 9\r\n", "+QUEUED\r\n"),
        (b"DISCARD\r\n", "+OK\r\n"),
        (b"GET k\r\n", "$1\r\n2\r\n"),
        (b"MULTI\r\n", "+OK\r\n"),
        (b"BLPOP empty 0\r\n", "+QUEUED\r\n"),
        (b"EXEC\r\n", "*1\r\n*-1\r\n"),
    ];
    for (req, want) in script {
        let got = roundtrip(&mut s, req, want.len());
        assert_eq!(String::from_utf8_lossy(&got), *want, "{}", String::from_utf8_lossy(req));
    }
}

#[test]
fn optimistic_increments_under_contention_sum_exactly() {
    let server = Server::start(&[]);
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let mut c = server.client();
            thread::spawn(move || {
                let mut retries = 0;
                for _ in 0..100 {
                    loop {
                        cmd("WATCH").arg("counter").query::<()>(&mut c).unwrap();
                        let n: i64 = cmd("GET").arg("counter").query::<Option<i64>>(&mut c).unwrap().unwrap_or(0);
                        let result: Value =
                            redis::pipe().atomic().cmd("SET").arg("counter").arg(n + 1).query(&mut c).unwrap();
                        if result != Value::Nil {
                            break;
                        }
                        retries += 1;
                    }
                }
                retries
            })
        })
        .collect();
    let retries: i32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let mut c = server.client();
    assert_eq!(
        cmd("GET").arg("counter").query::<i64>(&mut c).unwrap(),
        600,
        "({retries} EXECs were refused and retried)"
    );
}

#[test]
fn readers_never_see_half_a_transaction() {
    let server = Server::start(&[]);
    let mut writer = server.client();
    cmd("MSET").arg(&["a", "0", "b", "0"]).query::<()>(&mut writer).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let mut c = server.client();
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                let mut reads = 0;
                while !stop.load(Ordering::Relaxed) {
                    let (a, b): (i64, i64) = cmd("MGET").arg(&["a", "b"]).query(&mut c).unwrap();
                    assert_eq!(a, b, "a transaction was seen half done");
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for _ in 0..300 {
        redis::pipe().atomic().cmd("INCR").arg("a").cmd("INCR").arg("b").query::<()>(&mut writer).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    assert_eq!(cmd("GET").arg("a").query::<i64>(&mut writer).unwrap(), 300);
}

/// Something another client does to the watched key.
type Change = Box<dyn Fn(&mut redis::Connection)>;

#[test]
fn watch_is_broken_by_every_kind_of_change() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let mut other = server.client();
    let attempt =
        |c: &mut redis::Connection, other: &mut redis::Connection, change: &dyn Fn(&mut redis::Connection)| {
            cmd("SET").arg("w").arg("1").arg("PX").arg(100_000).query::<()>(c).unwrap();
            cmd("WATCH").arg("w").query::<()>(c).unwrap();
            change(other);
            redis::pipe().atomic().cmd("SET").arg("done").arg(1).query::<Value>(c).unwrap()
        };
    let untouched = attempt(&mut c, &mut other, &|_| {});
    assert_ne!(untouched, Value::Nil, "an untouched watch lets EXEC run");
    let changes: Vec<(&str, Change)> = vec![
        ("SET", Box::new(|o| cmd("SET").arg("w").arg("2").query::<()>(o).unwrap())),
        ("DEL", Box::new(|o| cmd("DEL").arg("w").query::<()>(o).unwrap())),
        ("EXPIRE", Box::new(|o| cmd("PEXPIRE").arg("w").arg(5).query::<()>(o).unwrap())),
        ("FLUSHDB", Box::new(|o| cmd("FLUSHDB").query::<()>(o).unwrap())),
        ("SWAPDB", Box::new(|o| cmd("SWAPDB").arg(0).arg(1).query::<()>(o).unwrap())),
    ];
    for (what, change) in changes {
        let r = attempt(&mut c, &mut other, &*change);
        assert_eq!(r, Value::Nil, "{what} of a watched key makes EXEC answer nil");
    }
    // A watched key that expires on its own breaks the transaction too.
    cmd("SET").arg("w").arg("1").arg("PX").arg(5).query::<()>(&mut c).unwrap();
    cmd("WATCH").arg("w").query::<()>(&mut c).unwrap();
    thread::sleep(Duration::from_millis(20));
    let r: Value = redis::pipe().atomic().cmd("SET").arg("done").arg(1).query(&mut c).unwrap();
    assert_eq!(r, Value::Nil, "expiry of a watched key makes EXEC answer nil");
    // As in Redis, flushing leaves the watch of a key that did not exist alone.
    for flush in ["FLUSHDB", "FLUSHALL"] {
        cmd("DEL").arg("absent").query::<()>(&mut c).unwrap();
        cmd("WATCH").arg("absent").query::<()>(&mut c).unwrap();
        cmd(flush).query::<()>(&mut other).unwrap();
        let r: Value = redis::pipe().atomic().cmd("PING").query(&mut c).unwrap();
        assert_ne!(r, Value::Nil, "{flush} does not touch a watched key that did not exist");
    }
}

#[test]
fn no_multi_commands_are_refused_inside_multi_and_abort_the_transaction() {
    let server = Server::start(&[]);
    let mut c = server.client();
    for command in ["SHUTDOWN", "SAVE"] {
        cmd("MULTI").query::<()>(&mut c).unwrap();
        cmd("SET").arg("k").arg("v").query::<()>(&mut c).unwrap();
        let e = cmd(command).query::<Value>(&mut c).unwrap_err();
        assert!(e.to_string().contains("Command not allowed inside a transaction"), "{e}");
        let e = cmd("EXEC").query::<Value>(&mut c).unwrap_err();
        assert_eq!(e.code(), Some("EXECABORT"), "{e}");
    }
    assert_eq!(cmd("EXISTS").arg("k").query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(cmd("PING").query::<String>(&mut c).unwrap(), "PONG", "the server is still up");
}
