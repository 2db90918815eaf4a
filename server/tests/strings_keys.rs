//! String and keyspace commands against a real `shale-server`: Redis's replies and errors,
//! expiry, persistence across a restart, and no lost updates under concurrent INCR.

mod common;

use std::time::Duration;

use common::Server;
use redis::{cmd, Value};

fn err(r: redis::RedisResult<Value>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn set_and_get_with_every_option() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(cmd("SET").arg("k").arg("v").query::<String>(&mut c).unwrap(), "OK");
    assert_eq!(cmd("GET").arg("k").query::<String>(&mut c).unwrap(), "v");
    assert_eq!(cmd("GET").arg("nope").query::<Value>(&mut c).unwrap(), Value::Nil);
    assert_eq!(cmd("SET").arg("k").arg("x").arg("NX").query::<Value>(&mut c).unwrap(), Value::Nil);
    assert_eq!(cmd("SET").arg("k").arg("v2").arg("XX").arg("GET").query::<String>(&mut c).unwrap(), "v");
    assert_eq!(cmd("SET").arg("new").arg("1").arg("XX").query::<Value>(&mut c).unwrap(), Value::Nil);
    assert!(err(cmd("SET").arg("k").arg("v").arg("NX").arg("XX").query(&mut c)).contains("syntax error"));
    assert!(err(cmd("SET").arg("k").arg("v").arg("EX").arg("0").query(&mut c))
        .contains("invalid expire time in 'set' command"));
    assert!(err(cmd("SET").arg("k").arg("v").arg("EX").arg("x").query(&mut c))
        .contains("value is not an integer or out of range"));
    assert_eq!(cmd("SET").arg("t").arg("v").arg("EX").arg("100").query::<String>(&mut c).unwrap(), "OK");
    assert_eq!(cmd("TTL").arg("t").query::<i64>(&mut c).unwrap(), 100);
    cmd("SET").arg("t").arg("v2").arg("KEEPTTL").query::<()>(&mut c).unwrap();
    assert!(cmd("PTTL").arg("t").query::<i64>(&mut c).unwrap() > 98_000);
    cmd("SET").arg("t").arg("v3").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("TTL").arg("t").query::<i64>(&mut c).unwrap(), -1, "a plain SET clears the TTL");
    // Empty keys and binary values.
    cmd("SET").arg("").arg(&b"\x00\xff\r\n"[..]).query::<()>(&mut c).unwrap();
    assert_eq!(cmd("GET").arg("").query::<Vec<u8>>(&mut c).unwrap(), b"\x00\xff\r\n");
}

#[test]
fn counters_strings_and_keys() {
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("MSET").arg("a").arg("1").arg("b").arg("2").query::<()>(&mut c).unwrap();
    assert_eq!(
        cmd("MGET").arg("a").arg("b").arg("zz").query::<Vec<Option<String>>>(&mut c).unwrap(),
        [Some("1".into()), Some("2".into()), None]
    );
    assert_eq!(cmd("INCRBY").arg("a").arg(41).query::<i64>(&mut c).unwrap(), 42);
    assert_eq!(cmd("DECR").arg("fresh").query::<i64>(&mut c).unwrap(), -1);
    cmd("SET").arg("max").arg(i64::MAX).query::<()>(&mut c).unwrap();
    assert!(err(cmd("INCR").arg("max").query(&mut c)).contains("increment or decrement would overflow"));
    cmd("SET").arg("lead").arg("007").query::<()>(&mut c).unwrap();
    assert!(err(cmd("INCR").arg("lead").query(&mut c)).contains("value is not an integer or out of range"));
    assert_eq!(cmd("APPEND").arg("s").arg("hello").query::<i64>(&mut c).unwrap(), 5);
    assert_eq!(cmd("APPEND").arg("s").arg(" world").query::<i64>(&mut c).unwrap(), 11);
    assert_eq!(cmd("STRLEN").arg("s").query::<i64>(&mut c).unwrap(), 11);
    assert_eq!(cmd("TYPE").arg("s").query::<String>(&mut c).unwrap(), "string");
    assert_eq!(cmd("TYPE").arg("none-such").query::<String>(&mut c).unwrap(), "none");
    assert_eq!(cmd("EXISTS").arg("a").arg("a").arg("zz").query::<i64>(&mut c).unwrap(), 2);
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 6);
    assert_eq!(cmd("DEL").arg("a").arg("a").arg("zz").arg("b").query::<i64>(&mut c).unwrap(), 2);
    assert_eq!(cmd("GETDEL").arg("s").query::<String>(&mut c).unwrap(), "hello world");
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 3);
    // Databases are separate, and FLUSHDB empties only the selected one.
    cmd("SELECT").arg(3).query::<()>(&mut c).unwrap();
    assert_eq!(cmd("GET").arg("max").query::<Value>(&mut c).unwrap(), Value::Nil);
    cmd("SET").arg("only3").arg("x").query::<()>(&mut c).unwrap();
    cmd("FLUSHDB").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 0);
    cmd("SELECT").arg(0).query::<()>(&mut c).unwrap();
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 3);
    cmd("FLUSHALL").arg("ASYNC").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 0);
}

