//! RENAME, COPY, MOVE, SWAPDB, KEYS, SCAN, RANDOMKEY, TOUCH, EXPIRETIME, OBJECT, 65536 databases
//! and the active expiry cycle against a real `shale-server`.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::Server;
use redis::{cmd, Value};

fn err(r: redis::RedisResult<Value>) -> String {
    let e = r.unwrap_err();
    format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
}

fn get(c: &mut redis::Connection, key: &str) -> Option<String> {
    cmd("GET").arg(key).query(c).unwrap()
}

#[test]
fn rename_copy_move_keep_values_and_ttls() {
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("SET").arg("a").arg("1").arg("EX").arg(100).query::<()>(&mut c).unwrap();
    assert_eq!(err(cmd("RENAME").arg("nokey").arg("b").query(&mut c)), "ERR no such key");
    assert_eq!(cmd("RENAME").arg("a").arg("a").query::<String>(&mut c).unwrap(), "OK");
    assert_eq!(cmd("RENAMENX").arg("a").arg("a").query::<i64>(&mut c).unwrap(), 0);
    cmd("RENAME").arg("a").arg("b").query::<()>(&mut c).unwrap();
    assert_eq!((get(&mut c, "a"), get(&mut c, "b")), (None, Some("1".into())));
    assert_eq!(cmd("TTL").arg("b").query::<i64>(&mut c).unwrap(), 100, "RENAME keeps the TTL");
    cmd("SET").arg("c").arg("3").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("RENAMENX").arg("b").arg("c").query::<i64>(&mut c).unwrap(), 0);

    assert_eq!(err(cmd("COPY").arg("b").arg("b").query(&mut c)), "ERR source and destination objects are the same");
    assert_eq!(cmd("COPY").arg("b").arg("d").query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(cmd("COPY").arg("c").arg("d").query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(cmd("COPY").arg("c").arg("d").arg("REPLACE").query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(get(&mut c, "d"), Some("3".into()));
    assert_eq!(cmd("COPY").arg("b").arg("b").arg("DB").arg(5).query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(err(cmd("COPY").arg("b").arg("x").arg("DB").arg(99).query(&mut c)), "ERR DB index is out of range");

    assert_eq!(err(cmd("MOVE").arg("b").arg(0).query(&mut c)), "ERR source and destination objects are the same");
    assert_eq!(cmd("MOVE").arg("b").arg(5).query::<i64>(&mut c).unwrap(), 0, "present in the target db");
    assert_eq!(cmd("MOVE").arg("c").arg(5).query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(get(&mut c, "c"), None);
    cmd("SELECT").arg(5).query::<()>(&mut c).unwrap();
    assert_eq!((get(&mut c, "b"), get(&mut c, "c")), (Some("1".into()), Some("3".into())));
    assert!(cmd("TTL").arg("b").query::<i64>(&mut c).unwrap() > 90, "COPY … DB keeps the TTL");
    assert_eq!(cmd("EXPIRETIME").arg("c").query::<i64>(&mut c).unwrap(), -1);
    assert_eq!(cmd("EXPIRETIME").arg("nokey").query::<i64>(&mut c).unwrap(), -2);
    cmd("SET").arg("e").arg("1").arg("EXAT").arg(4_000_000_000u64).query::<()>(&mut c).unwrap();
    assert_eq!(cmd("EXPIRETIME").arg("e").query::<i64>(&mut c).unwrap(), 4_000_000_000);
    assert_eq!(cmd("PEXPIRETIME").arg("e").query::<i64>(&mut c).unwrap(), 4_000_000_000_000);
    assert_eq!(cmd("TOUCH").arg("b").arg("c").arg("nokey").query::<i64>(&mut c).unwrap(), 2);
}

#[test]
fn swapdb_swaps_for_every_client_and_survives_restart() {
    let server = Server::start(&[]);
    let mut a = server.client();
    let mut b = server.client();
    cmd("SET").arg("where").arg("zero").query::<()>(&mut a).unwrap();
    cmd("SELECT").arg(1).query::<()>(&mut b).unwrap();
    cmd("SET").arg("where").arg("one").query::<()>(&mut b).unwrap();
    cmd("SET").arg("only1").arg("x").query::<()>(&mut b).unwrap();
    assert_eq!(cmd("SWAPDB").arg(0).arg(1).query::<String>(&mut a).unwrap(), "OK");
    assert_eq!(get(&mut a, "where"), Some("one".into()), "client a, still on db 0, sees the swapped data");
    assert_eq!(get(&mut b, "where"), Some("zero".into()));
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut a).unwrap(), 2);
    assert_eq!(err(cmd("SWAPDB").arg(0).arg("x").query(&mut a)), "ERR invalid second DB index");
    assert_eq!(err(cmd("SWAPDB").arg(0).arg(16).query(&mut a)), "ERR DB index is out of range");
    let info: String = cmd("INFO").arg("keyspace").query(&mut a).unwrap();
    assert!(info.contains("db0:keys=2,") && info.contains("db1:keys=1,"), "{info}");
    let server = server.restart(&[]);
    let mut c = server.client();
    assert_eq!(get(&mut c, "where"), Some("one".into()), "the swap is durable");
    cmd("FLUSHDB").query::<()>(&mut c).unwrap();
    cmd("SELECT").arg(1).query::<()>(&mut c).unwrap();
    assert_eq!(get(&mut c, "where"), Some("zero".into()), "FLUSHDB emptied only the swapped-in db");
}

#[test]
fn keys_scan_and_randomkey() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let names: Vec<String> = (0..500).map(|i| format!("user:{i}")).collect();
    for n in &names {
        cmd("SET").arg(n).arg("v").query::<()>(&mut c).unwrap();
    }
    cmd("SET").arg("other").arg("v").query::<()>(&mut c).unwrap();
    cmd("SET").arg("gone").arg("v").arg("PX").arg(1).query::<()>(&mut c).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let all: BTreeSet<String> = cmd("KEYS").arg("*").query(&mut c).unwrap();
    assert_eq!(all.len(), 501, "expired keys are never listed");
    let some: Vec<String> = cmd("KEYS").arg("user:1?").query(&mut c).unwrap();
    assert_eq!(some.len(), 10);
    let escaped: Vec<String> = cmd("KEYS").arg(r"user:[1-2]\0").query(&mut c).unwrap();
    assert_eq!(escaped, ["user:10", "user:20"]);

    // A full SCAN returns every key present throughout, once, even with writes in between.
    let mut seen = BTreeSet::new();
    let mut cursor = 0u64;
    let mut rounds = 0;
    loop {
        let (next, keys): (u64, Vec<String>) =
            cmd("SCAN").arg(cursor).arg("MATCH").arg("user:*").arg("COUNT").arg(37).query(&mut c).unwrap();
        for k in keys {
            assert!(seen.insert(k.clone()), "{k} returned twice");
        }
        cmd("SET").arg(format!("zz-new-{rounds}")).arg("v").query::<()>(&mut c).unwrap();
        cmd("DEL").arg("other").query::<()>(&mut c).unwrap();
        rounds += 1;
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(seen, names.iter().cloned().collect());
    assert!(rounds >= 500 / 37, "COUNT bounds the work per call");
    let (_, typed): (u64, Vec<String>) = cmd("SCAN").arg(0).arg("TYPE").arg("hash").query(&mut c).unwrap();
    assert!(typed.is_empty());
    assert_eq!(err(cmd("SCAN").arg("x").query(&mut c)), "ERR invalid cursor");
    assert_eq!(err(cmd("SCAN").arg(987_654_321).query(&mut c)), "ERR invalid cursor");
    assert_eq!(err(cmd("SCAN").arg(0).arg("COUNT").arg(0).query(&mut c)), "ERR syntax error");

    let random: String = cmd("RANDOMKEY").query(&mut c).unwrap();
    assert!(random.starts_with("user:") || random.starts_with("zz-new-"), "{random}");
    cmd("FLUSHALL").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("RANDOMKEY").query::<Value>(&mut c).unwrap(), Value::Nil);
}

#[test]
fn randomkey_of_a_large_database_picks_live_keys_across_it() {
    let server = Server::start(&[]);
    let mut c = server.client();
    // 2000 keys, 1700 of them deleted or expired: a pick never returns one of those, and the
    // picks reach nearly every live key (pages of 16 after random points of the key range).
    let mut p = redis::pipe();
    for i in 0..2000 {
        p.cmd("SET").arg(format!("k:{i:05}")).arg("v").ignore();
    }
    for i in (0..2000).filter(|i| i % 20 != 0) {
        if i % 20 == 1 {
            p.cmd("PEXPIRE").arg(format!("k:{i:05}")).arg(1).ignore();
        } else {
            p.cmd("DEL").arg(format!("k:{i:05}")).ignore();
        }
    }
    p.query::<()>(&mut c).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let live: BTreeSet<String> = (0..2000).filter(|i| i % 20 == 0).map(|i| format!("k:{i:05}")).collect();
    let mut picks = redis::pipe();
    for _ in 0..3000 {
        picks.cmd("RANDOMKEY");
    }
    let picked: Vec<String> = picks.query(&mut c).unwrap();
    let distinct: BTreeSet<&String> = picked.iter().collect();
    assert!(distinct.iter().all(|k| live.contains(*k)), "only live keys: {distinct:?}");
    assert!(distinct.len() >= 90, "3000 picks reached only {} of the 100 live keys", distinct.len());
}

#[test]
fn object_answers_like_redis() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let cases = [("c", "3", "int", 2147483647), ("n2", "10000", "int", 1), ("mid", "hello world", "embstr", 1)];
    for (k, v, enc, refs) in cases {
        cmd("SET").arg(k).arg(v).query::<()>(&mut c).unwrap();
        assert_eq!(cmd("OBJECT").arg("ENCODING").arg(k).query::<String>(&mut c).unwrap(), enc, "{k}");
        assert_eq!(cmd("OBJECT").arg("REFCOUNT").arg(k).query::<i64>(&mut c).unwrap(), refs, "{k}");
    }
    cmd("SET").arg("big").arg("a".repeat(45)).query::<()>(&mut c).unwrap();
    assert_eq!(cmd("OBJECT").arg("ENCODING").arg("big").query::<String>(&mut c).unwrap(), "raw");
    assert_eq!(cmd("OBJECT").arg("ENCODING").arg("nokey").query::<Value>(&mut c).unwrap(), Value::Nil);
    assert_eq!(cmd("OBJECT").arg("IDLETIME").arg("c").query::<i64>(&mut c).unwrap(), 0);
    assert!(err(cmd("OBJECT").arg("FREQ").arg("c").query(&mut c)).starts_with("ERR An LFU maxmemory policy is not"));
    assert_eq!(
        err(cmd("OBJECT").arg("ENCODING").query(&mut c)),
        "ERR wrong number of arguments for 'object|encoding' command"
    );
}

