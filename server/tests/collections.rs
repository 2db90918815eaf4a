//! Hashes, sets, sorted sets and lists against a real `shale-server`: options, negative
//! indexes, WRONGTYPE, empty collections disappearing, RESP3 reply types, persistence across a
//! restart, expiry, and big collections (O(1) DEL, space reclaimed by compaction).

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use common::{roundtrip, Server};
use redis::{cmd, Value};

fn err(r: redis::RedisResult<Value>) -> String {
    let e = r.unwrap_err();
    format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[test]
fn every_family_checks_types_and_drops_empty_keys() {
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("SET").arg("str").arg("x").query::<()>(&mut c).unwrap();
    for (name, args) in [
        ("HSET", vec!["str", "f", "v"]),
        ("SADD", vec!["str", "m"]),
        ("ZADD", vec!["str", "1", "m"]),
        ("LPUSH", vec!["str", "e"]),
        ("HGETALL", vec!["str"]),
        ("SMEMBERS", vec!["str"]),
        ("ZRANGE", vec!["str", "0", "-1"]),
        ("LRANGE", vec!["str", "0", "-1"]),
    ] {
        assert_eq!(err(cmd(name).arg(&args).query(&mut c)), WRONGTYPE, "{name}");
    }
    cmd("HSET").arg("h").arg("f").arg("v").query::<()>(&mut c).unwrap();
    assert_eq!(err(cmd("GET").arg("h").query(&mut c)), WRONGTYPE);
    assert_eq!(err(cmd("APPEND").arg("h").arg("x").query(&mut c)), WRONGTYPE);
    // A collection emptied by removals no longer exists.
    cmd("SADD").arg("s").arg("a").query::<()>(&mut c).unwrap();
    cmd("ZADD").arg("z").arg(1).arg("a").query::<()>(&mut c).unwrap();
    cmd("RPUSH").arg("l").arg("a").query::<()>(&mut c).unwrap();
    cmd("HDEL").arg("h").arg("f").query::<()>(&mut c).unwrap();
    cmd("SREM").arg("s").arg("a").query::<()>(&mut c).unwrap();
    cmd("ZREM").arg("z").arg("a").query::<()>(&mut c).unwrap();
    cmd("LPOP").arg("l").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("EXISTS").arg(&["h", "s", "z", "l"]).query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 1);
    // Re-created keys start empty (a new incarnation, nothing of the old one shows).
    cmd("SADD").arg("s").arg("fresh").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("SMEMBERS").arg("s").query::<Vec<String>>(&mut c).unwrap(), ["fresh"]);
    // Overwriting a collection with a string, and back.
    cmd("RPUSH").arg("l").arg("1").arg("2").query::<()>(&mut c).unwrap();
    cmd("SET").arg("l").arg("now a string").query::<()>(&mut c).unwrap();
    cmd("DEL").arg("l").query::<()>(&mut c).unwrap();
    cmd("RPUSH").arg("l").arg("3").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("LRANGE").arg("l").arg(0).arg(-1).query::<Vec<String>>(&mut c).unwrap(), ["3"]);
    let types: Vec<String> =
        ["str", "s", "l", "nokey"].iter().map(|k| cmd("TYPE").arg(k).query(&mut c).unwrap()).collect();
    assert_eq!(types, ["string", "set", "list", "none"]);
    let (_, hashes): (u64, Vec<String>) = cmd("SCAN").arg(0).arg("TYPE").arg("set").query(&mut c).unwrap();
    assert_eq!(hashes, ["s"]);
}

