//! GETSET, GETEX, GETRANGE/SUBSTR, SETRANGE, MSETNX, INCRBYFLOAT and LCS against a real
//! `shale-server`, with the replies and errors Redis 7 gives.

mod common;

use common::Server;
use redis::{cmd, Value};

fn err(r: redis::RedisResult<Value>) -> String {
    let e = r.unwrap_err();
    format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
}

#[test]
fn getset_getex_msetnx() {
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("SET").arg("s").arg("hello").arg("EX").arg(100).query::<()>(&mut c).unwrap();
    assert_eq!(cmd("GETSET").arg("s").arg("world").query::<String>(&mut c).unwrap(), "hello");
    assert_eq!(cmd("TTL").arg("s").query::<i64>(&mut c).unwrap(), -1, "GETSET drops the TTL");
    assert_eq!(cmd("GETSET").arg("fresh").arg("x").query::<Value>(&mut c).unwrap(), Value::Nil);

    assert_eq!(cmd("GETEX").arg("s").arg("EX").arg(50).query::<String>(&mut c).unwrap(), "world");
    assert_eq!(cmd("TTL").arg("s").query::<i64>(&mut c).unwrap(), 50);
    assert_eq!(cmd("GETEX").arg("s").query::<String>(&mut c).unwrap(), "world");
    assert_eq!(cmd("TTL").arg("s").query::<i64>(&mut c).unwrap(), 50, "plain GETEX keeps the TTL");
    cmd("GETEX").arg("s").arg("PERSIST").query::<String>(&mut c).unwrap();
    assert_eq!(cmd("TTL").arg("s").query::<i64>(&mut c).unwrap(), -1);
    assert_eq!(err(cmd("GETEX").arg("s").arg("PX").arg(0).query(&mut c)), "ERR invalid expire time in 'getex' command");
    assert_eq!(err(cmd("GETEX").arg("s").arg("PERSIST").arg("EX").arg(1).query(&mut c)), "ERR syntax error");
    assert_eq!(cmd("GETEX").arg("nokey").arg("EX").arg(10).query::<Value>(&mut c).unwrap(), Value::Nil);
    assert_eq!(cmd("GETEX").arg("s").arg("PXAT").arg(1).query::<String>(&mut c).unwrap(), "world");
    assert_eq!(cmd("EXISTS").arg("s").query::<i64>(&mut c).unwrap(), 0, "a time in the past deletes the key");

    assert_eq!(cmd("MSETNX").arg("a").arg(1).arg("b").arg(2).query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(cmd("MSETNX").arg("b").arg(3).arg("c").arg(4).query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(cmd("EXISTS").arg("c").query::<i64>(&mut c).unwrap(), 0, "all or nothing");
    assert_eq!(
        err(cmd("MSETNX").arg("a").arg(1).arg("b").query(&mut c)),
        "ERR wrong number of arguments for 'msetnx' command"
    );
}

#[test]
fn ranges_and_setrange() {
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("SET").arg("g").arg("Hello World").query::<()>(&mut c).unwrap();
    let range = |c: &mut redis::Connection, a: i64, b: i64| -> String {
        cmd("GETRANGE").arg("g").arg(a).arg(b).query(c).unwrap()
    };
    assert_eq!(range(&mut c, 0, 4), "Hello");
    assert_eq!(range(&mut c, -5, -1), "World");
    assert_eq!(range(&mut c, 0, -1), "Hello World");
    assert_eq!(range(&mut c, 100, 200), "");
    assert_eq!(range(&mut c, -1, -5), "");
    assert_eq!(range(&mut c, 0, -100), "H");
    assert_eq!(cmd("SUBSTR").arg("g").arg(1).arg(3).query::<String>(&mut c).unwrap(), "ell");
    assert_eq!(cmd("GETRANGE").arg("nokey").arg(0).arg(-1).query::<String>(&mut c).unwrap(), "");

    cmd("SET").arg("t").arg("v").arg("EX").arg(100).query::<()>(&mut c).unwrap();
    assert_eq!(cmd("SETRANGE").arg("t").arg(3).arg("abc").query::<i64>(&mut c).unwrap(), 6);
    assert_eq!(cmd("GET").arg("t").query::<Vec<u8>>(&mut c).unwrap(), b"v\0\0abc");
    assert_eq!(cmd("TTL").arg("t").query::<i64>(&mut c).unwrap(), 100, "SETRANGE keeps the TTL");
    assert_eq!(cmd("SETRANGE").arg("t").arg(0).arg("XY").query::<i64>(&mut c).unwrap(), 6);
    assert_eq!(cmd("GET").arg("t").query::<Vec<u8>>(&mut c).unwrap(), b"XY\0abc");
    assert_eq!(cmd("SETRANGE").arg("none").arg(3).arg("").query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(cmd("EXISTS").arg("none").query::<i64>(&mut c).unwrap(), 0, "an empty write creates nothing");
    assert_eq!(err(cmd("SETRANGE").arg("t").arg(-1).arg("x").query(&mut c)), "ERR offset is out of range");
    assert_eq!(
        err(cmd("SETRANGE").arg("t").arg(536_870_911).arg("ab").query(&mut c)),
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    );
}

#[test]
fn incrbyfloat_matches_redis_output() {
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("SET").arg("n").arg("10.50").arg("EX").arg(100).query::<()>(&mut c).unwrap();
    assert_eq!(cmd("INCRBYFLOAT").arg("n").arg("0.1").query::<String>(&mut c).unwrap(), "10.6");
    assert_eq!(cmd("INCRBYFLOAT").arg("n").arg("-5").query::<String>(&mut c).unwrap(), "5.6");
    assert_eq!(cmd("TTL").arg("n").query::<i64>(&mut c).unwrap(), 100, "the TTL stays");
    cmd("SET").arg("e").arg("5.0e3").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("INCRBYFLOAT").arg("e").arg("2.0e2").query::<String>(&mut c).unwrap(), "5200");
    assert_eq!(cmd("INCRBYFLOAT").arg("x").arg("0.1").query::<String>(&mut c).unwrap(), "0.1");
    assert_eq!(cmd("INCRBYFLOAT").arg("x").arg("0.2").query::<String>(&mut c).unwrap(), "0.3");
    cmd("SET").arg("word").arg("abc").query::<()>(&mut c).unwrap();
    assert_eq!(err(cmd("INCRBYFLOAT").arg("word").arg(1).query(&mut c)), "ERR value is not a valid float");
    assert_eq!(err(cmd("INCRBYFLOAT").arg("n").arg(" 1").query(&mut c)), "ERR value is not a valid float");
    assert_eq!(
        err(cmd("INCRBYFLOAT").arg("n").arg("inf").query(&mut c)),
        "ERR increment would produce NaN or Infinity"
    );
}

#[test]
fn lcs_in_every_form() {
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("MSET").arg("k1").arg("ohmytext").arg("k2").arg("mynewtext").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("LCS").arg("k1").arg("k2").query::<String>(&mut c).unwrap(), "mytext");
    assert_eq!(cmd("LCS").arg("k1").arg("k2").arg("LEN").query::<i64>(&mut c).unwrap(), 6);
    let v: Value =
        cmd("LCS").arg("k1").arg("k2").arg("IDX").arg("MINMATCHLEN").arg(2).arg("WITHMATCHLEN").query(&mut c).unwrap();
    let int = Value::Int;
    let pair = |a: i64, b: i64| Value::Array(vec![int(a), int(b)]);
    let expected = Value::Array(vec![
        Value::BulkString(b"matches".to_vec()),
        Value::Array(vec![
            Value::Array(vec![pair(4, 7), pair(5, 8), int(4)]),
            Value::Array(vec![pair(2, 3), pair(0, 1), int(2)]),
        ]),
        Value::BulkString(b"len".to_vec()),
        int(6),
    ]);
    assert_eq!(v, expected);
    assert_eq!(cmd("LCS").arg("k1").arg("nokey").query::<String>(&mut c).unwrap(), "");
    assert_eq!(
        err(cmd("LCS").arg("k1").arg("k2").arg("LEN").arg("IDX").query(&mut c)),
        "ERR If you want both the length and indexes, please just use IDX."
    );
    assert_eq!(err(cmd("LCS").arg("k1").arg("k2").arg("foo").query(&mut c)), "ERR syntax error");
}
