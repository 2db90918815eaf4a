//! Lua scripting against real processes: scripts and functions answered as redis-server
//! answers them (side by side, error texts and script names included), the redis crate's
//! EVALSHA-then-EVAL locks, redis-py's `Lock` and a pipeline of its scripts, atomic
//! read-modify-write scripts under 20 concurrent clients
//! (declared keys and keys the script did not declare), busy scripts and SCRIPT KILL, and
//! function libraries that survive a restart and move with FUNCTION DUMP/RESTORE.

mod common;

use std::time::{Duration, Instant};

use common::{python_with_redis, start_redis, Server};
use redis::Value;

/// A reply reduced to something comparable.
fn outcome(r: redis::RedisResult<Value>) -> String {
    match r {
        Err(e) => format!("ERR {} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
        Ok(v) => format!("{v:?}"),
    }
}

fn run(c: &mut redis::Connection, args: &[&str]) -> String {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    outcome(cmd.query(c))
}

/// Scripts whose replies must equal Redis's, in order (they share keys).
const SCRIPTS: &[&[&str]] = &[
    &["eval", "return 'hello'", "0"],
    &["eval", "return {1, 2, 3, 'ciao', {1, 2}}", "0"],
    &["eval", "return 100.5", "0"],
    &["eval", "return -3.99", "0"],
    &["eval", "return true", "0"],
    &["eval", "return false", "0"],
    &["eval", "return nil", "0"],
    &["eval", "return {1, 2, nil, 4}", "0"],
    &["eval", "return {ok='fine'}", "0"],
    &["eval", "return {err='My Error'}", "0"],
    &["eval", "return redis.error_reply('My Error')", "0"],
    &["eval", "return redis.error_reply('-WRONG something')", "0"],
    &["eval", "return redis.status_reply('PONGISH')", "0"],
    &["eval", "return {KEYS[1], KEYS[2], ARGV[1], ARGV[2]}", "2", "a", "b", "c", "d"],
    &["eval", "return redis.call('set', KEYS[1], ARGV[1])", "1", "k1", "v1"],
    &["eval", "return redis.call('get', KEYS[1])", "1", "k1"],
    &["eval", "return redis.call('get', 'nosuchkey')", "0"],
    &["eval", "return type(redis.call('get', 'nosuchkey'))", "0"],
    &["eval", "redis.call('rpush', 'l', 'a', 'b', 'c'); return redis.call('lrange', 'l', 0, -1)", "0"],
    &["eval", "return redis.call('incrby', 'n', 41.0)", "0"],
    &["eval", "return redis.call('incr', 'n')", "0"],
    &["eval", "return redis.call('incrbyfloat', 'f', 0.1)", "0"],
    &["eval", "return redis.call('hset', 'h', 'f', 1.5)", "0"],
    &["eval", "return redis.call('hgetall', 'h')", "0"],
    &["eval", "return redis.call('ping')", "0"],
    &["eval", "return redis.call('type', 'l')", "0"],
    &["eval", "return redis.call('nosuchcommand')", "0"],
    &["eval", "return redis.call('get', 'a', 'b')", "0"],
    &["eval", "return redis.call('incr', 'k1')", "0"],
    &["eval", "return redis.pcall('incr', 'k1')", "0"],
    &["eval", "local t = redis.pcall('incr', 'k1') return t['err']", "0"],
    &["eval", "return {pcall(redis.call, 'incr', 'k1')}", "0"],
    &["eval", "return redis.call()", "0"],
    &["eval", "return redis.call('get', {})", "0"],
    &["eval", "return redis.call('eval', 'return 1', '0')", "0"],
    &["eval", "return redis.call('blpop', 'emptylist', 0)", "0"],
    &["eval", "return a", "0"],
    &["eval", "a = 10", "0"],
    &["eval", "redis.call = function() return 1 end", "0"],
    &["eval", "setmetatable(_G, {})", "0"],
    &["eval", "error('my own error')", "0"],
    &["eval", "error({err='TABLE error'})", "0"],
    &["eval", "local x = nil; return x.field", "0"],
    &["eval", "retur 1", "0"],
    &["eval", "return redis.sha1hex('')", "0"],
    &["eval", "return redis.sha1hex('Pizza & Mandolino')", "0"],
    &["eval", "return cjson.encode({1, 2, 'three', {a = 1.5}})", "0"],
    &["eval", "return cjson.encode({'a/b', '\\n', true, false})", "0"],
    &["eval", "return table.concat(cjson.decode('[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]'), ' ')", "0"],
    &["eval", "local d = cjson.decode('{\"keya\": \"a\", \"keyb\": \"b\"}') return {d.keya, d.keyb}", "0"],
    &["eval", "return cjson.decode('[1,')", "0"],
    &["eval", "return cjson.encode({[1] = 1, [100] = 2})", "0"],
    &["eval", "return tostring(cjson.decode('[null]')[1] == cjson.null)", "0"],
    &["eval", "local s = cmsgpack.pack({1, 2, 'x', {a = true}}, -3, 1.5, 0.1, 300, -40000, 2^40) return {string.byte(s, 1, -1)}", "0"],
    &["eval", "local t = {cmsgpack.unpack(cmsgpack.pack({1, {2, 3}}, 'hi', 70000.5))} return {t[1][2][2], t[2], tostring(t[3])}", "0"],
    &["eval", "return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 1)}", "0"],
    &["eval", "return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2)}", "0"],
    &["eval", "return {cmsgpack.unpack_one(cmsgpack.pack(1, 2), 1)}", "0"],
    &["eval", "return cmsgpack.unpack(string.char(0xcd, 1))", "0"],
    &["eval", "return cmsgpack.unpack(string.char(0xc1))", "0"],
    &["eval", "return cmsgpack.pack()", "0"],
    &["eval", "local t = {} t[1] = t return string.len(cmsgpack.pack(t))", "0"],
    &["eval", "return {string.byte(struct.pack('>!4 b i h', 1, -2, 3), 1, -1)}", "0"],
    &["eval", "return {struct.unpack('<i2 c0 s', struct.pack('<i2 c0 s', 3, 'abc', 'zz'))}", "0"],
    &["eval", "return {struct.unpack('HB', 'abc', 2)}", "0"],
    &["eval", "return struct.size('!8 b d i3')", "0"],
    &["eval", "return struct.pack('c5', 'ab')", "0"],
    &["eval", "return struct.unpack('i', 'ab')", "0"],
    &["eval", "return struct.pack('y')", "0"],
    &["eval", "return struct.size('s')", "0"],
    &["eval", "return struct.pack('i33', 1)", "0"],
    &["eval", "return struct.unpack('i', 'abcd', 0)", "0"],
    &["eval", "return bit.tohex(bit.band(0xff00, 0x0ff0)) .. bit.tobit(2^32 + 5)", "0"],
    &["eval", "return bit.band()", "0"],
    &["eval", "return {cjson.encode_invalid_numbers('null'), cjson.encode({1/0}), cjson.encode_invalid_numbers(true), cjson.encode({0/0, -1/0}), cjson.encode_invalid_numbers(false), cjson.encode_sparse_array(true, 3), cjson.encode({[1]=1,[40]=2}), cjson.encode_number_precision(3), cjson.encode(1/3)}", "0"],
    &["eval", "cjson.encode_sparse_array(false, 2, 10) cjson.encode_number_precision(14) return {cjson.decode('[0x10, -inf, 007, +1]')[1], cjson.decode_invalid_numbers(false), pcall(cjson.decode, '[0x10]')}", "0"],
    &["eval", "cjson.decode_invalid_numbers(true) return cjson.encode_max_depth(1, 2)", "0"],
    &["eval", "return loadstring(string.dump(function() return 1 end))()", "0"],
    &["eval", "local t = {} for k in pairs(_G) do t[#t + 1] = k end table.sort(t) return t", "0"],
    &["eval", "local t = {} for k in pairs(redis) do t[#t + 1] = k end table.sort(t) return t", "0"],
    &["eval", "redis = function() return 1 end", "0"],
    &["eval", "_G = {}", "0"],
    &["eval", "return getfenv(0)", "0"],
    &["eval", "return redis.call('cluster', 'reset')", "0"],
    &["eval", "local a = {} for i = 1, 7999 do a[i] = 1 end return redis.call('lpush', 'massive', unpack(a))", "0"],
    &["eval", "local m = {} for i = 1, 20000 do m['k' .. i] = i end return string.len(cmsgpack.pack(m))", "0"],
    &["eval", "return {bit.band(0xff, 0x0f), bit.bor(1, 2), bit.bxor(3, 1), bit.lshift(1, 4), bit.rshift(-1, 28), bit.arshift(-256, 4), bit.bnot(0)}", "0"],
    &["eval", "return {bit.tohex(65535), bit.tohex(-1, 2), bit.tohex(255, -4), bit.tobit(4294967295)}", "0"],
    &["eval", "math.randomseed(42); return tostring(math.random())", "0"],
    &["eval", "math.randomseed(42); return {math.random(10), math.random(5, 7)}", "0"],
    &["eval", "return redis.REDIS_VERSION_NUM > 0", "0"],
    &["eval", "return tostring(os)", "0"],
    &["eval", "return loadfile", "0"],
    &["eval", "redis.setresp(3); return redis.call('hgetall', 'h')", "0"],
    &["eval", "redis.setresp(3); local m = redis.call('hgetall', 'h') return m['map']['f']", "0"],
    &["eval", "redis.setresp(4)", "0"],
    &["eval", "redis.call('select', 9); redis.call('set', 'in9', 'x'); return redis.call('dbsize')", "0"],
    &["eval", "return redis.call('get', 'in9')", "0"],
    &["eval", "#!lua flags=no-writes\nreturn redis.call('get', 'k1')", "0"],
    &["eval", "#!lua flags=no-writes\nreturn redis.call('set', 'k1', 'x')", "0"],
    &["eval", "#!lua flags=bogus\nreturn 1", "0"],
    &["eval", "#!other\nreturn 1", "0"],
    &["eval_ro", "return redis.call('get', 'k1')", "1", "k1"],
    &["eval_ro", "return redis.call('del', 'k1')", "1", "k1"],
    &["eval", "return 1", "-1"],
    &["eval", "return 1", "3", "a"],
    &["eval", "return 1", "x"],
    &["evalsha", "ffd632c7d33e571e9f24556ebed26c3479a66d7a", "0"],
    &["evalsha", "FFD632C7D33E571E9F24556EBED26C3479A66D7A", "0"],
    &["evalsha", "abc", "0"],
    &["evalsha", "0000000000000000000000000000000000000000", "0"],
    &["script", "load", "return 'loaded'"],
    &["script", "exists", "ffd632c7d33e571e9f24556ebed26c3479a66d7a", "0000000000000000000000000000000000000000"],
    &["script", "load", "return 'broken"],
    &["script", "kill"],
    &["script", "flush", "bogus"],
    &["script", "flush"],
    &["script", "exists", "ffd632c7d33e571e9f24556ebed26c3479a66d7a"],
    &["function", "load", "#!lua name=lib1\nredis.register_function('f1', function(keys, args) return {keys[1], args[1]} end)"],
    &["fcall", "f1", "1", "key", "arg"],
    &["function", "load", "#!lua name=lib1\nredis.register_function('f1', function() return 1 end)"],
    &["function", "load", "replace", "#!lua name=lib1\nredis.register_function{function_name='f1', callback=function() return redis.call('set', 'fk', 'v') end, flags={'no-writes'}, description='a test'}"],
    &["fcall", "f1", "0"],
    &["fcall_ro", "f1", "0"],
    &["function", "list"],
    &["function", "list", "withcode", "libraryname", "lib*"],
    &["function", "load", "#!lua name=lib2\nredis.register_function('f1', function() return 1 end)"],
    &["function", "load", "#!lua name=lib3\nlocal x = string.len('a')"],
    &["function", "load", "#!lua name=lib3\nreturn 1"],
    &["function", "load", "#!lua name=lib3\nredis.register_function('bad name', function() end)"],
    &["function", "load", "#!lua name=lib3\nredis.register_function('g', 'x')"],
    &["function", "load", "#!lua name=lib3\nredis.register_function{function_name='g', callback=function() end, flags={'bogus'}}"],
    &["function", "load", "#!lua name=lib3\nredis.call('ping')"],
    &["function", "load", "no shebang"],
    &["function", "load", "#!lua name=lib3\nredis.register_function('g', function() return nope end)"],
    &["fcall", "g", "0"],
    &["fcall", "nosuchfunction", "0"],
    &["fcall", "g", "x"],
    &["function", "delete", "lib3"],
    &["function", "delete", "lib3"],
    &["function", "stats"],
    &["function", "kill"],
    &["function", "flush"],
    &["function", "list"],
];

#[test]
fn scripts_and_functions_answer_as_redis_does() {
    let Some((_redis, mut reference, _)) = start_redis() else { return };
    let server = Server::start(&[]);
    let mut c = server.client();
    for script in SCRIPTS {
        let expected = run(&mut reference, script);
        let got = run(&mut c, script);
        assert_eq!(got, expected, "{script:?}");
    }
}

#[test]
fn evalsha_then_eval_locks_as_client_libraries_use_them() {
    let server = Server::start(&[]);
    let mut c = server.client();
    // The shape of redis-py's Lock.release / extend and every other lock library.
    let release = redis::Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
    );
    let extend = redis::Script::new(
        "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end return redis.call('pexpire', KEYS[1], ARGV[2])",
    );
    let acquired: Option<String> =
        redis::cmd("SET").arg("lock").arg("token-a").arg("NX").arg("PX").arg(10_000).query(&mut c).unwrap();
    assert_eq!(acquired.as_deref(), Some("OK"));
    // Not cached yet: EVALSHA fails with NOSCRIPT and the crate falls back to EVAL.
    let extended: i64 = extend.key("lock").arg("token-a").arg(60_000).invoke(&mut c).unwrap();
    assert_eq!(extended, 1);
    let ttl: i64 = redis::cmd("PTTL").arg("lock").query(&mut c).unwrap();
    assert!(ttl > 10_000, "{ttl}");
    let wrong: i64 = release.key("lock").arg("token-b").invoke(&mut c).unwrap();
    assert_eq!(wrong, 0, "another owner's token releases nothing");
    let released: i64 = release.key("lock").arg("token-a").invoke(&mut c).unwrap();
    assert_eq!(released, 1);
    let exists: i64 = redis::cmd("EXISTS").arg("lock").query(&mut c).unwrap();
    assert_eq!(exists, 0);
    // Pipelined EVALSHAs of a cached script.
    let sha = release.get_hash();
    let mut pipe = redis::pipe();
    for i in 0..50 {
        pipe.cmd("EVALSHA").arg(sha).arg(1).arg(format!("l{i}")).arg("t");
    }
    let replies: Vec<i64> = pipe.query(&mut c).unwrap();
    assert_eq!(replies, vec![0; 50]);
}