#[test]
fn lists_index_from_both_ends() {
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("RPUSH").arg("l").arg(&["a", "b", "c", "d", "e"]).query::<()>(&mut c).unwrap();
    cmd("LPUSH").arg("l").arg("z").query::<()>(&mut c).unwrap();
    let range = |c: &mut redis::Connection, a: i64, b: i64| -> Vec<String> {
        cmd("LRANGE").arg("l").arg(a).arg(b).query(c).unwrap()
    };
    assert_eq!(range(&mut c, 0, -1), ["z", "a", "b", "c", "d", "e"]);
    assert_eq!(range(&mut c, -2, -1), ["d", "e"]);
    assert_eq!(range(&mut c, 4, 100), ["d", "e"]);
    assert!(range(&mut c, 3, 1).is_empty());
    assert_eq!(cmd("LINDEX").arg("l").arg(-1).query::<String>(&mut c).unwrap(), "e");
    assert_eq!(cmd("LINDEX").arg("l").arg(6).query::<Value>(&mut c).unwrap(), Value::Nil);
    cmd("LSET").arg("l").arg(-2).arg("D").query::<()>(&mut c).unwrap();
    assert_eq!(err(cmd("LSET").arg("l").arg(9).arg("x").query(&mut c)), "ERR index out of range");
    assert_eq!(cmd("LINSERT").arg("l").arg("BEFORE").arg("b").arg("ab").query::<i64>(&mut c).unwrap(), 7);
    cmd("RPUSH").arg("l").arg(&["a", "a"]).query::<()>(&mut c).unwrap();
    assert_eq!(cmd("LPOS").arg("l").arg("a").arg("RANK").arg(-1).query::<i64>(&mut c).unwrap(), 8);
    assert_eq!(cmd("LPOS").arg("l").arg("a").arg("COUNT").arg(0).query::<Vec<i64>>(&mut c).unwrap(), [1, 7, 8]);
    assert_eq!(cmd("LREM").arg("l").arg(-2).arg("a").query::<i64>(&mut c).unwrap(), 2);
    cmd("LTRIM").arg("l").arg(1).arg(-2).query::<()>(&mut c).unwrap();
    assert_eq!(range(&mut c, 0, -1), ["a", "ab", "b", "c", "D"]);
    assert_eq!(cmd("LPOP").arg("l").arg(2).query::<Vec<String>>(&mut c).unwrap(), ["a", "ab"]);
    assert_eq!(cmd("RPOP").arg("l").arg(10).query::<Vec<String>>(&mut c).unwrap(), ["D", "c", "b"]);
    assert_eq!(cmd("LPOP").arg("l").arg(1).query::<Value>(&mut c).unwrap(), Value::Nil);
    // Pushes on one end and pops on the other, many times: indexes move, LINDEX stays O(1).
    for i in 0..300 {
        cmd("RPUSH").arg("q").arg(i).query::<()>(&mut c).unwrap();
    }
    for _ in 0..100 {
        cmd("LPOP").arg("q").query::<()>(&mut c).unwrap();
    }
    assert_eq!(cmd("LINDEX").arg("q").arg(0).query::<i64>(&mut c).unwrap(), 100);
    assert_eq!(cmd("LLEN").arg("q").query::<i64>(&mut c).unwrap(), 200);
}

#[test]
fn resp3_gives_maps_sets_doubles_and_pairs() {
    let server = Server::start(&[]);
    let mut s = server.raw();
    let setup = b"HELLO 3\r\nHSET h f v\r\nSADD s m\r\nZADD z 1.5 a 2 b\r\n";
    let hello = roundtrip(&mut s, setup, 1);
    assert!(hello.starts_with(b"%7"));
    std::thread::sleep(Duration::from_millis(50));
    let mut sink = [0u8; 4096];
    let _ = std::io::Read::read(&mut s, &mut sink);
    let cases: &[(&[u8], &str)] = &[
        (b"HGETALL h\r\n", "%1\r\n$1\r\nf\r\n$1\r\nv\r\n"),
        (b"SMEMBERS s\r\n", "~1\r\n$1\r\nm\r\n"),
        (b"ZSCORE z a\r\n", ",1.5\r\n"),
        (b"ZRANGE z 0 -1 WITHSCORES\r\n", "*2\r\n*2\r\n$1\r\na\r\n,1.5\r\n*2\r\n$1\r\nb\r\n,2\r\n"),
        (b"ZPOPMIN nokey\r\n", "*0\r\n"),
        (b"HGET h nof\r\n", "_\r\n"),
    ];
    for (req, want) in cases {
        let got = roundtrip(&mut s, req, want.len());
        assert_eq!(String::from_utf8_lossy(&got), *want, "{}", String::from_utf8_lossy(req));
    }
}

