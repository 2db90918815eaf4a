//! CONFIG, CLIENT, SHUTDOWN, SAVE/LASTSAVE and the idle timeout against a real `shale-server`.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{roundtrip, Server};
use redis::cmd;

fn config_get(c: &mut redis::Connection, pattern: &str) -> HashMap<String, String> {
    cmd("CONFIG").arg("GET").arg(pattern).query(c).unwrap()
}

fn err(r: redis::RedisResult<redis::Value>) -> String {
    let e = r.unwrap_err();
    format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
}

#[test]
fn config_get_and_set_cover_every_redis_parameter() {
    let server = Server::start(&["--hash-max-ziplist-entries", "64", "--save", "900 1"]);
    let mut c = server.client();
    let all = config_get(&mut c, "*");
    assert!(all.len() > 190, "the full Redis 7 list with aliases, got {}", all.len());
    for name in ["save", "appendonly", "list-max-listpack-size", "set-max-intset-entries", "zset-max-listpack-entries"]
    {
        assert!(all.contains_key(name), "{name}");
    }
    assert_eq!(all["hash-max-listpack-entries"], "64", "the alias set the canonical parameter");
    // Redis's hidden parameters answer only when named.
    assert!(!all.contains_key("key-load-delay"));
    assert_eq!(config_get(&mut c, "key-load-delay")["key-load-delay"], "0");
    assert_eq!(all["save"], "900 1");
    assert_eq!(all["port"], server.port.to_string());
    let some = config_get(&mut c, "*max-*-entries*");
    assert!(some.contains_key("hash-max-ziplist-entries") && some.contains_key("set-max-intset-entries"));
    assert_eq!(config_get(&mut c, "MAXMEMORY"), HashMap::from([("MAXMEMORY".to_string(), "0".to_string())]));
    assert!(config_get(&mut c, "no-such-parameter").is_empty());

    let ok: String = cmd("CONFIG")
        .arg("SET")
        .arg("active-defrag-ignore-bytes")
        .arg("1mb")
        .arg("lfu-log-factor")
        .arg("7")
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    assert_eq!(config_get(&mut c, "active-defrag-ignore-bytes")["active-defrag-ignore-bytes"], "1048576");
    assert_eq!(config_get(&mut c, "lfu-log-factor")["lfu-log-factor"], "7");
    let refused =
        cmd("CONFIG").arg("SET").arg("notify-keyspace-events").arg("KEq").query::<String>(&mut c).unwrap_err();
    assert!(refused.to_string().contains("Invalid event class character. Use 'Ag$lshzxeKEtmdn'."), "{refused}");
    assert_eq!(cmd("CONFIG").arg("SET").arg("maxmemory").arg("0").query::<String>(&mut c).unwrap(), "OK");
    let cases = [
        (vec!["foo", "bar"], "ERR Unknown option or number of arguments for CONFIG SET - 'foo'"),
        (
            vec!["appendonly", "maybe"],
            "ERR CONFIG SET failed (possibly related to argument 'appendonly') - argument must be 'yes' or 'no'",
        ),
        (
            vec!["databases", "5"],
            "ERR CONFIG SET failed (possibly related to argument 'databases') - can't set immutable config",
        ),
        (vec!["hz", "5", "hz", "6"], "ERR CONFIG SET failed (possibly related to argument 'hz') - duplicate parameter"),
        (
            vec!["maxclients", "0"],
            "ERR CONFIG SET failed (possibly related to argument 'maxclients') - argument must be between 1 and 4294967295 inclusive",
        ),
    ];
    for (args, want) in cases {
        assert_eq!(err(cmd("CONFIG").arg("SET").arg(&args).query(&mut c)), want, "{args:?}");
    }
    // All or nothing: a bad pair leaves the good one unapplied.
    let _ = err(cmd("CONFIG").arg("SET").arg("hz").arg("7").arg("appendonly").arg("maybe").query(&mut c));
    assert_eq!(config_get(&mut c, "hz")["hz"], "10");
    assert_eq!(err(cmd("CONFIG").arg("REWRITE").query(&mut c)), "ERR The server is running without a config file");
}

