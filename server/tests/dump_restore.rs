//! DUMP and RESTORE between shale-server and a real redis-server (Debian's 7.0), both ways, for
//! every type and every encoding Redis emits: small (listpack, intset) and large (quicklist,
//! hashtable, skiplist) collections, integer, short, long and LZF-compressed strings, with TTLs.
//!
//! Needs `redis-server`; without it the test says so and passes, unless
//! `SHALE_REQUIRE_REDIS_TOOLS=1` (as in CI).

mod common;

use common::{have_tool, start_redis, start_redis_with, Server};
use redis::{cmd, Connection, Value};

/// Fills `c` with one key per type and encoding.
fn fill(c: &mut Connection) {
    let q = |c: &mut Connection, args: &[&str]| cmd(args[0]).arg(&args[1..]).query::<Value>(c).unwrap();
    q(c, &["SET", "str:int", "12345"]);
    q(c, &["SET", "str:neg", "-70000"]);
    q(c, &["SET", "str:short", "hello world"]);
    let long: String = (0..3000).map(|i| char::from(b'a' + (i % 7) as u8)).collect();
    q(c, &["SET", "str:lzf", &long]);
    q(c, &["SET", "str:bin", "\u{0}\u{1}\u{ff}"]);
    q(c, &["RPUSH", "list:small", "a", "1", "-2", "300000", "9223372036854775807"]);
    let big: Vec<String> = (0..3000).map(|i| format!("element-{i}")).collect();
    cmd("RPUSH").arg("list:big").arg(&big).query::<Value>(c).unwrap();
    cmd("RPUSH").arg("list:huge-item").arg("x".repeat(20_000)).arg("y").query::<Value>(c).unwrap();
    q(c, &["SADD", "set:intset", "1", "2", "-3", "70000", "5000000000"]);
    q(c, &["SADD", "set:small", "a", "b", "c"]);
    let many: Vec<String> = (0..600).map(|i| format!("m{i}")).collect();
    cmd("SADD").arg("set:big").arg(&many).query::<Value>(c).unwrap();
    q(c, &["HSET", "hash:small", "f", "v", "n", "1"]);
    let pairs: Vec<String> = (0..400).flat_map(|i| [format!("f{i}"), format!("v{i}")]).collect();
    cmd("HSET").arg("hash:big").arg(&pairs).query::<Value>(c).unwrap();
    q(c, &["ZADD", "zset:small", "1.5", "a", "-inf", "b", "3", "c"]);
    let scored: Vec<String> = (0..300).flat_map(|i| [format!("{}", i as f64 / 3.0), format!("z{i}")]).collect();
    cmd("ZADD").arg("zset:big").arg(&scored).query::<Value>(c).unwrap();
    q(c, &["SET", "ttl", "v", "PX", "100000"]);
}

/// Every key's type and contents, in a comparable form.
fn contents(c: &mut Connection) -> Vec<String> {
    let mut keys: Vec<String> = cmd("KEYS").arg("*").query(c).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let t: String = cmd("TYPE").arg(&k).query(c).unwrap();
            let v: Value = match t.as_str() {
                "string" => cmd("GET").arg(&k).query(c).unwrap(),
                "list" => cmd("LRANGE").arg(&k).arg(0).arg(-1).query(c).unwrap(),
                "set" => cmd("SORT").arg(&k).arg("ALPHA").query(c).unwrap(),
                "hash" => {
                    let mut m: Vec<(Vec<u8>, Vec<u8>)> = cmd("HGETALL").arg(&k).query(c).unwrap();
                    m.sort();
                    return format!("{k} hash {m:?}");
                }
                _ => cmd("ZRANGE").arg(&k).arg(0).arg(-1).arg("WITHSCORES").query(c).unwrap(),
            };
            let ttl: i64 = cmd("PTTL").arg(&k).query(c).unwrap();
            format!("{k} {t} {v:?} ttl>0:{}", ttl > 0)
        })
        .collect()
}

/// Moves every key of `from` to `to` with DUMP / RESTORE (keeping TTLs).
fn copy_all(from: &mut Connection, to: &mut Connection) {
    let keys: Vec<String> = cmd("KEYS").arg("*").query(from).unwrap();
    for k in keys {
        let payload: Vec<u8> = cmd("DUMP").arg(&k).query(from).unwrap();
        let ttl: i64 = cmd("PTTL").arg(&k).query(from).unwrap();
        let r: redis::RedisResult<String> =
            cmd("RESTORE").arg(&k).arg(ttl.max(0)).arg(&payload).arg("REPLACE").query(to);
        assert_eq!(r.as_deref().ok(), Some("OK"), "RESTORE {k}: {r:?}");
    }
}