#[test]
fn collections_persist_and_expire() {
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("HSET").arg("h").arg(&["a", "1", "b", "2"]).query::<()>(&mut c).unwrap();
    cmd("SADD").arg("s").arg(&["x", "y"]).query::<()>(&mut c).unwrap();
    cmd("ZADD").arg("z").arg(&["1", "a", "2", "b"]).query::<()>(&mut c).unwrap();
    cmd("RPUSH").arg("l").arg(&["1", "2", "3"]).query::<()>(&mut c).unwrap();
    cmd("HSET").arg("ttl").arg("f").arg("v").query::<()>(&mut c).unwrap();
    cmd("EXPIRE").arg("ttl").arg(1000).query::<()>(&mut c).unwrap();
    cmd("RENAME").arg("z").arg("z2").query::<()>(&mut c).unwrap();
    let server = server.restart(&[]);
    let mut c = server.client();
    let h: HashMap<String, String> = cmd("HGETALL").arg("h").query(&mut c).unwrap();
    assert_eq!(h, HashMap::from([("a".into(), "1".into()), ("b".into(), "2".into())]));
    let s: BTreeSet<String> = cmd("SMEMBERS").arg("s").query(&mut c).unwrap();
    assert_eq!(s, BTreeSet::from(["x".to_string(), "y".to_string()]));
    assert_eq!(cmd("ZRANGE").arg("z2").arg(0).arg(-1).query::<Vec<String>>(&mut c).unwrap(), ["a", "b"]);
    assert_eq!(cmd("LRANGE").arg("l").arg(0).arg(-1).query::<Vec<i64>>(&mut c).unwrap(), [1, 2, 3]);
    assert!(cmd("TTL").arg("ttl").query::<i64>(&mut c).unwrap() > 990);
    // Expiry of a collection: gone for every reader, then deleted by the active cycle.
    cmd("PEXPIRE").arg("h").arg(30).query::<()>(&mut c).unwrap();
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(cmd("HGET").arg("h").arg("a").query::<Value>(&mut c).unwrap(), Value::Nil);
    assert_eq!(cmd("HLEN").arg("h").query::<i64>(&mut c).unwrap(), 0);
    cmd("HSET").arg("h").arg("new").arg("1").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("HKEYS").arg("h").query::<Vec<String>>(&mut c).unwrap(), ["new"], "nothing of the expired one");
}

#[test]
fn big_collections_delete_at_once_and_their_space_comes_back() {
    let n: usize = std::env::var("SHALE_BIG_COLLECTION").ok().and_then(|v| v.parse().ok()).unwrap_or(50_000);
    let server = Server::start(&["--enable-debug-command", "yes"]);
    let mut c = server.client();
    // Values that do not compress (the point is to see disk space come back).
    let value_of = |i: usize| -> String {
        let mut x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (0..4)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                format!("{x:016x}")
            })
            .collect()
    };
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut hset = cmd("HSET");
        hset.arg("bighash");
        let mut zadd = cmd("ZADD");
        zadd.arg("bigzset");
        for i in chunk {
            hset.arg(format!("field:{i}")).arg(value_of(*i));
            zadd.arg(*i as f64).arg(format!("member:{i}"));
        }
        redis::pipe().add_command(hset).ignore().add_command(zadd).ignore().query::<()>(&mut c).unwrap();
    }
    assert_eq!(cmd("HLEN").arg("bighash").query::<usize>(&mut c).unwrap(), n);
    assert_eq!(cmd("ZCARD").arg("bigzset").query::<usize>(&mut c).unwrap(), n);
    let t = Instant::now();
    for i in (0..n).step_by(n / 100) {
        assert_eq!(cmd("HGET").arg("bighash").arg(format!("field:{i}")).query::<String>(&mut c).unwrap(), value_of(i));
        assert_eq!(cmd("ZSCORE").arg("bigzset").arg(format!("member:{i}")).query::<f64>(&mut c).unwrap(), i as f64);
    }
    eprintln!("{n} elements: 100 HGET + 100 ZSCORE in {:?}", t.elapsed());
    let t = Instant::now();
    assert_eq!(cmd("ZRANK").arg("bigzset").arg(format!("member:{}", n / 2)).query::<usize>(&mut c).unwrap(), n / 2);
    eprintln!("ZRANK at the middle of {n}: {:?}", t.elapsed());
    cmd("SAVE").query::<()>(&mut c).unwrap();
    let bytes = |c: &mut redis::Connection| -> i64 {
        let stats: HashMap<String, Value> = cmd("MEMORY").arg("STATS").query(c).unwrap();
        match stats["dataset.bytes"] {
            Value::Int(n) => n,
            ref other => panic!("{other:?}"),
        }
    };
    let before = bytes(&mut c);
    assert!(before > (n * 64) as i64, "the data is on disk: {before}");
    let t = Instant::now();
    assert_eq!(cmd("DEL").arg("bighash").arg("bigzset").query::<i64>(&mut c).unwrap(), 2);
    eprintln!("DEL of 2 x {n} elements: {:?}", t.elapsed());
    assert_eq!(cmd("HLEN").arg("bighash").query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(cmd("ZRANGE").arg("bigzset").arg(0).arg(10).query::<Vec<String>>(&mut c).unwrap(), Vec::<String>::new());
    cmd("DEBUG").arg("COMPACT").query::<()>(&mut c).unwrap();
    let after = bytes(&mut c);
    assert!(after < before / 20, "compaction dropped the orphaned elements: {before} -> {after} bytes");
}