#[test]
fn runtime_settings_take_effect() {
    let server = Server::start(&[]);
    let mut c = server.client();
    // appendfsync always: every write is fsynced before its reply, and writes keep working.
    cmd("CONFIG").arg("SET").arg("appendfsync").arg("always").query::<()>(&mut c).unwrap();
    cmd("SET").arg("k").arg("v").query::<()>(&mut c).unwrap();
    cmd("CONFIG").arg("SET").arg("appendfsync").arg("everysec").query::<()>(&mut c).unwrap();
    cmd("CONFIG").arg("SET").arg("loglevel").arg("debug").query::<()>(&mut c).unwrap();
    // A password set at runtime applies to new connections and to AUTH.
    cmd("CONFIG").arg("SET").arg("requirepass").arg("pw").query::<()>(&mut c).unwrap();
    let mut fresh = server.raw();
    assert_eq!(roundtrip(&mut fresh, b"GET k\r\n", 34), b"-NOAUTH Authentication required.\r\n");
    assert_eq!(roundtrip(&mut fresh, b"AUTH pw\r\nGET k\r\n", 12), b"+OK\r\n$1\r\nv\r\n");
    // CONFIG RESETSTAT zeroes the counters INFO shows.
    cmd("CONFIG").arg("RESETSTAT").query::<()>(&mut c).unwrap();
    let info: String = cmd("INFO").arg("stats").query(&mut c).unwrap();
    assert!(info.contains("total_commands_processed:1\r\n"), "{info}");
    // proto-max-bulk-len applies to connections already open.
    cmd("CONFIG").arg("SET").arg("proto-max-bulk-len").arg("1mb").query::<()>(&mut c).unwrap();
    let mut s = server.raw();
    let reply = roundtrip(&mut s, b"AUTH pw\r\n*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000\r\n", 60);
    assert!(String::from_utf8_lossy(&reply).contains("-ERR Protocol error: invalid bulk length"), "{reply:?}");
}

/// `jemalloc-bg-thread` (on by default, as in Redis) switches jemalloc's background threads,
/// which hand freed pages back to the OS while the server is idle; jemalloc's own statistics
/// say whether they run.
#[test]
fn jemalloc_background_threads_follow_the_setting() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let running = |c: &mut redis::Connection| {
        let stats: String = cmd("MEMORY").arg("MALLOC-STATS").query(c).unwrap();
        let on = stats.contains("(background_thread: true)");
        assert!(on || stats.contains("(background_thread: false)"), "{}", &stats[..stats.len().min(2000)]);
        on
    };
    assert!(running(&mut c), "on from the start");
    cmd("CONFIG").arg("SET").arg("jemalloc-bg-thread").arg("no").query::<()>(&mut c).unwrap();
    assert!(!running(&mut c));
    cmd("CONFIG").arg("SET").arg("jemalloc-bg-thread").arg("yes").query::<()>(&mut c).unwrap();
    assert!(running(&mut c));
    drop(server);
    let server = Server::start(&["--jemalloc-bg-thread", "no"]);
    assert!(!running(&mut server.client()), "off from the command line");
}

#[test]
fn config_rewrite_keeps_the_file_and_survives_a_restart() {
    let server = Server::start_with_config("# my settings\nhz 20\n\nsave 900 1\n", &[]);
    let mut c = server.client();
    cmd("CONFIG")
        .arg("SET")
        .arg("hz")
        .arg("15")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query::<()>(&mut c)
        .unwrap();
    cmd("CONFIG").arg("REWRITE").query::<()>(&mut c).unwrap();
    let text = std::fs::read_to_string(server.dir.path().join("shale.conf")).unwrap();
    assert!(text.starts_with("# my settings\nhz 15\n\nsave 900 1\n"), "{text}");
    assert!(
        text.contains("# Generated by CONFIG REWRITE\n") && text.contains("maxmemory-policy allkeys-lru\n"),
        "{text}"
    );
    let server = server.restart(&[]);
    let mut c = server.client();
    assert_eq!(config_get(&mut c, "hz")["hz"], "15");
    assert_eq!(config_get(&mut c, "maxmemory-policy")["maxmemory-policy"], "allkeys-lru");
}