#[test]
fn all_65536_databases_are_separate() {
    let server = Server::start(&["--databases", "65536"]);
    let mut c = server.client();
    let dbs = [0u32, 1, 255, 256, 4096, 65534, 65535];
    for db in dbs {
        cmd("SELECT").arg(db).query::<()>(&mut c).unwrap();
        cmd("SET").arg("k").arg(format!("db{db}")).query::<()>(&mut c).unwrap();
    }
    for db in dbs {
        cmd("SELECT").arg(db).query::<()>(&mut c).unwrap();
        assert_eq!(get(&mut c, "k"), Some(format!("db{db}")));
        assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 1);
    }
    assert_eq!(err(cmd("SELECT").arg(65536).query(&mut c)), "ERR DB index is out of range");
    cmd("SWAPDB").arg(0).arg(65535).query::<()>(&mut c).unwrap();
    cmd("SELECT").arg(0).query::<()>(&mut c).unwrap();
    assert_eq!(get(&mut c, "k"), Some("db65535".into()));
    cmd("MOVE").arg("k").arg(3).query::<()>(&mut c).unwrap();
    let info: String = cmd("INFO").arg("keyspace").query(&mut c).unwrap();
    assert_eq!(info.matches(":keys=1,").count(), dbs.len(), "{info}");
    assert!(info.contains("db3:keys=1") && !info.contains("db0:"), "{info}");
    cmd("SELECT").arg(65535).query::<()>(&mut c).unwrap();
    cmd("FLUSHDB").query::<()>(&mut c).unwrap();
    cmd("SELECT").arg(65534).query::<()>(&mut c).unwrap();
    assert_eq!(get(&mut c, "k"), Some("db65534".into()), "flushing the last db leaves its neighbour");
}