#[test]
fn copy_move_and_rename_carry_collections_whole() {
    let server = Server::start(&["--enable-debug-command", "yes"]);
    let mut c = server.client();
    cmd("ZADD").arg("z").arg(&["1", "a", "2", "b"]).query::<()>(&mut c).unwrap();
    cmd("RPUSH").arg("l").arg(&["x", "y"]).query::<()>(&mut c).unwrap();
    assert_eq!(cmd("COPY").arg("z").arg("z-copy").query::<i64>(&mut c).unwrap(), 1);
    cmd("ZADD").arg("z").arg(3).arg("c").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("ZCARD").arg("z-copy").query::<i64>(&mut c).unwrap(), 2, "the copy is independent");
    assert_eq!(cmd("MOVE").arg("l").arg(4).query::<i64>(&mut c).unwrap(), 1);
    cmd("RENAME").arg("z").arg("z-renamed").query::<()>(&mut c).unwrap();
    cmd("DEBUG").arg("COMPACT").query::<()>(&mut c).unwrap();
    // Compaction must not take the elements of the renamed, copied or moved collections.
    assert_eq!(cmd("ZRANGE").arg("z-renamed").arg(0).arg(-1).query::<Vec<String>>(&mut c).unwrap(), ["a", "b", "c"]);
    assert_eq!(cmd("ZRANGE").arg("z-copy").arg(0).arg(-1).query::<Vec<String>>(&mut c).unwrap(), ["a", "b"]);
    cmd("SELECT").arg(4).query::<()>(&mut c).unwrap();
    assert_eq!(cmd("LRANGE").arg("l").arg(0).arg(-1).query::<Vec<String>>(&mut c).unwrap(), ["x", "y"]);
}

