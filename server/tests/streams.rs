//! Streams against a real `shale-server`: IDs and their errors, ranges, XDEL and trimming
//! (exact and by whole nodes, as Redis trims), XREAD with and without BLOCK, RESP3 replies,
//! and a stream surviving a restart and a crash.

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
    // Without the Redis serialization of streams, DUMP refuses them rather than lose them.
    assert!(err(cmd("DUMP").arg("s").query(&mut c)).contains("streams cannot be serialized"));
}