#[test]
fn active_expiry_deletes_keys_nobody_reads() {
    let server = Server::start(&[]);
    let mut c = server.client();
    for i in 0..200 {
        cmd("SET").arg(format!("t{i}")).arg("v").arg("PX").arg(50).query::<()>(&mut c).unwrap();
    }
    cmd("SET").arg("stays").arg("v").query::<()>(&mut c).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let info: String = cmd("INFO").arg("stats").query(&mut c).unwrap();
        if info.contains("expired_keys:200\r\n") {
            break;
        }
        assert!(Instant::now() < deadline, "the active cycle did not expire the keys: {info}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 1);
}

/// TTLs that slide (INCR keeps one, PEXPIRE pushes it later, HSET on a hash with one) write no
/// new expiry index entry: the active cycle, meeting the key's first entry, must keep the key
/// and still delete it, unread, once its last TTL passes.
#[test]
fn the_active_cycle_deletes_keys_whose_ttl_slid_later_at_their_last_ttl() {
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("SET").arg("counter").arg(0).arg("PX").arg(100).query::<()>(&mut c).unwrap();
    cmd("HSET").arg("hash").arg("f").arg("v").query::<()>(&mut c).unwrap();
    cmd("PEXPIRE").arg("hash").arg(100).query::<()>(&mut c).unwrap();
    cmd("SET").arg("stays").arg("v").query::<()>(&mut c).unwrap();
    // The last TTLs are set after this, so they pass 700 ms after it at the earliest.
    let set_at = Instant::now();
    for _ in 0..3 {
        cmd("INCR").arg("counter").query::<i64>(&mut c).unwrap();
        cmd("PEXPIRE").arg("counter").arg(700).query::<i64>(&mut c).unwrap();
        cmd("HSET").arg("hash").arg("g").arg("w").query::<i64>(&mut c).unwrap();
        cmd("PEXPIRE").arg("hash").arg(700).query::<i64>(&mut c).unwrap();
    }
    // Well past the first TTL (the cycle runs ten times a second), before the last one.
    std::thread::sleep(Duration::from_millis(350));
    let info: String = cmd("INFO").arg("stats").query(&mut c).unwrap();
    if set_at.elapsed() < Duration::from_millis(650) {
        assert!(info.contains("expired_keys:0\r\n"), "a key went before its TTL: {info}");
        assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 3);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let info: String = cmd("INFO").arg("stats").query(&mut c).unwrap();
        if info.contains("expired_keys:2\r\n") {
            break;
        }
        assert!(Instant::now() < deadline, "the active cycle did not expire the keys: {info}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(set_at.elapsed() >= Duration::from_millis(700));
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 1);
}