/// Small hashes list their fields in insertion order, as Redis's listpacks do, until a write
/// passes `hash-max-listpack-entries` / `-value` and converts them for good: the same script
/// against redis-server and shale-server gets the same replies, order included (and after a
/// restart, the same order).
#[test]
fn small_hashes_keep_insertion_order_as_redis_listpacks_do() {
    let Some((_redis, mut redis, _)) = common::start_redis() else { return };
    let server = Server::start(&[]);
    let mut shale = server.client();
    let script: &[&[&str]] = &[
        &["CONFIG", "SET", "hash-max-listpack-entries", "4"],
        &["CONFIG", "SET", "hash-max-listpack-value", "8"],
        &["HSET", "h", "c", "1", "a", "2", "b", "3"],
        &["HSET", "h", "a", "9"],
        &["HGETALL", "h"],
        &["HDEL", "h", "c"],
        &["HSET", "h", "c", "4"],
        &["HINCRBY", "h", "z", "5"],
        &["HKEYS", "h"],
        &["HVALS", "h"],
        &["HSCAN", "h", "0"],
        &["HRANDFIELD", "h", "10", "WITHVALUES"],
        &["OBJECT", "ENCODING", "h"],
        &["COPY", "h", "copied"],
        &["HGETALL", "copied"],
        &["RENAME", "copied", "renamed"],
        &["HKEYS", "renamed"],
        // A fifth field converts it; it stays a hash table when it shrinks again.
        &["HSET", "h", "e", "1"],
        &["OBJECT", "ENCODING", "h"],
        &["HDEL", "h", "e", "a"],
        &["OBJECT", "ENCODING", "h"],
        // A long value converts, also when it is the hash's first.
        &["HSET", "g", "f", "1"],
        &["HSET", "g", "long", "123456789"],
        &["OBJECT", "ENCODING", "g"],
        &["HSETNX", "n", "x", "123456789"],
        &["OBJECT", "ENCODING", "n"],
        &["HINCRBYFLOAT", "m", "b", "1.5"],
        &["HINCRBYFLOAT", "m", "a", "0.000000001"],
        &["OBJECT", "ENCODING", "m"],
        &["HSET", "o", "b", "1", "a", "2"],
        &["HINCRBYFLOAT", "o", "b", "0.000000001"],
        &["OBJECT", "ENCODING", "o"],
        // A field given twice keeps its first place.
        &["HSET", "d", "y", "1", "x", "2", "y", "3"],
        &["HGETALL", "d"],
    ];
    let same = |argv: &[&str], shale: &mut redis::Connection, redis: &mut redis::Connection| {
        let run = |c: &mut redis::Connection| cmd(argv[0]).arg(&argv[1..]).query::<Value>(c);
        assert_eq!(format!("{:?}", run(shale)), format!("{:?}", run(redis)), "{argv:?}");
    };
    for argv in script {
        same(argv, &mut shale, &mut redis);
    }
    // Churn past the point where Shale rewrites the hash under a fresh incarnation (removals
    // outnumbering twice its size): the order survives the rewrite.
    same(&["HSET", "churn", "c", "1", "a", "2", "b", "3"], &mut shale, &mut redis);
    for i in 0..300 {
        let field = format!("t{}", i % 3);
        same(&["HSET", "churn", &field, "1"], &mut shale, &mut redis);
        same(&["HDEL", "churn", "a", &field], &mut shale, &mut redis);
        same(&["HSET", "churn", "a", "2"], &mut shale, &mut redis);
    }
    same(&["HGETALL", "churn"], &mut shale, &mut redis);
    // DUMP and RESTORE keep the order (each server restores its own payload).
    for c in [&mut redis, &mut shale] {
        let dump: Vec<u8> = cmd("DUMP").arg("renamed").query(c).unwrap();
        cmd("RESTORE").arg("restored").arg(0).arg(dump).query::<()>(c).unwrap();
    }
    let listed = |c: &mut redis::Connection, key| cmd("HGETALL").arg(key).query::<Vec<String>>(c).unwrap();
    assert_eq!(listed(&mut shale, "restored"), listed(&mut redis, "restored"));
    assert_eq!(listed(&mut shale, "restored"), ["a", "9", "b", "3", "c", "4", "z", "5"]);
    let server = server.restart(&[]);
    let mut shale = server.client();
    assert_eq!(listed(&mut shale, "renamed"), listed(&mut redis, "renamed"), "after a restart");
}

/// HSET of the value a field already holds writes no new copy of it, but it is still a
/// modification of the hash, as in Redis: a WATCH on the hash fails. A field given twice in
/// one HSET keeps its last value, whichever of the two equals the old one.
#[test]
fn hset_of_the_same_value_still_modifies_the_hash() {
    let server = Server::start(&[]);
    let (mut c, mut other) = (server.client(), server.client());
    let hset = |c: &mut redis::Connection, args: &[&str]| cmd("HSET").arg("h").arg(args).query::<i64>(c).unwrap();
    let hget = |c: &mut redis::Connection| cmd("HGET").arg("h").arg("f").query::<String>(c).unwrap();
    assert_eq!(hset(&mut c, &["f", "old", "g", "x"]), 2);

    cmd("WATCH").arg("h").query::<()>(&mut c).unwrap();
    assert_eq!(hset(&mut other, &["f", "old"]), 0);
    cmd("MULTI").query::<()>(&mut c).unwrap();
    cmd("HGET").arg("h").arg("f").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("EXEC").query::<Value>(&mut c).unwrap(), Value::Nil, "the same value still touches the hash");

    for (pairs, last) in [
        (["f", "new", "f", "old"], "old"),
        (["f", "old", "f", "new"], "new"),
        (["f", "new", "f", "new"], "new"),
        (["f", "new", "f", "old"], "old"),
    ] {
        assert_eq!(hset(&mut c, &pairs), 0);
        assert_eq!(hget(&mut c), last, "after HSET h {pairs:?}");
    }
    assert_eq!(hset(&mut c, &["f", "old"]), 0);
    assert_eq!(cmd("HGETALL").arg("h").query::<Vec<String>>(&mut c).unwrap(), ["f", "old", "g", "x"]);
}