#[test]
fn client_list_kill_and_reply_modes() {
    let server = Server::start(&[]);
    let mut admin = server.client();
    let mut victim = server.client();
    cmd("CLIENT").arg("SETNAME").arg("victim").query::<()>(&mut victim).unwrap();
    cmd("CLIENT").arg("SETINFO").arg("LIB-NAME").arg("tester").query::<()>(&mut victim).unwrap();
    cmd("SELECT").arg(3).query::<()>(&mut victim).unwrap();
    let victim_id: i64 = cmd("CLIENT").arg("ID").query(&mut victim).unwrap();
    let list: String = cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
    let line = list.lines().find(|l| l.contains("name=victim")).expect(&list);
    assert!(line.starts_with(&format!("id={victim_id} addr=127.0.0.1:")), "{line}");
    assert!(line.contains(" db=3 ") && line.contains(" cmd=client|id ") && line.contains("lib-name=tester"), "{line}");
    let mine: String = cmd("CLIENT").arg("INFO").query(&mut admin).unwrap();
    assert!(mine.contains(" name= ") && mine.ends_with('\n'), "{mine}");
    let only: String = cmd("CLIENT").arg("LIST").arg("ID").arg(victim_id).query(&mut admin).unwrap();
    assert_eq!(only.lines().count(), 1);

    let killed: i64 = cmd("CLIENT").arg("KILL").arg("ID").arg(victim_id).query(&mut admin).unwrap();
    assert_eq!(killed, 1);
    assert!(cmd("PING").query::<String>(&mut victim).is_err(), "the killed connection is closed");
    assert_eq!(cmd("CLIENT").arg("KILL").arg("ID").arg(victim_id).query::<i64>(&mut admin).unwrap(), 0);
    assert_eq!(err(cmd("CLIENT").arg("KILL").arg("1.2.3.4:5").query(&mut admin)), "ERR No such client");
    // SKIPME no kills the caller too, after its reply (as in Redis).
    let mut me = server.raw();
    let got = roundtrip(&mut me, b"CLIENT KILL SKIPME no\r\nPING\r\n", 64);
    assert!(got.starts_with(b":") && !got.ends_with(b"+PONG\r\n"), "{}", String::from_utf8_lossy(&got));

    // A client killed while it waits (blocked in BLPOP, or between requests after a blocked
    // wait ended) is closed at once: every wait of the connection sees the kill.
    let mut admin = server.client();
    for blocked in [true, false] {
        let mut waiter = server.raw();
        let mut id = roundtrip(&mut waiter, b"CLIENT ID\r\n", 3);
        while !id.ends_with(b"\r\n") {
            id.extend(roundtrip(&mut waiter, b"", 1));
        }
        let id = String::from_utf8_lossy(&id[1..]).trim().to_string();
        assert_eq!(roundtrip(&mut waiter, b"BLPOP kill:list 0.01\r\n", 5), b"*-1\r\n");
        if blocked {
            std::io::Write::write_all(&mut waiter, b"BLPOP kill:list 0\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
        let killed: i64 = cmd("CLIENT").arg("KILL").arg("ID").arg(&id).query(&mut admin).unwrap();
        assert_eq!(killed, 1, "blocked: {blocked}");
        waiter.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 16];
        let n = std::io::Read::read(&mut waiter, &mut buf).expect("closed, not timed out");
        assert_eq!(n, 0, "blocked: {blocked}: closed without a reply");
    }

    // CLIENT REPLY: OFF and SKIP answer nothing, ON answers +OK.
    let mut s = server.raw();
    let got = roundtrip(
        &mut s,
        b"CLIENT REPLY SKIP\r\nSET a 1\r\nGET a\r\nCLIENT REPLY OFF\r\nGET a\r\nCLIENT REPLY ON\r\nGET a\r\n",
        19,
    );
    assert_eq!(got, b"$1\r\n1\r\n+OK\r\n$1\r\n1\r\n");
}

#[test]
fn client_pause_write_holds_writes_but_not_reads() {
    let server = Server::start(&[]);
    let mut admin = server.client();
    let mut other = server.client();
    cmd("SET").arg("k").arg("before").query::<()>(&mut other).unwrap();
    cmd("CLIENT").arg("PAUSE").arg(400).arg("WRITE").query::<()>(&mut admin).unwrap();
    let t = Instant::now();
    assert_eq!(cmd("GET").arg("k").query::<String>(&mut other).unwrap(), "before");
    assert!(t.elapsed() < Duration::from_millis(300), "reads are not paused");
    cmd("SET").arg("k").arg("after").query::<()>(&mut other).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(350), "the write waited for the pause: {:?}", t.elapsed());
    cmd("CLIENT").arg("PAUSE").arg(10_000).query::<()>(&mut admin).unwrap();
    cmd("CLIENT").arg("UNPAUSE").query::<()>(&mut admin).unwrap();
    assert_eq!(cmd("GET").arg("k").query::<String>(&mut other).unwrap(), "after");
}