/// redis-py's `Lock` (Debian's python3-redis), whose every step but the first is a Lua script
/// sent by EVALSHA (loaded on NOSCRIPT): acquire, a second owner refused, extend, reacquire,
/// a release by the wrong owner refused, release, acquire again; then 100 EVALSHAs in one
/// pipeline after SCRIPT FLUSH (redis-py sends SCRIPT EXISTS and SCRIPT LOAD first).
#[test]
fn redis_py_locks_and_a_pipeline_of_its_scripts_work() {
    let Some(python) = python_with_redis() else { return };
    let server = Server::start(&[]);
    let program = r#"
import sys, redis
from redis.exceptions import LockNotOwnedError
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]), socket_timeout=20)
lock = r.lock("resource", timeout=10)
assert lock.acquire(blocking=False)
other = r.lock("resource", timeout=10)
assert not other.acquire(blocking=False), "a held lock is acquired twice"
assert lock.extend(5)
ttl = r.pttl("resource")
assert 14000 < ttl <= 15000, ttl
assert lock.reacquire()
ttl = r.pttl("resource")
assert 9000 < ttl <= 10000, ttl
assert lock.owned() and not other.owned()
try:
    other.do_release(b"not-the-token")
    raise AssertionError("a lock was released by a token that does not own it")