#[test]
fn payloads_move_both_ways_between_redis_and_shale() {
    let Some((_redis, mut redis, _)) = start_redis() else { return };
    let server = Server::start(&[]);
    let mut shale = server.client();
    fill(&mut redis);
    let want = contents(&mut redis);
    assert_eq!(want.len(), 16);

    // Redis → Shale: every encoding Redis emits.
    copy_all(&mut redis, &mut shale);
    assert_eq!(contents(&mut shale), want);

    // Shale → Redis: Shale's payloads load in Redis.
    cmd("FLUSHALL").query::<()>(&mut redis).unwrap();
    copy_all(&mut shale, &mut redis);
    assert_eq!(contents(&mut redis), want);
}

#[test]
fn restore_errors_as_redis_words_them() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let err = |c: &mut Connection, args: &[&[u8]]| -> String {
        let r: redis::RedisResult<Value> = cmd("RESTORE").arg(args).query(c);
        let e = r.unwrap_err();
        format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
    };
    cmd("SET").arg("k").arg("v").query::<()>(&mut c).unwrap();
    let good: Vec<u8> = cmd("DUMP").arg("k").query(&mut c).unwrap();
    assert_eq!(err(&mut c, &[b"k", b"0", &good]), "BUSYKEY Target key name already exists.");
    assert_eq!(err(&mut c, &[b"n", b"-1", &good]), "ERR Invalid TTL value, must be >= 0");
    assert_eq!(err(&mut c, &[b"n", b"0", &good, b"nope"]), "ERR syntax error");
    assert_eq!(err(&mut c, &[b"n", b"0", &good, b"FREQ", b"300"]), "ERR Invalid FREQ value, must be >= 0 and <= 255");
    let mut bad = good.clone();
    bad[2] ^= 0x20;
    assert_eq!(err(&mut c, &[b"n", b"0", &bad]), "ERR DUMP payload version or checksum are wrong");
    assert_eq!(err(&mut c, &[b"n", b"0", b"short"]), "ERR DUMP payload version or checksum are wrong");
    // A well-formed footer around a stream (type 15): bad data, and nothing is created.
    let mut stream = vec![15u8, 0];
    stream.extend_from_slice(&10u16.to_le_bytes());
    stream.extend_from_slice(&0u64.to_le_bytes()); // a zero CRC is not checked, as in Redis
    assert_eq!(err(&mut c, &[b"n", b"0", &stream]), "ERR Bad data format");
    assert_eq!(cmd("EXISTS").arg("n").query::<i64>(&mut c).unwrap(), 0);
    // ABSTTL in the past replaces the key with nothing.
    let r: String = cmd("RESTORE").arg("k").arg(1).arg(&good).arg("ABSTTL").arg("REPLACE").query(&mut c).unwrap();
    assert_eq!(r, "OK");
    assert_eq!(cmd("EXISTS").arg("k").query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(cmd("DUMP").arg("k").query::<Option<Vec<u8>>>(&mut c).unwrap(), None);
}

/// [`contents`] of databases 0 and 3.
fn all_contents(c: &mut Connection) -> Vec<String> {
    let mut out = Vec::new();
    for db in [0, 3] {
        cmd("SELECT").arg(db).query::<()>(c).unwrap();
        out.extend(contents(c).into_iter().map(|l| format!("db{db} {l}")));
    }
    cmd("SELECT").arg(0).query::<()>(c).unwrap();
    out
}

/// Fills databases 0 and 3 of `c`.
fn fill_two_databases(c: &mut Connection) {
    fill(c);
    cmd("SELECT").arg(3).query::<()>(c).unwrap();
    cmd("HSET").arg("db3:hash").arg("a").arg("1").query::<()>(c).unwrap();
    cmd("SET").arg("db3:str").arg("three").arg("EX").arg(1000).query::<()>(c).unwrap();
    cmd("SELECT").arg(0).query::<()>(c).unwrap();
}

#[test]
fn an_rdb_file_saved_by_redis_imports_key_by_key() {
    let rdb_dir = tempfile::tempdir().unwrap();
    let dir = rdb_dir.path().display().to_string();
    let Some((_redis, mut redis, _)) = start_redis_with(&["--dir", &dir, "--dbfilename", "dump.rdb"]) else { return };
    fill_two_databases(&mut redis);
    cmd("FUNCTION")
        .arg("LOAD")
        .arg("#!lua name=lib\nredis.register_function('f', function() return 1 end)")
        .query::<()>(&mut redis)
        .unwrap();
    cmd("SAVE").query::<()>(&mut redis).unwrap();
    let want = all_contents(&mut redis);

    let data = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shale-server"))
        .args(["--dir", &data.path().join("data").display().to_string(), "--import-rdb"])
        .arg(rdb_dir.path().join("dump.rdb"))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "import failed: {log}");
    assert!(log.contains("RDB import done") && log.contains("keys=18"), "{log}");
    assert!(log.contains("function_libraries=1"), "{log}");
    let server = Server::start_in(data, None, &[]);
    assert_eq!(all_contents(&mut server.client()), want);
    assert_eq!(cmd("FCALL").arg("f").arg(0).query::<i64>(&mut server.client()).unwrap(), 1, "the library came along");

    // A damaged file is refused before anything is written.
    let mut bytes = std::fs::read(rdb_dir.path().join("dump.rdb")).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    let damaged = rdb_dir.path().join("damaged.rdb");
    std::fs::write(&damaged, bytes).unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shale-server"))
        .args(["--dir", &fresh.path().join("data").display().to_string(), "--import-rdb"])
        .arg(&damaged)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && log.contains("CRC-64"), "{log}");
    let server = Server::start_in(fresh, None, &[]);
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut server.client()).unwrap(), 0);
}