fn info_field(c: &mut redis::Connection, field: &str) -> i64 {
    let info: String = cmd("INFO").query(c).unwrap();
    let line = info.lines().find_map(|l| l.strip_prefix(&format!("{field}:"))).unwrap_or_else(|| panic!("{field}"));
    line.trim().parse().unwrap()
}

/// `CLIENT PAUSE WRITE` holds back what Redis calls "may replicate": writes, PUBLISH, PFCOUNT,
/// scripts that may write and EXEC of a transaction that queued one; held clients count in
/// `blocked_clients`; read-only scripts and requests with arity errors are answered at once;
/// an unpause releases the held clients at once.
#[test]
fn client_pause_write_holds_may_replicate_commands_and_counts_them_as_blocked() {
    use std::io::{Read, Write};
    let server = Server::start(&[]);
    let mut admin = server.client();
    cmd("CLIENT").arg("PAUSE").arg(60_000).arg("WRITE").query::<()>(&mut admin).unwrap();
    let held_requests: [&[u8]; 4] =
        [b"PUBLISH ch m\r\n", b"EVAL \"return 1\" 0\r\n", b"PFCOUNT hll\r\n", b"MULTI\r\nSET k v\r\nEXEC\r\n"];
    let mut held: Vec<std::net::TcpStream> = held_requests
        .iter()
        .map(|req| {
            let mut c = server.raw();
            c.write_all(req).unwrap();
            c
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(&mut admin, "blocked_clients") < held.len() as i64 {
        assert!(Instant::now() < deadline, "the held clients are counted as blocked");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut other = server.client();
    let ro: i64 = cmd("EVAL").arg("#!lua flags=no-writes\nreturn 2").arg(0).query(&mut other).unwrap();
    assert_eq!(ro, 2, "a read-only script runs during the pause");
    let arity = cmd("SET").arg("k").query::<()>(&mut other).unwrap_err();
    assert!(arity.to_string().contains("wrong number of arguments"), "{arity}");
    // MULTI is not a write: its +OK came back; SET was held before it was even queued.
    let mut first = [0u8; 5];
    held[3].read_exact(&mut first).unwrap();
    assert_eq!(&first, b"+OK\r\n");

    let unpaused = Instant::now();
    cmd("CLIENT").arg("UNPAUSE").query::<()>(&mut admin).unwrap();
    let expected: [&[u8]; 4] = [b":0\r\n", b":1\r\n", b":0\r\n", b"+QUEUED\r\n*1\r\n+OK\r\n"];
    for (c, want) in held.iter_mut().zip(expected) {
        let mut got = vec![0u8; want.len()];
        c.read_exact(&mut got).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
    }
    assert!(unpaused.elapsed() < Duration::from_secs(5), "released by the unpause, not the timeout");
    assert_eq!(info_field(&mut admin, "blocked_clients"), 0);
}

/// A read that finds an expired key deletes it before replying (`expired_keys` counts it at
/// once, as in Redis), except during a pause, which must leave the dataset as it is.
#[test]
fn lazy_expiry_deletes_on_access_except_during_a_pause() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let before = info_field(&mut c, "expired_keys");
    // The pause starts at the end of the transaction, before the active cycle can see the keys.
    cmd("MULTI").query::<()>(&mut c).unwrap();
    cmd("SET").arg("a").arg("1").arg("PX").arg(1).query::<()>(&mut c).unwrap();
    cmd("SET").arg("b").arg("1").arg("PX").arg(1).query::<()>(&mut c).unwrap();
    cmd("CLIENT").arg("PAUSE").arg(60_000).arg("WRITE").query::<()>(&mut c).unwrap();
    cmd("EXEC").query::<()>(&mut c).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(cmd("GET").arg("a").query::<Option<String>>(&mut c).unwrap(), None, "expired keys read as missing");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(info_field(&mut c, "expired_keys"), before, "nothing is deleted during a pause");
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 2, "both keys are still stored");
    cmd("CLIENT").arg("UNPAUSE").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("GET").arg("a").query::<Option<String>>(&mut c).unwrap(), None);
    assert_eq!(cmd("EXISTS").arg("b").query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(info_field(&mut c, "expired_keys"), before + 2, "both deleted on access");
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 0);
}