#[test]
fn keys_expire_and_expire_options_follow_redis() {
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("SET").arg("k").arg("v").arg("PX").arg(150).query::<()>(&mut c).unwrap();
    assert_eq!(cmd("EXISTS").arg("k").query::<i64>(&mut c).unwrap(), 1);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(cmd("GET").arg("k").query::<Value>(&mut c).unwrap(), Value::Nil, "an expired key is never visible");
    assert_eq!(cmd("TTL").arg("k").query::<i64>(&mut c).unwrap(), -2);
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 0);
    cmd("SET").arg("e").arg("v").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("EXPIRE").arg("e").arg(100).arg("XX").query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(cmd("EXPIRE").arg("e").arg(100).arg("NX").query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(cmd("EXPIRE").arg("e").arg(50).arg("GT").query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(cmd("EXPIRE").arg("e").arg(50).arg("LT").query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(cmd("TTL").arg("e").query::<i64>(&mut c).unwrap(), 50);
    assert!(err(cmd("EXPIRE").arg("e").arg(1).arg("GT").arg("LT").query(&mut c))
        .contains("GT and LT options at the same time are not compatible"));
    assert_eq!(cmd("PERSIST").arg("e").query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(cmd("PERSIST").arg("e").query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(cmd("EXPIRE").arg("e").arg(-1).query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(cmd("EXISTS").arg("e").query::<i64>(&mut c).unwrap(), 0, "a past expiry deletes the key");
    assert_eq!(cmd("EXPIRE").arg("missing").arg(10).query::<i64>(&mut c).unwrap(), 0);
}

#[test]
fn data_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data").display().to_string();
    {
        let mut server = Server::start(&["--dir", &data]);
        let mut c = server.client();
        cmd("SET").arg("persist").arg("me").query::<()>(&mut c).unwrap();
        cmd("SET").arg("ttl").arg("x").arg("EX").arg(1000).query::<()>(&mut c).unwrap();
        cmd("SELECT").arg(9).query::<()>(&mut c).unwrap();
        cmd("INCRBY").arg("n").arg(7).query::<()>(&mut c).unwrap();
        assert!(server.terminate().success());
    }
    let server = Server::start(&["--dir", &data]);
    let mut c = server.client();
    assert_eq!(cmd("GET").arg("persist").query::<String>(&mut c).unwrap(), "me");
    assert!(cmd("TTL").arg("ttl").query::<i64>(&mut c).unwrap() > 990);
    cmd("SELECT").arg(9).query::<()>(&mut c).unwrap();
    assert_eq!(cmd("GET").arg("n").query::<i64>(&mut c).unwrap(), 7);
}

#[test]
fn concurrent_increments_sum_exactly() {
    let server = Server::start(&[]);
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let mut c = server.client();
            std::thread::spawn(move || {
                for _ in 0..500 {
                    cmd("INCR").arg("counter").query::<i64>(&mut c).unwrap();
                    cmd("APPEND").arg("log").arg("x").query::<i64>(&mut c).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut c = server.client();
    assert_eq!(cmd("GET").arg("counter").query::<i64>(&mut c).unwrap(), 4000);
    assert_eq!(cmd("STRLEN").arg("log").query::<i64>(&mut c).unwrap(), 4000);
}

#[test]
fn pipelined_blind_sets_and_increments_serialize() {
    // A pipelined SET is committed asynchronously; an INCR of the same key from another client
    // must still see it (or run wholly before it): the value ends as 0 or 1, never 1001.
    let server = Server::start(&[]);
    let mut a = server.client();
    let mut b = server.client();
    for round in 0..300 {
        cmd("SET").arg("x").arg(1000).query::<()>(&mut a).unwrap();
        let mut setter = server.client();
        let t = std::thread::spawn(move || {
            redis::pipe().cmd("SET").arg("x").arg(0).ignore().cmd("PING").ignore().query::<()>(&mut setter).unwrap();
        });
        cmd("INCR").arg("x").query::<i64>(&mut b).unwrap();
        t.join().unwrap();
        let v: i64 = cmd("GET").arg("x").query(&mut a).unwrap();
        assert!(v == 0 || v == 1, "round {round}: lost update, x = {v}");
    }
}