#[test]
fn redis_cli_rdb_of_shale_loads_in_redis() {
    if !have_tool("redis-cli") {
        return;
    }
    let server = Server::start(&[]);
    let mut shale = server.client();
    fill_two_databases(&mut shale);
    cmd("FUNCTION")
        .arg("LOAD")
        .arg("#!lua name=lib\nredis.register_function('f', function() return 7 end)")
        .query::<()>(&mut shale)
        .unwrap();
    let want = all_contents(&mut shale);
    let rdb_dir = tempfile::tempdir().unwrap();
    let file = rdb_dir.path().join("dump.rdb");
    let out = std::process::Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &server.port.to_string(), "--rdb"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "redis-cli --rdb: {}", String::from_utf8_lossy(&out.stderr));
    // The snapshot was streamed from a file in the data directory, deleted once sent.
    let leftovers: Vec<_> = std::fs::read_dir(server.dir.path().join("data"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("sync-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_eq!(all_contents(&mut server.client()), want, "SYNC changed nothing");
    // A snapshot left by a run that stopped while sending it is removed at the next start.
    let stale = server.dir.path().join("data").join("sync-1-2.rdb");
    std::fs::write(&stale, b"REDIS0010").unwrap();
    let server = server.restart(&[]);
    assert!(!stale.exists());
    assert_eq!(all_contents(&mut server.client()), want);
    let dir = rdb_dir.path().display().to_string();
    let Some((_redis, mut redis, _)) = start_redis_with(&["--dir", &dir, "--dbfilename", "dump.rdb"]) else { return };
    assert_eq!(all_contents(&mut redis), want);
    assert_eq!(cmd("FCALL").arg("f").arg(0).query::<i64>(&mut redis).unwrap(), 7, "the library came along");
}

#[test]
fn migrate_moves_keys_between_redis_and_shale() {
    let Some((_redis, mut redis, redis_port)) = start_redis() else { return };
    let server = Server::start(&[]);
    let mut shale = server.client();
    fill(&mut shale);
    let want = contents(&mut shale);
    let migrate = |c: &mut Connection, port: u16, args: &[&str]| -> String {
        let r: redis::RedisResult<String> = cmd("MIGRATE").arg("127.0.0.1").arg(port).arg(args).query(c);
        r.unwrap_or_else(|e| format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or("")))
    };
    // One key, then the rest with KEYS; COPY keeps the source.
    assert_eq!(migrate(&mut shale, redis_port, &["str:short", "0", "5000"]), "OK");
    assert_eq!(cmd("EXISTS").arg("str:short").query::<i64>(&mut shale).unwrap(), 0);
    let mut rest: Vec<String> = cmd("KEYS").arg("*").query(&mut shale).unwrap();
    rest.sort();
    let mut a = vec!["", "0", "5000", "COPY", "KEYS"];
    a.extend(rest.iter().map(String::as_str));
    a.push("no-such-key");
    assert_eq!(migrate(&mut shale, redis_port, &a), "OK");
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut shale).unwrap(), 15, "COPY leaves the keys");
    assert_eq!(contents(&mut redis), want, "what arrived equals what left, TTLs included");
    // The target's errors, Redis's words.
    assert_eq!(
        migrate(&mut shale, redis_port, &["list:small", "0", "5000"]),
        "ERR Target instance replied with error: BUSYKEY Target key name already exists."
    );
    assert_eq!(migrate(&mut shale, redis_port, &["list:small", "0", "5000", "REPLACE"]), "OK");
    assert_eq!(migrate(&mut shale, redis_port, &["gone", "0", "5000"]), "NOKEY");
    assert_eq!(migrate(&mut shale, redis_port, &["x", "0", "5000", "KEYS", "a"]).split(' ').next(), Some("ERR"));
    let closed = common::free_port();
    assert_eq!(
        migrate(&mut shale, closed, &["set:big", "0", "100"]),
        "IOERR error or timeout connecting to the client"
    );
    // And from Redis into Shale (Redis sends RESTORE … REPLACE).
    assert_eq!(migrate(&mut redis, server.port, &["hash:big", "0", "5000", "REPLACE"]), "OK");
    assert_eq!(cmd("HLEN").arg("hash:big").query::<i64>(&mut shale).unwrap(), 400);
    assert_eq!(cmd("EXISTS").arg("hash:big").query::<i64>(&mut redis).unwrap(), 0);
}