#[test]
fn shutdown_save_lastsave_and_idle_timeout() {
    let mut server = Server::start(&["--timeout", "1"]);
    let mut c = server.client();
    cmd("SET").arg("durable").arg("yes").query::<()>(&mut c).unwrap();
    let before: i64 = cmd("LASTSAVE").query(&mut c).unwrap();
    assert_eq!(cmd("SAVE").query::<String>(&mut c).unwrap(), "OK");
    assert!(cmd("LASTSAVE").query::<i64>(&mut c).unwrap() >= before);
    let info: String = cmd("INFO").arg("lsm").query(&mut c).unwrap();
    assert!(!info.contains("lsm_l0_files:0\r\n"), "SAVE flushed the memtable into a table: {info}");

    // An idle client is closed after `timeout` seconds; an active one is not.
    let mut idle = server.raw();
    assert_eq!(roundtrip(&mut idle, b"PING\r\n", 7), b"+PONG\r\n");
    std::thread::sleep(Duration::from_millis(1600));
    assert!(roundtrip(&mut idle, b"PING\r\n", 7).is_empty(), "the idle connection was closed");

    let mut s = server.raw();
    assert!(roundtrip(&mut s, b"SHUTDOWN\r\n", 1).is_empty(), "SHUTDOWN closes without a reply");
    assert!(server.wait_exit().success(), "SHUTDOWN exits 0");
    let server = Server::start_in(std::mem::replace(&mut server.dir, tempfile::tempdir().unwrap()), None, &[]);
    let mut c = server.client();
    assert_eq!(cmd("GET").arg("durable").query::<String>(&mut c).unwrap(), "yes");
}

#[test]
fn reset_memory_function_debug_bgsave_and_command() {
    let server = Server::start(&["--requirepass", "pw", "--enable-debug-command", "yes"]);
    let mut s = server.raw();
    let want = "+OK\r\n+OK\r\n+OK\r\n+RESET\r\n-NOAUTH Authentication required.\r\n";
    let got = roundtrip(&mut s, b"AUTH pw\r\nSELECT 2\r\nCLIENT SETNAME n\r\nRESET\r\nGET k\r\n", want.len());
    assert_eq!(String::from_utf8_lossy(&got), want, "RESET drops authentication when a password is required");
    let mut c =
        redis::Client::open(format!("redis://:pw@127.0.0.1:{}/", server.port)).unwrap().get_connection().unwrap();
    cmd("SET").arg("k").arg("hello").query::<()>(&mut c).unwrap();
    let usage: i64 = cmd("MEMORY").arg("USAGE").arg("k").query(&mut c).unwrap();
    assert!(usage > 5, "{usage}");
    assert_eq!(cmd("MEMORY").arg("USAGE").arg("nokey").query::<redis::Value>(&mut c).unwrap(), redis::Value::Nil);
    assert_eq!(cmd("FUNCTION").arg("LIST").query::<Vec<String>>(&mut c).unwrap(), Vec::<String>::new());
    assert_eq!(cmd("FUNCTION").arg("FLUSH").query::<String>(&mut c).unwrap(), "OK");
    let t = Instant::now();
    assert_eq!(cmd("DEBUG").arg("SLEEP").arg("0.2").query::<String>(&mut c).unwrap(), "OK");
    assert!(t.elapsed() >= Duration::from_millis(190));
    assert_eq!(cmd("BGSAVE").query::<String>(&mut c).unwrap(), "Background saving started");
    let count: i64 = cmd("COMMAND").arg("COUNT").query(&mut c).unwrap();
    let list: Vec<String> = cmd("COMMAND").arg("LIST").query(&mut c).unwrap();
    // LIST names subcommands too (`config|get`), as in Redis 7; COUNT counts commands.
    assert_eq!(count as usize, list.iter().filter(|n| !n.contains('|')).count());
    assert!(list.iter().any(|n| n == "config|get"), "{list:?}");
    assert!(list.iter().any(|n| n == "lcs") && list.iter().any(|n| n == "swapdb"), "{list:?}");
    let info: redis::Value = cmd("COMMAND").arg("INFO").arg("get").arg("nosuch").query(&mut c).unwrap();
    let redis::Value::Array(entries) = info else { panic!("{info:?}") };
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1], redis::Value::Nil);
    let redis::Value::Array(get) = &entries[0] else { panic!() };
    assert_eq!((&get[0], &get[1]), (&redis::Value::BulkString(b"get".to_vec()), &redis::Value::Int(2)));
}

