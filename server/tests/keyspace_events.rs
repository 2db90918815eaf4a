//! Keyspace notifications against a real `shale-server`, compared message by message with a
//! real redis-server (Debian's) running the same commands: every class, Redis's event names
//! per command, `new` and `keymiss`, events from EXEC and from serving a blocked client, the
//! `expired` events of the expiry cycle, and `CONFIG GET` of the flags.
//!
//! Needs `redis-server`; without it the test says so and passes, unless
//! `SHALE_REQUIRE_REDIS_TOOLS=1` (as in CI).

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{start_redis, Server};
use redis::cmd;

/// Every command (as words) of the comparison, one family after another.
const SCRIPT: &[&str] = &[
    // strings
    "SET s1 v",
    "SET s1 v2",
    "SET s2 v EX 100",
    "SET s2 w NX",
    "SETNX s1 x",
    "SETNX s3 x",
    "SETEX s4 100 v",
    "PSETEX s5 100000 v",
    "GETSET s1 z",
    "MSET m1 a m2 b",
    "MSETNX m1 a m3 c",
    "MSETNX m4 a m5 b",
    "APPEND s1 tail",
    "INCR n1",
    "INCRBY n1 5",
    "DECR n1",
    "DECRBY n1 2",
    "INCRBYFLOAT f1 1.5",
    "SETRANGE s1 2 XX",
    "GETDEL s3",
    "GETEX s2 PERSIST",
    "GETEX s4 EX 200",
    "GETEX s1",
    // generic
    "DEL s1 nosuch m1 m1",
    "UNLINK m2",
    "EXPIRE s2 100",
    "EXPIRE s2 50 GT",
    "EXPIRE nosuch 10",
    "PEXPIRE s4 -1",
    "PERSIST s5",
    "PERSIST s5",
    "RENAME m4 r1",
    "RENAMENX r1 m5",
    "RENAMENX r1 r2",
    "RENAME r2 r2",
    "COPY r2 c1",
    "MOVE c1 1",
    // lists
    "RPUSH l1 a b c",
    "LPUSH l1 z",
    "LPUSHX nolist a",
    "LINSERT l1 BEFORE a q",
    "LINSERT l1 BEFORE nope q",
    "LSET l1 0 y",
    "LREM l1 1 q",
    "LREM l1 1 nope",
    "LTRIM l1 0 1",
    "LPOP l1",
    "RPOP l1",
    "RPOP l1",
    "RPUSH l2 1 2",
    "LMOVE l2 l3 LEFT RIGHT",
    "RPOPLPUSH l2 l3",
    "LMPOP 1 l3 LEFT COUNT 5",
    "RPUSH l4 x",
    "BLPOP l4 0",
    "RPUSH l5 a b",
    "LTRIM l5 5 10",
    // sets
    "SADD st a b",
    "SADD st a",
    "SREM st zz",
    "SREM st a",
    "SMOVE st st2 b",
    "SADD st3 x y",
    "SPOP st3",
    "SPOP st3 5",
    "SADD st4 1 2 3",
    "SADD st5 2 3",
    "SINTERSTORE d1 st4 st5",
    "SUNIONSTORE d1 st4 nosuch",
    "SDIFFSTORE d1 st5 st4",
    "SDIFFSTORE d2 st5 st4",
    // hashes
    "HSET h f 1 g 2",
    "HSET h f 1",
    "HSETNX h f 1",
    "HSETNX h z 1",
    "HINCRBY h f 2",
    "HINCRBYFLOAT h f 1.5",
    "HDEL h nope",
    "HDEL h f g z",
    "HMSET h2 a 1",
    // sorted sets
    "ZADD z 1 a 2 b",
    "ZADD z 1 a",
    "ZADD z INCR 5 a",
    "ZINCRBY z 1 b",
    "ZREM z nope",
    "ZREM z a",
    "ZADD z2 1 x 2 y 3 u 4 w",
    "ZPOPMIN z2",
    "ZPOPMAX z2 2",
    "ZREMRANGEBYSCORE z2 0 10",
    "ZADD z3 1 a 2 b 3 c",
    "ZREMRANGEBYRANK z3 0 0",
    "ZREMRANGEBYLEX z3 [b [b",
    "ZUNIONSTORE zd 2 z z3",
    "ZINTERSTORE zd 2 z nosuch",
    "ZRANGESTORE zr z3 0 -1",
    "ZDIFFSTORE zd2 1 z",
    "ZMPOP 1 z MIN COUNT 10",
    "BZPOPMIN zr 0",
    // reads that miss (keymiss)
    "GET nosuch1",
    "EXISTS nosuch2 s5",
    "TYPE nosuch3",
    "MGET nosuch4 s5",
    "LLEN nosuch5",
    "HGET nosuch6 f",
    "SCARD nosuch7",
    "ZSCORE nosuch8 a",
    "TTL nosuch9",
    // a transaction: its events in order, once it is committed
    "MULTI",
    "SET t1 a",
    "LPUSH t2 a",
    "INCR t3",
    "DEL t1",
    "EXEC",
    "FLUSHDB",
];