except LockNotOwnedError:
    pass
lock.release()
assert r.get("resource") is None
assert other.acquire(blocking=False)
other.release()
incr = r.register_script("return redis.call('incr', KEYS[1])")
r.script_flush()
with r.pipeline() as p:
    for _ in range(100):
        incr(keys=["n"], client=p)
    replies = p.execute()
assert replies == list(range(1, 101)), replies
print("ok")
"#;
    let out = std::process::Command::new(python)
        .args(["-c", program, &server.port.to_string()])
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim() == "ok",
        "redis-py: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// 20 clients run read-modify-write scripts (GET then SET, which only isolation makes exact)
/// on one counter, half of them naming it as a declared key and half reaching it without
/// declaring it, while plain INCRs hit it too.
#[test]
fn concurrent_scripts_are_isolated_and_atomic() {
    let server = Server::start(&[]);
    let declared = "local v = redis.call('get', KEYS[1]) redis.call('set', KEYS[1], (tonumber(v) or 0) + 1) return 1";
    let undeclared =
        "local v = redis.call('get', 'counter') redis.call('set', 'counter', (tonumber(v) or 0) + 1) return 1";
    let rounds = 150;
    let threads: Vec<_> = (0..20)
        .map(|i| {
            let mut c = server.client();
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    let script = if i % 2 == 0 { declared } else { undeclared };
                    let keys = if i % 2 == 0 { 1 } else { 0 };
                    let mut cmd = redis::cmd("EVAL");
                    cmd.arg(script).arg(keys);
                    if keys == 1 {
                        cmd.arg("counter");
                    }
                    let r: i64 = cmd.query(&mut c).unwrap();
                    assert_eq!(r, 1);
                    if i < 4 {
                        let _: i64 = redis::cmd("INCR").arg("counter").query(&mut c).unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut c = server.client();
    let total: i64 = redis::cmd("GET").arg("counter").query(&mut c).unwrap();
    assert_eq!(total, 20 * rounds + 4 * rounds);
}

/// 8 clients send pipelines of scripts (which keep the VM from one script to the next) mixed
/// with plain commands and SCRIPT LOAD (which need it let go), half of them declaring the
/// shared counter and half reaching it undeclared, so the scripts' stripes are busy under one
/// another: no pipeline stalls (each client's reads time out after 20 s) and the count is exact.
#[test]
fn pipelined_scripts_keep_the_vm_without_deadlock_or_lost_updates() {
    let server = Server::start(&[]);
    let declared = "local v = redis.call('get', KEYS[1]) redis.call('set', KEYS[1], (tonumber(v) or 0) + 1) return 1";
    let undeclared =
        "local v = redis.call('get', 'counter') redis.call('set', 'counter', (tonumber(v) or 0) + 1) return 1";
    let mut c = server.client();
    let sha_declared: String = redis::cmd("SCRIPT").arg("LOAD").arg(declared).query(&mut c).unwrap();
    let sha_undeclared: String = redis::cmd("SCRIPT").arg("LOAD").arg(undeclared).query(&mut c).unwrap();
    let (rounds, depth): (i64, usize) = (40, 16);
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let mut c = server.client();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let (sha_declared, sha_undeclared) = (sha_declared.clone(), sha_undeclared.clone());
            std::thread::spawn(move || {
                for round in 0..rounds {
                    let mut pipe = redis::pipe();
                    for j in 0..depth {
                        if (i + j) % 2 == 0 {
                            pipe.cmd("EVALSHA").arg(&sha_declared).arg(1).arg("counter");
                        } else {
                            pipe.cmd("EVALSHA").arg(&sha_undeclared).arg(0);
                        }
                        if j == depth / 2 {
                            // Not a script: the VM must be let go before it runs.
                            if round % 2 == 0 {
                                pipe.cmd("INCR").arg("counter");
                            } else {
                                pipe.cmd("SCRIPT").arg("LOAD").arg(declared).ignore();
                            }
                        }
                    }
                    let replies: Vec<Value> = pipe.query(&mut c).unwrap();
                    assert!(replies.iter().all(|r| matches!(r, Value::Int(_))), "{replies:?}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let total: i64 = redis::cmd("GET").arg("counter").query(&mut c).unwrap();
    assert_eq!(total, 8 * rounds * depth as i64 + 8 * rounds / 2);
}

#[test]
fn a_script_writes_all_or_nothing() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let r = run(&mut c, &["eval", "redis.call('set', 'a', 1) redis.call('set', 'b', 2) error('stop')", "0"]);
    assert!(r.contains("stop"), "{r}");
    // Redis keeps the writes made before the error; so does Shale (one batch at the end).
    assert_eq!(run(&mut c, &["mget", "a", "b"]), run(&mut c, &["eval", "return {'1', '2'}", "0"]));
    let keys: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(keys, 2);
}

/// A script that reads a key, waits until well past its TTL (by TIME, the real clock) and
/// reads it again gets its value both times: lookups in a script judge expiry by the time it
/// started, as in Redis 7.0. Checked against redis-server too when it is installed.
#[test]
fn a_key_that_expires_while_a_script_runs_stays_live_to_the_script() {
    const SCRIPT: &str = "local before = redis.call('get', KEYS[1]) \
        local t = redis.call('time') local start = t[1] * 1000000 + t[2] \
        repeat t = redis.call('time') until t[1] * 1000000 + t[2] - start > 400000 \
        return {before, redis.call('get', KEYS[1]), redis.call('exists', KEYS[1])}";
    let server = Server::start(&[]);
    let mut clients = vec![server.client()];
    let _reference = start_redis().map(|(redis, c, _)| {
        clients.push(c);
        redis
    });
    for c in &mut clients {
        let _: () = redis::cmd("SET").arg("soon").arg("v").arg("PX").arg(200).query(c).unwrap();
        let r: (Option<String>, Option<String>, i64) =
            redis::cmd("EVAL").arg(SCRIPT).arg(1).arg("soon").query(c).unwrap();
        assert_eq!(r, (Some("v".into()), Some("v".into()), 1));
        // After the script, the key is gone.
        let left: i64 = redis::cmd("EXISTS").arg("soon").query(c).unwrap();
        assert_eq!(left, 0);
    }
}

#[test]
fn a_busy_script_answers_others_busy_and_can_be_killed() {
    let server = Server::start(&[]);
    let mut admin = server.client();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("busy-reply-threshold").arg(100).query(&mut admin).unwrap();
    let mut runner = server.client();
    let looping =
        std::thread::spawn(move || run(&mut runner, &["eval", "local i = 0 while true do i = i + 1 end", "0"]));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = run(&mut admin, &["ping"]);
        if r.contains("BUSY") {
            assert!(r.contains("SCRIPT KILL"), "{r}");
            break;
        }
        assert!(Instant::now() < deadline, "no BUSY reply: {r}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let wrong_kind = run(&mut admin, &["function", "kill"]);
    assert!(wrong_kind.contains("BUSY"), "{wrong_kind}");
    assert_eq!(run(&mut admin, &["script", "kill"]), "ok");
    let killed = looping.join().unwrap();
    assert!(killed.contains("Script killed by user with SCRIPT KILL"), "{killed}");
    assert_eq!(run(&mut admin, &["ping"]), "simple-string(\"PONG\")");
    assert!(run(&mut admin, &["script", "kill"]).contains("NOTBUSY"));

    // A script that wrote cannot be killed; it finishes on its own.
    let mut writer = server.client();
    let busy_writer = std::thread::spawn(move || {
        run(
            &mut writer,
            &["eval", "redis.call('set', 'w', 1) local t = redis.call('time') local s = tonumber(t[1]) while tonumber(redis.call('time')[1]) < s + 2 do end return 'done'", "0"],
        )
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = run(&mut admin, &["script", "kill"]);
        if r.contains("UNKILLABLE") {
            break;
        }
        assert!(Instant::now() < deadline, "no UNKILLABLE reply: {r}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(busy_writer.join().unwrap().contains("done"));

    // A kill is not swallowed by a pcall that catches it: it is raised again at once.
    let mut catcher = server.client();
    let catching = std::thread::spawn(move || {
        run(
            &mut catcher,
            &["eval", "local f = function() while 1 do redis.call('ping') end end while 1 do pcall(f) end", "0"],
        )
    });
    wait_for_busy(&mut admin);
    assert_eq!(run(&mut admin, &["script", "kill"]), "ok");
    assert!(catching.join().unwrap().contains("killed by user"));

    // SIGTERM stops a server whose script never ends.
    let mut server = server;
    let mut looper = server.client();
    let _forever =
        std::thread::spawn(move || run(&mut looper, &["eval", "redis.call('set', 'x', 1) while true do end", "0"]));
    wait_for_busy(&mut admin);
    assert!(server.terminate().success(), "a clean exit");
}

/// Waits (bounded) until `c` gets BUSY replies.
fn wait_for_busy(c: &mut redis::Connection) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !run(c, &["ping"]).contains("BUSY") {
        assert!(Instant::now() < deadline, "no BUSY reply");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn functions_survive_a_restart_and_move_by_dump_and_restore() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("#!lua name=counters\nredis.register_function('bump', function(keys) return redis.call('incr', keys[1]) end)")
        .query(&mut c)
        .unwrap();
    assert_eq!(name, "counters");
    let n: i64 = redis::cmd("FCALL").arg("bump").arg(1).arg("c").query(&mut c).unwrap();
    assert_eq!(n, 1);
    let payload: Vec<u8> = redis::cmd("FUNCTION").arg("DUMP").query(&mut c).unwrap();
    drop(c);
    let server = server.restart(&[]);
    let mut c = server.client();
    let n: i64 = redis::cmd("FCALL").arg("bump").arg(1).arg("c").query(&mut c).unwrap();
    assert_eq!(n, 2, "the library was loaded again at start");

    // The payload restores into a fresh server, and into Redis (same format).
    let other = Server::start(&[]);
    let mut o = other.client();
    let _: () = redis::cmd("FUNCTION").arg("RESTORE").arg(&payload).query(&mut o).unwrap();
    let n: i64 = redis::cmd("FCALL").arg("bump").arg(1).arg("x").query(&mut o).unwrap();
    assert_eq!(n, 1);
    let again = run(&mut o, &["function", "restore", "x"]);
    assert!(again.contains("payload version or checksum are wrong"), "{again}");
    let mut restore = redis::cmd("FUNCTION");
    restore.arg("RESTORE").arg(&payload);
    assert!(outcome(restore.query(&mut o)).contains("Library counters already exists"));
    if let Some((_redis, mut reference, _)) = start_redis() {
        let _: () = redis::cmd("FUNCTION").arg("RESTORE").arg(&payload).query(&mut reference).unwrap();
        assert_eq!(
            run(&mut reference, &["function", "list", "withcode"]),
            run(&mut o, &["function", "list", "withcode"])
        );
        // …and Redis's own payload restores here.
        let theirs: Vec<u8> = redis::cmd("FUNCTION").arg("DUMP").query(&mut reference).unwrap();
        let mut restore = redis::cmd("FUNCTION");
        restore.arg("RESTORE").arg(&theirs).arg("REPLACE");
        assert_eq!(outcome(restore.query(&mut o)), "ok");
    }
}