#[test]
fn unsupported_directives_stop_startup_and_supervision_works() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for (directive, value, says) in [
        ("daemonize", "yes", "supervisor"),
        ("unixsocket", "/tmp/shale.sock", "unix sockets"),
        ("replica-read-only", "no", "no writes of its own"),
        ("replicaof", "127.0.0.1 0", "Invalid master port"),
    ] {
        let log =
            common::refused_start(&["--port", "0", "--dir", data.to_str().unwrap(), &format!("--{directive}"), value]);
        assert!(log.contains(says), "{directive}: {log}");
    }
    // pidfile and `supervised systemd`: READY=1 on $NOTIFY_SOCKET once listening.
    let notify = dir.path().join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
    socket.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    let pidfile = dir.path().join("shale.pid");
    let port = common::free_port().to_string();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_shale-server"))
        .args(["--port", &port, "--dir", data.to_str().unwrap(), "--supervised", "systemd"])
        .args(["--pidfile", pidfile.to_str().unwrap()])
        .env("NOTIFY_SOCKET", &notify)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 64];
    let n = socket.recv(&mut buf).expect("READY=1 from the server");
    assert_eq!(&buf[..n], b"READY=1\n");
    assert_eq!(std::fs::read_to_string(&pidfile).unwrap().trim(), child.id().to_string());
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
    assert_eq!(cmd("PING").query::<String>(&mut c).unwrap(), "PONG", "ready means listening");
    let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    assert!(child.wait().unwrap().success());
    assert!(!pidfile.exists(), "the pidfile goes when the server stops");
}

/// The engine's directives change while the server runs (`lsm::Db::set_options`): a small
/// write buffer fills L0 while auto compactions are off, turning them back on compacts it, and
/// every key written under the changing settings reads back.
#[test]
fn engine_directives_change_while_the_server_runs() {
    let server = Server::start(&[]);
    let mut c = server.client();
    for (name, value, shown) in [
        ("write-buffer-size", "65536", "65536"),
        ("block-cache-size", "1mb", "1048576"),
        ("compression", "zstd", "zstd"),
        ("compaction-rate-limit", "100mb", "104857600"),
        ("level0-slowdown-writes-trigger", "30", "30"),
        ("level0-stop-writes-trigger", "40", "40"),
        ("disable-auto-compactions", "yes", "yes"),
        ("repl-backlog-size", "2mb", "2097152"),
    ] {
        let ok: String = cmd("CONFIG").arg("SET").arg(name).arg(value).query(&mut c).unwrap();
        assert_eq!(ok, "OK", "{name}");
        assert_eq!(config_get(&mut c, name)[name], shown);
    }
    let l0 = |c: &mut redis::Connection| -> u64 {
        let info: String = cmd("INFO").arg("lsm").query(c).unwrap();
        info.lines().find_map(|l| l.strip_prefix("lsm_l0_files:")).unwrap().trim().parse().unwrap()
    };
    let value = |i: usize| format!("{i:06}-{}", "v".repeat(200));
    for chunk in 0..20 {
        let mut p = redis::pipe();
        for i in chunk * 250..(chunk + 1) * 250 {
            p.cmd("SET").arg(format!("key:{i}")).arg(value(i)).ignore();
        }
        p.query::<()>(&mut c).unwrap();
    }
    cmd("SAVE").query::<()>(&mut c).unwrap();
    assert!(l0(&mut c) >= 4, "1 MB through a 64 KiB buffer with compactions off leaves tables in L0");
    cmd("CONFIG").arg("SET").arg("disable-auto-compactions").arg("no").query::<()>(&mut c).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while l0(&mut c) >= 4 {
        assert!(Instant::now() < deadline, "L0 not compacted once auto compactions came back on");
        std::thread::sleep(Duration::from_millis(50));
    }
    for i in (0..5_000).step_by(37) {
        assert_eq!(cmd("GET").arg(format!("key:{i}")).query::<String>(&mut c).unwrap(), value(i));
    }
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 5_000);
}