/// Runs `SCRIPT` on the server at `port` with `flags`, then a BLPOP served by a push from
/// another client; returns every message a `PSUBSCRIBE *` client received, in order.
fn events(port: u16, flags: &str) -> Vec<String> {
    let url = format!("redis://127.0.0.1:{port}/");
    let client = redis::Client::open(url).unwrap();
    let mut c = client.get_connection().unwrap();
    cmd("FLUSHALL").query::<()>(&mut c).unwrap();
    cmd("CONFIG").arg("SET").arg("notify-keyspace-events").arg(flags).query::<()>(&mut c).unwrap();
    let mut sub = client.get_connection().unwrap();
    let mut ps = sub.as_pubsub();
    ps.psubscribe("*").unwrap();
    for line in SCRIPT {
        let words: Vec<&str> = line.split(' ').collect();
        let _ = cmd(words[0]).arg(&words[1..]).query::<redis::Value>(&mut c);
    }
    // A client blocked on an empty list, served by another client's push.
    let blocked = thread::spawn({
        let client = client.clone();
        move || {
            let mut b = client.get_connection().unwrap();
            cmd("BLPOP").arg("bl").arg(5).query::<Vec<String>>(&mut b).unwrap()
        }
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while cmd("CLIENT").arg("LIST").query::<String>(&mut c).unwrap().matches("cmd=blpop").count() == 0 {
        assert!(Instant::now() < deadline, "the BLPOP client never blocked");
        thread::sleep(Duration::from_millis(10));
    }
    cmd("RPUSH").arg("bl").arg("x").query::<i64>(&mut c).unwrap();
    assert_eq!(blocked.join().unwrap(), ["bl", "x"]);
    cmd("PUBLISH").arg("end").arg("end").query::<i64>(&mut c).unwrap();
    let mut got = Vec::new();
    ps.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    loop {
        let msg = ps.get_message().expect("the messages stopped before the end marker");
        let channel = msg.get_channel_name().to_string();
        if channel == "end" {
            return got;
        }
        got.push(format!("{channel} {}", msg.get_payload::<String>().unwrap()));
    }
}

#[test]
fn every_command_notifies_exactly_as_redis_does() {
    let Some((_redis, _rc, redis_port)) = start_redis() else { return };
    let server = Server::start(&[]);
    for flags in ["KEA", "KEAnm", "Kl", "Eg$", "Ezsh"] {
        let want = events(redis_port, flags);
        let got = events(server.port, flags);
        let first_difference = want.iter().zip(&got).position(|(w, g)| w != g).unwrap_or(want.len().min(got.len()));
        assert_eq!(
            got,
            want,
            "notify-keyspace-events {flags}: first difference at message {first_difference}: shale {:?} vs redis {:?}",
            got.get(first_difference),
            want.get(first_difference)
        );
        assert!(flags != "KEA" || want.len() > 150, "the script covers the events: {}", want.len());
    }
}

#[test]
fn the_flags_read_back_as_redis_spells_them() {
    let Some((_redis, mut r, _)) = start_redis() else { return };
    let server = Server::start(&[]);
    let mut c = server.client();
    for set in ["gKE", "$lshzxeKE", "KA", "EA", "AKEnm", "Kn", "", "xE"] {
        for conn in [&mut r, &mut c] {
            cmd("CONFIG").arg("SET").arg("notify-keyspace-events").arg(set).query::<()>(conn).unwrap();
        }
        let get = |conn: &mut redis::Connection| {
            cmd("CONFIG").arg("GET").arg("notify-keyspace-events").query::<Vec<String>>(conn).unwrap()
        };
        assert_eq!(get(&mut c), get(&mut r), "{set}");
    }
    for conn in [&mut r, &mut c] {
        let e = cmd("CONFIG").arg("SET").arg("notify-keyspace-events").arg("KEq").query::<()>(conn).unwrap_err();
        assert!(e.to_string().contains("Invalid event class character"), "{e}");
    }
    // The config file and the command line take them too.
    let started = Server::start(&["--notify-keyspace-events", "KEA"]);
    let mut c = started.client();
    let got = cmd("CONFIG").arg("GET").arg("notify-keyspace-events").query::<Vec<String>>(&mut c).unwrap();
    assert_eq!(got, ["notify-keyspace-events", "AKE"]);
}

#[test]
fn expired_keys_are_notified_by_the_expiry_cycle() {
    let server = Server::start(&["--notify-keyspace-events", "Ex"]);
    let mut c = server.client();
    let mut sub = server.client();
    let mut ps = sub.as_pubsub();
    ps.psubscribe("__keyevent@*").unwrap();
    cmd("SELECT").arg(3).query::<()>(&mut c).unwrap();
    cmd("PSETEX").arg("soon").arg(100).arg("v").query::<()>(&mut c).unwrap();
    cmd("SET").arg("later").arg("v").arg("EX").arg(100).query::<()>(&mut c).unwrap();
    ps.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let msg = ps.get_message().unwrap();
    assert_eq!(msg.get_channel_name(), "__keyevent@3__:expired");
    assert_eq!(msg.get_payload::<String>().unwrap(), "soon");
    // Nothing else: the SET classes are not enabled, and `later` has not expired.
    ps.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    assert!(ps.get_message().is_err(), "no other event");
}

#[test]
fn a_failed_or_discarded_transaction_notifies_nothing() {
    let server = Server::start(&["--notify-keyspace-events", "KEA"]);
    let mut c = server.client();
    let mut other = server.client();
    let mut sub = server.client();
    let mut ps = sub.as_pubsub();
    ps.psubscribe("__keyspace@0__:*").unwrap();
    // WATCH broken by another client: EXEC runs nothing.
    cmd("WATCH").arg("w").query::<()>(&mut c).unwrap();
    cmd("SET").arg("w").arg("1").query::<()>(&mut other).unwrap();
    cmd("MULTI").query::<()>(&mut c).unwrap();
    cmd("SET").arg("a").arg("1").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("EXEC").query::<redis::Value>(&mut c).unwrap(), redis::Value::Nil);
    // DISCARD: nothing either.
    cmd("MULTI").query::<()>(&mut c).unwrap();
    cmd("SET").arg("b").arg("1").query::<()>(&mut c).unwrap();
    cmd("DISCARD").query::<()>(&mut c).unwrap();
    cmd("PUBLISH").arg("__keyspace@0__:end").arg("end").query::<i64>(&mut c).unwrap();
    ps.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    loop {
        let msg = ps.get_message().unwrap();
        let line = format!("{} {}", msg.get_channel_name(), msg.get_payload::<String>().unwrap());
        if line.ends_with(" end") {
            break;
        }
        got.push(line);
    }
    assert_eq!(got, ["__keyspace@0__:w set"], "only the other client's SET");
}