/// `maxmemory` as Redis enforces it with `noeviction`, side by side with redis-server: over
/// it, commands that may grow memory, MULTI queueing and scripts that declare writes are
/// refused with `-OOM`, reads and deletes go on, `allow-oom` scripts write; each refusal is
/// counted once. Under a larger `maxmemory` Shale shrinks its block cache to fit instead.
#[test]
fn maxmemory_refuses_writes_as_redis_does() {
    let Some((_redis, mut r, _)) = common::start_redis() else { return };
    let server = Server::start(&["--block-cache-size", "64mb", "--write-buffer-size", "4mb"]);
    let mut c = server.client();
    let oom = "OOM command not allowed when used memory > 'maxmemory'.";
    for conn in [&mut r, &mut c] {
        let q =
            |conn: &mut redis::Connection, words: &[&str]| cmd(words[0]).arg(&words[1..]).query::<redis::Value>(conn);
        q(conn, &["SET", "x", "123"]).unwrap();
        q(conn, &["CONFIG", "RESETSTAT"]).unwrap();
        q(conn, &["CONFIG", "SET", "maxmemory", "1"]).unwrap();
        assert_eq!(err(q(conn, &["SET", "x", "1"])), format!("OOM {}", &oom[4..]));
        assert_eq!(cmd("GET").arg("x").query::<String>(conn).unwrap(), "123");
        let e = err(q(conn, &["EVAL", "redis.call('set','x',1) return 1", "1", "x"]));
        assert!(e.starts_with(&format!("OOM {}", &oom[4..])), "{e}");
        assert_eq!(err(q(conn, &["EVAL", "#!lua\nreturn 1", "0"])), format!("OOM {}", &oom[4..]));
        let allowed = "#!lua flags=allow-oom\nredis.call('set','x',7) return 1";
        assert_eq!(cmd("EVAL").arg(allowed).arg(1).arg("x").query::<i64>(conn).unwrap(), 1);
        q(conn, &["MULTI"]).unwrap();
        assert_eq!(err(q(conn, &["GET", "x"])), format!("OOM {}", &oom[4..]));
        assert!(err(q(conn, &["EXEC"])).starts_with("EXECABORT"));
        assert_eq!(cmd("DEL").arg("x").query::<i64>(conn).unwrap(), 1);
        q(conn, &["CONFIG", "SET", "maxmemory", "0"]).unwrap();
        q(conn, &["SET", "x", "1"]).unwrap();
        let stats: String = cmd("INFO").arg("errorstats").query(conn).unwrap();
        assert!(stats.contains("errorstat_OOM:count=4"), "{stats}");
        let commands: String = cmd("INFO").arg("commandstats").query(conn).unwrap();
        assert!(commands.contains("cmdstat_set:calls=2,"), "{commands}");
        assert!(commands.contains("rejected_calls=2,failed_calls=0"), "{commands}");
    }
    // A maxmemory below the block cache shrinks it to fit beside two write buffers.
    cmd("CONFIG").arg("SET").arg("maxmemory").arg("40mb").query::<()>(&mut c).unwrap();
    for i in 0..3_000 {
        cmd("SET").arg(format!("k{i}")).arg("v".repeat(1000)).query::<()>(&mut c).unwrap();
    }
    cmd("SAVE").query::<()>(&mut c).unwrap();
    for i in 0..3_000 {
        cmd("GET").arg(format!("k{i}")).query::<String>(&mut c).unwrap();
    }
    let memory: String = cmd("INFO").arg("memory").query(&mut c).unwrap();
    let field =
        |name: &str| -> u64 { memory.lines().find_map(|l| l.strip_prefix(name)).unwrap().trim().parse().unwrap() };
    assert!(field("lsm_block_cache_bytes:") <= (40 << 20) - 2 * (4 << 20), "{memory}");
    // The GETs opened the saved table: its filter alone holds 10 bits a key.
    assert!(field("lsm_table_readers_bytes:") >= 3_000 * 10 / 8, "{memory}");
    assert!(field("used_memory:") <= 40 << 20, "{memory}");
}

/// `CONFIG SET port | bind` move the listener while the server runs, as in Redis: clients
/// already connected stay, the old port closes, a taken port is refused with Redis's error and
/// every setting of that CONFIG SET rolled back. Shale's restart-only settings may be set to
/// the value they have (so `CONFIG GET *` can be set back), and to nothing else.
#[test]
fn port_and_bind_change_while_the_server_runs() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let moved = common::free_port();
    cmd("CONFIG").arg("SET").arg("port").arg(moved).query::<()>(&mut c).unwrap();
    let connect = |port: u16| redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection();
    let mut fresh = connect(moved).unwrap();
    assert_eq!(cmd("PING").query::<String>(&mut fresh).unwrap(), "PONG");
    assert!(connect(server.port).is_err(), "the old port is closed");
    assert_eq!(cmd("PING").query::<String>(&mut c).unwrap(), "PONG", "clients already connected stay");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let e = err(cmd("CONFIG").arg("SET").arg("maxmemory").arg("10000001").arg("port").arg(taken_port).query(&mut c));
    assert_eq!(e, "ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this port");
    assert_eq!(config_get(&mut c, "maxmemory")["maxmemory"], "0", "rolled back");
    assert_eq!(config_get(&mut c, "port")["port"], moved.to_string());
    let mut again = connect(moved).unwrap();
    assert_eq!(cmd("PING").query::<String>(&mut again).unwrap(), "PONG", "still listening where it was");

    let e = err(cmd("CONFIG").arg("SET").arg("bind").arg("192.0.2.1").query(&mut c));
    assert_eq!(
        e,
        "ERR CONFIG SET failed (possibly related to argument 'bind') - Failed to bind to specified addresses."
    );
    assert_eq!(cmd("PING").query::<String>(&mut connect(moved).unwrap()).unwrap(), "PONG");

    let threads = config_get(&mut c, "worker-threads")["worker-threads"].clone();
    cmd("CONFIG").arg("SET").arg("worker-threads").arg(&threads).query::<()>(&mut c).unwrap();
    let e = err(cmd("CONFIG").arg("SET").arg("worker-threads").arg("7").query(&mut c));
    assert_eq!(e, "ERR CONFIG SET failed (possibly related to argument 'worker-threads') - can't set immutable config");
    // Back where the harness expects it, for its shutdown.
    cmd("CONFIG").arg("SET").arg("port").arg(server.port).query::<()>(&mut c).unwrap();
    assert_eq!(cmd("PING").query::<String>(&mut connect(server.port).unwrap()).unwrap(), "PONG");
}

/// UNLINK of a big key and FLUSHDB ASYNC return the memory the dropped data held in the
/// memtable soon (it is flushed in the background), as Redis's background free returns it.
#[test]
fn unlink_and_flushdb_async_return_memtable_memory() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let members: Vec<u32> = (0..100_000).collect();
    for drop in [&["UNLINK", "big"][..], &["FLUSHDB", "ASYNC"][..]] {
        // An empty memtable holds its bloom filter and point index: what the set adds is the
        // difference, and three quarters of it must go.
        let base = info_field(&mut c, "used_memory");
        cmd("SADD").arg("big").arg(&members).query::<()>(&mut c).unwrap();
        let peak = info_field(&mut c, "used_memory");
        assert!(peak > base + 1_000_000, "100,000 members are in the memtable: {base} -> {peak}");
        cmd(drop[0]).arg(drop[1]).query::<()>(&mut c).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while info_field(&mut c, "used_memory") > base + (peak - base) / 4 {
            assert!(Instant::now() < deadline, "{drop:?} returned no memory");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(cmd("SCARD").arg("big").query::<i64>(&mut c).unwrap(), 0);
    }
}
