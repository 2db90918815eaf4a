//! INFO's sections and per-command statistics against a real `shale-server`, compared with a
//! real redis-server (Debian's) running the same commands: which sections each selection
//! shows, `commandstats` (calls, rejected and failed calls per command and subcommand),
//! `errorstats`, `latencystats` and `total_error_replies`.
//!
//! Needs `redis-server`; without it the test says so and passes, unless
//! `SHALE_REQUIRE_REDIS_TOOLS=1` (as in CI).

mod common;

use std::collections::BTreeMap;

use common::{start_redis, start_redis_with, Server};
use redis::cmd;

/// The `# Section` titles of an INFO reply, in order.
fn sections(conn: &mut redis::Connection, args: &[&str]) -> Vec<String> {
    let text: String = cmd("INFO").arg(args).query(conn).unwrap();
    text.lines().filter_map(|l| l.strip_prefix("# ")).map(str::to_string).collect()
}

/// `field -> value` of an INFO section.
fn fields(conn: &mut redis::Connection, section: &str) -> BTreeMap<String, String> {
    let text: String = cmd("INFO").arg(section).query(conn).unwrap();
    text.lines().filter_map(|l| l.split_once(':')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Runs the same commands (errors included) on a connection.
fn workload(c: &mut redis::Connection) {
    cmd("CONFIG").arg("RESETSTAT").query::<()>(c).unwrap();
    let run = |c: &mut redis::Connection, words: &[&str]| {
        let _ = cmd(words[0]).arg(&words[1..]).query::<redis::Value>(c);
    };
    for words in [
        &["SET", "a", "1"][..],
        &["GET", "a"],
        &["GET", "a"],
        &["GET"],
        &["LPUSH", "a", "x"],
        &["INCR", "a"],
        &["HSET", "h", "f"],
        &["CONFIG", "GET", "maxmemory"],
        &["CLIENT", "ID"],
        &["NOSUCHCOMMAND"],
        &["MULTI"],
        &["SET", "b", "2"],
        &["GET", "a", "b"],
        &["EXEC"],
        &["MULTI"],
        &["INCR", "a"],
        &["LPUSH", "a", "y"],
        &["EXEC"],
    ] {
        run(c, words);
    }
}

/// calls, rejected_calls and failed_calls per `cmdstat_` line (usec left out: timing).
fn counts(stats: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    stats
        .iter()
        .filter(|(k, _)| k.starts_with("cmdstat_"))
        .map(|(k, v)| {
            let kept: Vec<&str> = v.split(',').filter(|kv| !kv.starts_with("usec")).collect();
            (k.clone(), kept.join(","))
        })
        .collect()
}

#[test]
fn command_and_error_statistics_count_as_redis_counts_them() {
    let Some((_redis, mut r, _)) = start_redis() else { return };
    let server = Server::start(&[]);
    let mut c = server.client();
    workload(&mut r);
    workload(&mut c);
    let (want, got) = (fields(&mut r, "commandstats"), fields(&mut c, "commandstats"));
    assert_eq!(counts(&got), counts(&want));
    let mine = counts(&got);
    assert_eq!(mine["cmdstat_get"], "calls=2,rejected_calls=2,failed_calls=0", "GET without a key, GET a b in MULTI");
    assert_eq!(mine["cmdstat_lpush"], "calls=2,rejected_calls=0,failed_calls=2", "LPUSH on a string");
    assert_eq!(mine["cmdstat_exec"], "calls=2,rejected_calls=0,failed_calls=1", "EXECABORT (a failed call), then EXEC");
    assert!(mine.contains_key("cmdstat_config|get") && mine.contains_key("cmdstat_client|id"), "{mine:?}");
    for line in got.values() {
        let parts: Vec<&str> = line.split(',').map(|kv| kv.split_once('=').unwrap().0).collect();
        assert_eq!(parts, ["calls", "usec", "usec_per_call", "rejected_calls", "failed_calls"], "{line}");
    }
    assert_eq!(fields(&mut c, "errorstats"), fields(&mut r, "errorstats"));
    let total = |conn: &mut redis::Connection| fields(conn, "stats")["total_error_replies"].clone();
    assert_eq!(total(&mut c), total(&mut r));
    // Latency percentiles for the same commands, in Redis's format.
    let (want, got) = (fields(&mut r, "latencystats"), fields(&mut c, "latencystats"));
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    for line in got.values() {
        let names: Vec<&str> = line.split(',').map(|kv| kv.split_once('=').unwrap().0).collect();
        assert_eq!(names, ["p50", "p99", "p99.9"], "{line}");
    }
    // Other percentiles, and none without latency tracking.
    for conn in [&mut r, &mut c] {
        cmd("CONFIG").arg("SET").arg("latency-tracking-info-percentiles").arg("0 99.99 100").query::<()>(conn).unwrap();
    }
    let got = fields(&mut c, "latencystats");
    assert!(got.values().all(|v| v.starts_with("p0=") && v.contains(",p99.99=") && v.contains(",p100=")), "{got:?}");
    let show = |conn: &mut redis::Connection| -> Vec<String> {
        cmd("CONFIG").arg("GET").arg("latency-tracking-info-percentiles").query(conn).unwrap()
    };
    assert_eq!(show(&mut c), show(&mut r));
    for conn in [&mut r, &mut c] {
        let e = cmd("CONFIG")
            .arg("SET")
            .arg("latency-tracking-info-percentiles")
            .arg("50 101")
            .query::<()>(conn)
            .unwrap_err();
        assert!(e.to_string().contains("should sit between [0.0,100.0]"), "{e}");
    }
}

#[test]
fn info_shows_the_sections_redis_shows_for_each_selection() {
    let Some((_redis, mut r, _)) = start_redis() else { return };
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("SET").arg("k").arg("v").query::<()>(&mut c).unwrap();
    cmd("SET").arg("k").arg("v").query::<()>(&mut r).unwrap();
    for selection in [
        &[][..],
        &["default"],
        &["all"],
        &["everything"],
        &["cpu"],
        &["CPU", "sentinel"],
        &["cpu", "default"],
        &["commandSTATS"],
        &["keyspace", "clients"],
        &["nosuchsection"],
    ] {
        let (want, got) = (sections(&mut r, selection), sections(&mut c, selection));
        // Shale adds its engine's section (`# LSM`) to the default ones.
        let got: Vec<String> = got.into_iter().filter(|s| s != "LSM").collect();
        assert_eq!(got, want, "INFO {selection:?}");
    }
    assert_eq!(fields(&mut c, "cluster")["cluster_enabled"], "0");
}

/// Every MONITOR line received on `monitor` until the `ECHO end` marker, with the time and the
/// client's address left out (`[db] "cmd" "arg" …`).
fn monitored(monitor: &mut std::net::TcpStream) -> Vec<String> {
    use std::io::Read;
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    while !text.contains("\"ECHO\" \"end\"") {
        let n = monitor.read(&mut buf).unwrap_or_else(|e| panic!("no end marker ({e}) after: {text}"));
        assert!(n > 0, "monitor closed: {text}");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    text.lines()
        .filter_map(|l| l.strip_prefix('+'))
        .filter(|l| *l != "OK")
        .map(|l| {
            let (_, rest) = l.split_once(" [").unwrap();
            let (client, args) = rest.split_once("] ").unwrap();
            format!("[{}] {args}", client.split(' ').next().unwrap())
        })
        .collect()
}

/// Runs the MONITOR script on the server at `port`; returns what the monitor saw.
fn monitor_script(port: u16) -> Vec<String> {
    use std::io::Write;
    let mut monitor = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    monitor.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    monitor.write_all(b"MONITOR\r\n").unwrap();
    let mut ok = [0u8; 5];
    std::io::Read::read_exact(&mut monitor, &mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
    for words in [
        &["SET", "foo", "bar baz\n\"q\""][..],
        &["GET", "foo"],
        &["SELECT", "3"],
        &["LPUSH", "l", "\u{1}"],
        &["MULTI"],
        &["SET", "a", "1"],
        &["EXEC"],
        &["MULTI"],
        &["NOSUCHCOMMAND"],
        &["EXEC"],
        &["AUTH", "not-real"],
        &["AUTH", "user", "not-a-password"],
        &["HELLO", "2", "AUTH", "user", "not-a-password"],
        &["CONFIG", "GET", "maxmemory"],
        &["CLIENT", "ID"],
        &["ECHO", "end"],
    ] {
        let _ = cmd(words[0]).arg(&words[1..]).query::<redis::Value>(&mut c);
    }
    monitored(&mut monitor)
}

#[test]
fn monitor_shows_commands_as_redis_shows_them() {
    let Some((_redis, _r, redis_port)) = start_redis() else { return };
    let server = Server::start(&[]);
    let want = monitor_script(redis_port);
    // The client library's CLIENT SETINFO (Redis 7.2) is refused by redis-server 7.0, so it
    // shows only on Shale, which has it.
    let got: Vec<String> = monitor_script(server.port).into_iter().filter(|l| !l.contains("SETINFO")).collect();
    assert_eq!(got, want);
    assert!(got.iter().any(|l| l == r#"[0] "SET" "foo" "bar baz\n\"q\"""#), "{got:?}");
    assert!(got.iter().any(|l| l.contains(r#""AUTH" "(redacted)" "(redacted)""#)), "{got:?}");
}

#[test]
fn slow_commands_are_logged_as_redis_logs_them() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let set = |c: &mut redis::Connection, name: &str, value: &str| {
        cmd("CONFIG").arg("SET").arg(name).arg(value).query::<()>(c).unwrap();
    };
    cmd("CLIENT").arg("SETNAME").arg("logger").query::<()>(&mut c).unwrap();
    set(&mut c, "slowlog-log-slower-than", "0");
    set(&mut c, "slowlog-max-len", "100");
    cmd("SLOWLOG").arg("RESET").query::<()>(&mut c).unwrap();
    let many: Vec<String> = (0..35).map(|i| i.to_string()).collect();
    cmd("SADD").arg("s").arg(&many).query::<i64>(&mut c).unwrap();
    cmd("SET").arg("k").arg("A".repeat(130)).query::<()>(&mut c).unwrap();
    cmd("CONFIG").arg("SET").arg("requirepass").arg("").arg("maxclients").arg("100").query::<()>(&mut c).unwrap();
    redis::pipe().atomic().cmd("INCR").arg("n").cmd("INCR").arg("n").query::<()>(&mut c).unwrap();
    type Entry = (i64, i64, i64, Vec<String>, String, String);
    let entries: Vec<Entry> = cmd("SLOWLOG").arg("GET").arg(-1).query(&mut c).unwrap();
    let args: Vec<Vec<String>> = entries.iter().map(|e| e.3.clone()).collect();
    // Newest first; EXEC is not logged, the commands it ran are (MULTI too).
    assert_eq!(args[0], ["INCR", "n"]);
    assert_eq!(args[1], ["INCR", "n"]);
    assert_eq!(args[2], ["MULTI"]);
    assert_eq!(args[3], ["CONFIG", "SET", "requirepass", "(redacted)", "maxclients", "100"]);
    assert_eq!(args[4][2], format!("{}... (2 more bytes)", "A".repeat(128)));
    assert_eq!(args[5].len(), 32);
    assert_eq!(args[5][31], "... (6 more arguments)");
    assert_eq!(args[6], ["SLOWLOG", "RESET"]);
    assert!(entries.windows(2).all(|w| w[0].0 == w[1].0 + 1), "ids count down");
    assert!(entries.iter().all(|e| e.5 == "logger" && e.4.starts_with("127.0.0.1:")));
    assert_eq!(cmd("SLOWLOG").arg("LEN").query::<i64>(&mut c).unwrap(), 8, "and the SLOWLOG GET itself");
    assert_eq!(cmd("SLOWLOG").arg("GET").arg(2).query::<Vec<Entry>>(&mut c).unwrap().len(), 2);
    let e = cmd("SLOWLOG").arg("GET").arg(-2).query::<()>(&mut c).unwrap_err();
    assert!(e.to_string().contains("count should be greater than or equal to -1"), "{e}");
    // A blocked command is logged when it is served.
    cmd("SLOWLOG").arg("RESET").query::<()>(&mut c).unwrap();
    let mut blocked = server.client();
    let waiter = std::thread::spawn(move || cmd("BLPOP").arg("q").arg(5).query::<Vec<String>>(&mut blocked).unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !cmd("CLIENT").arg("LIST").query::<String>(&mut c).unwrap().contains("cmd=blpop") {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    cmd("SLOWLOG").arg("RESET").query::<()>(&mut c).unwrap();
    cmd("RPUSH").arg("q").arg("x").query::<i64>(&mut c).unwrap();
    assert_eq!(waiter.join().unwrap(), ["q", "x"]);
    let entries: Vec<Entry> = cmd("SLOWLOG").arg("GET").query(&mut c).unwrap();
    assert!(entries.iter().any(|e| e.3 == ["BLPOP", "q", "5"]), "{entries:?}");
    // Off: nothing is logged.
    set(&mut c, "slowlog-log-slower-than", "-1");
    cmd("SLOWLOG").arg("RESET").query::<()>(&mut c).unwrap();
    cmd("PING").query::<String>(&mut c).unwrap();
    assert_eq!(cmd("SLOWLOG").arg("LEN").query::<i64>(&mut c).unwrap(), 0);
}

#[test]
fn the_latency_monitor_samples_slow_commands() {
    let server = Server::start(&["--enable-debug-command", "yes"]);
    let mut c = server.client();
    let doctor: String = cmd("LATENCY").arg("DOCTOR").query(&mut c).unwrap();
    assert!(doctor.contains("disabled"), "{doctor}");
    cmd("CONFIG").arg("SET").arg("latency-monitor-threshold").arg("5").query::<()>(&mut c).unwrap();
    cmd("PING").query::<String>(&mut c).unwrap();
    assert_eq!(cmd("LATENCY").arg("LATEST").query::<Vec<redis::Value>>(&mut c).unwrap().len(), 0, "PING is fast");
    cmd("DEBUG").arg("SLEEP").arg("0.02").query::<()>(&mut c).unwrap();
    let latest: Vec<(String, i64, i64, i64)> = cmd("LATENCY").arg("LATEST").query(&mut c).unwrap();
    assert_eq!(latest.len(), 1);
    assert_eq!(latest[0].0, "command");
    assert!(latest[0].2 >= 20 && latest[0].3 >= 20, "{latest:?}");
    let history: Vec<(i64, i64)> = cmd("LATENCY").arg("HISTORY").arg("command").query(&mut c).unwrap();
    assert_eq!(history.len(), 1);
    let graph: String = cmd("LATENCY").arg("GRAPH").arg("command").query(&mut c).unwrap();
    assert!(graph.starts_with("command - high") && graph.contains('#'), "{graph}");
    let doctor: String = cmd("LATENCY").arg("DOCTOR").query(&mut c).unwrap();
    assert!(doctor.contains("1. command: 1 latency spikes"), "{doctor}");
    assert_eq!(cmd("LATENCY").arg("RESET").query::<i64>(&mut c).unwrap(), 1);
    assert!(cmd("LATENCY").arg("GRAPH").arg("command").query::<String>(&mut c).is_err());
}

#[test]
fn command_getkeys_and_list_answer_as_redis_does() {
    let Some((_redis, mut r, _)) = start_redis() else { return };
    let server = Server::start(&[]);
    let mut c = server.client();
    let ask = |conn: &mut redis::Connection, words: &[&str]| -> String {
        match cmd(words[0]).arg(&words[1..]).query::<redis::Value>(conn) {
            Ok(v) => format!("{v:?}"),
            Err(e) => format!("error {e}"),
        }
    };
    for words in [
        &["COMMAND", "GETKEYS", "get", "key"][..],
        &["COMMAND", "GETKEYSANDFLAGS", "set", "k1", "v1"],
        &["COMMAND", "GETKEYSANDFLAGS", "set", "k1", "v1", "GET"],
        &["COMMAND", "GETKEYSANDFLAGS", "mset", "k1", "v1", "k2", "v2"],
        &["COMMAND", "GETKEYSANDFLAGS", "LMOVE", "k1", "k2", "left", "right"],
        &["COMMAND", "GETKEYSANDFLAGS", "zunionstore", "d", "2", "a", "b", "WEIGHTS", "1", "2"],
        &["COMMAND", "GETKEYS", "lcs", "a", "b"],
        &["COMMAND", "GETKEYS", "memory", "usage", "key"],
        &["COMMAND", "GETKEYS", "blmpop", "0", "2", "a", "b", "LEFT"],
        &["COMMAND", "GETKEYS", "nosuchcommand", "a"],
        &["COMMAND", "GETKEYS", "ping"],
        &["COMMAND", "GETKEYS", "get"],
        &["COMMAND", "GETKEYS", "zunionstore", "d", "5", "a"],
        &["COMMAND", "LIST", "bad_arg"],
        &["COMMAND", "LIST", "FILTERBY", "bad_arg", "x"],
        &["COMMAND", "LIST", "FILTERBY", "aclcat", "non_existing_category"],
        &["COMMAND", "LIST", "FILTERBY", "module", "x"],
        &["COMMAND", "LIST", "FILTERBY", "pattern", "set"],
    ] {
        assert_eq!(ask(&mut c, words), ask(&mut r, words), "{words:?}");
    }
    // Patterns over commands and subcommands, as sets.
    for pattern in ["config*", "config|*re*", "client|*"] {
        let list = |conn: &mut redis::Connection| -> std::collections::BTreeSet<String> {
            cmd("COMMAND").arg("LIST").arg("FILTERBY").arg("PATTERN").arg(pattern).query(conn).unwrap()
        };
        assert_eq!(list(&mut c), list(&mut r), "{pattern}");
    }
    let hash: Vec<String> = cmd("COMMAND").arg("LIST").arg("FILTERBY").arg("ACLCAT").arg("hash").query(&mut c).unwrap();
    assert!(hash.contains(&"hset".to_string()) && !hash.contains(&"set".to_string()), "{hash:?}");
}

/// `COMMAND DOCS` is Redis 7.0's documentation (redis-cli 7 builds its hints from it): the same
/// reply as redis-server's for commands both have, in RESP2 and RESP3; Shale's own LOCK is
/// documented; commands Shale lacks and unknown names are left out.
#[test]
fn command_docs_are_redis_documentation() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let docs: redis::Value = cmd("COMMAND").arg("DOCS").arg("get").arg("lock").arg("nosuch").query(&mut c).unwrap();
    let text = format!("{docs:?}");
    assert!(text.contains("Get the value of a key") && text.contains("timeout-ms"), "{text}");
    assert!(!text.contains("nosuch"), "{text}");
    let all: redis::Value = cmd("COMMAND").arg("DOCS").query(&mut c).unwrap();
    let names: usize = cmd("COMMAND").arg("COUNT").query(&mut c).unwrap();
    let redis::Value::Array(flat) = all else { panic!("RESP2: a flat array, got {all:?}") };
    assert_eq!(flat.len(), 2 * names, "every command Shale has is documented");

    let Some((_redis, mut r, _)) = start_redis() else { return };
    // Shale leaves out MODULE (no modules): Redis asked without it gives the same reply.
    let ask = |conn: &mut redis::Connection, words: &[&str]| -> redis::Value {
        cmd("COMMAND").arg("DOCS").arg(words).query(conn).unwrap()
    };
    assert_eq!(ask(&mut c, &["get", "set", "zadd"]), ask(&mut r, &["get", "set", "zadd"]));
    assert_eq!(ask(&mut c, &["hset", "module", "bitfield_ro"]), ask(&mut r, &["hset", "bitfield_ro"]));
    // A container's subcommands come in redis-server's hash order, which changes per process.
    let subcommands = |v: redis::Value| -> std::collections::BTreeSet<String> {
        let text = format!("{v:?}");
        text.split('"').filter(|w| w.starts_with("client|")).map(str::to_string).collect()
    };
    assert_eq!(subcommands(ask(&mut c, &["client"])), subcommands(ask(&mut r, &["client"])));
}

/// `<COMMAND> HELP` prints Redis 7.0's text (CLIENT adds SETINFO and NO-TOUCH, MEMORY leaves
/// out MALLOC-STATS: those are checked by hand).
#[test]
fn help_texts_are_redis_texts() {
    let Some((_redis, mut r, _)) = start_redis() else { return };
    let server = Server::start(&[]);
    let mut c = server.client();
    let help = |conn: &mut redis::Connection, name: &str| -> Vec<String> { cmd(name).arg("HELP").query(conn).unwrap() };
    for name in ["config", "acl", "object", "pubsub", "command", "slowlog", "function", "script"] {
        assert_eq!(help(&mut c, name), help(&mut r, name), "{name} HELP");
    }
    let client = help(&mut c, "client");
    let without_extras: Vec<String> = client
        .iter()
        .filter(|l| {
            !l.starts_with("SETINFO") && !l.contains("LIB-NAME") && !l.starts_with("NO-TOUCH") && !l.contains("LRU/LFU")
        })
        .cloned()
        .collect();
    assert_eq!(without_extras, help(&mut r, "client"));
}

/// `LATENCY HISTOGRAM`: the same shape as redis-server's (command → calls and a cumulative
/// map of microsecond levels), the same calls, levels from Redis's series.
#[test]
fn latency_histogram_has_redis_shape() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let shape = |conn: &mut redis::Connection| -> Vec<(String, i64, Vec<i64>)> {
        for i in 0..50 {
            cmd("SET").arg(format!("k{i}")).arg(i).query::<()>(conn).unwrap();
        }
        let v: redis::Value = cmd("LATENCY").arg("HISTOGRAM").arg("set").arg("nosuch").query(conn).unwrap();
        let redis::Value::Array(items) = v else { panic!("{v:?}") };
        items
            .chunks(2)
            .map(|pair| {
                let name: String = redis::from_redis_value(&pair[0]).unwrap();
                let fields: Vec<redis::Value> = redis::from_redis_value(&pair[1]).unwrap();
                assert_eq!(redis::from_redis_value::<String>(&fields[0]).unwrap(), "calls");
                assert_eq!(redis::from_redis_value::<String>(&fields[2]).unwrap(), "histogram_usec");
                let levels: Vec<i64> = redis::from_redis_value(&fields[3]).unwrap();
                let calls: i64 = redis::from_redis_value(&fields[1]).unwrap();
                assert_eq!(levels.last(), Some(&calls), "cumulative: the last level holds every call");
                (name, calls, levels.iter().step_by(2).copied().collect())
            })
            .collect()
    };
    let shale = shape(&mut c);
    assert_eq!(shale.len(), 1);
    assert_eq!((shale[0].0.as_str(), shale[0].1), ("set", 50));
    let series = [1, 2, 4, 8, 16, 33, 66, 132, 264, 528, 1056, 2113, 4227, 8454, 16908, 33816, 67633, 135266];
    assert!(shale[0].2.iter().all(|l| series.contains(l)), "{:?}", shale[0].2);
    if let Some((_redis, mut r, _)) = start_redis() {
        let redis = shape(&mut r);
        assert_eq!((redis[0].0.as_str(), redis[0].1), ("set", 50));
        assert!(redis[0].2.iter().all(|l| series.contains(l)), "the series is Redis's: {:?}", redis[0].2);
    }
}

/// OBJECT IDLETIME / FREQ, RESTORE's IDLETIME / FREQ and DEBUG OBJECT, side by side with
/// redis-server where the answers do not depend on timing: RESTORE places a key's last access
/// in the past, commands that only look at a key (TTL, TYPE, EXISTS, OBJECT) leave it there,
/// and any read or write brings it back to now; under an LFU policy a new key counts 5 and its
/// first access makes 6.
#[test]
fn access_times_and_frequencies_follow_redis() {
    let Some((_redis, mut r, _)) = start_redis_with(&["--enable-debug-command", "yes"]) else { return };
    let server = Server::start(&["--enable-debug-command", "yes"]);
    let mut c = server.client();
    for conn in [&mut r, &mut c] {
        let q =
            |conn: &mut redis::Connection, words: &[&str]| cmd(words[0]).arg(&words[1..]).query::<redis::Value>(conn);
        let int =
            |conn: &mut redis::Connection, words: &[&str]| cmd(words[0]).arg(&words[1..]).query::<i64>(conn).unwrap();
        q(conn, &["SET", "foo", "bar"]).unwrap();
        let dump: Vec<u8> = cmd("DUMP").arg("foo").query(conn).unwrap();
        cmd("DEL").arg("foo").query::<()>(conn).unwrap();
        cmd("RESTORE").arg("foo").arg(0).arg(&dump).arg("IDLETIME").arg(1000).query::<()>(conn).unwrap();
        let idle = int(conn, &["OBJECT", "IDLETIME", "foo"]);
        assert!((1000..=1010).contains(&idle), "restored idle time {idle}");
        for words in [&["TTL", "foo"][..], &["TYPE", "foo"], &["EXISTS", "foo"], &["OBJECT", "ENCODING", "foo"]] {
            q(conn, words).unwrap();
        }
        assert!(int(conn, &["OBJECT", "IDLETIME", "foo"]) >= 1000, "TTL, TYPE, EXISTS and OBJECT do not touch");
        let debug: String = cmd("DEBUG").arg("OBJECT").arg("foo").query(conn).unwrap();
        let idle_field = debug.split(' ').find_map(|f| f.strip_prefix("lru_seconds_idle:")).unwrap();
        assert!(idle_field.parse::<u64>().unwrap() >= 1000, "{debug}");
        assert!(debug.contains(" refcount:1 encoding:embstr serializedlength:4 lru:"), "{debug}");
        q(conn, &["GET", "foo"]).unwrap();
        assert!(int(conn, &["OBJECT", "IDLETIME", "foo"]) < 2, "GET touches");
        cmd("RESTORE").arg("foo").arg(0).arg(&dump).arg("REPLACE").arg("IDLETIME").arg(500).query::<()>(conn).unwrap();
        q(conn, &["TOUCH", "foo"]).unwrap();
        assert!(int(conn, &["OBJECT", "IDLETIME", "foo"]) < 2, "TOUCH touches");
        let err = q(conn, &["OBJECT", "FREQ", "foo"]).unwrap_err();
        assert!(err.to_string().contains("An LFU maxmemory policy is not selected"), "{err}");

        q(conn, &["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"]).unwrap();
        q(conn, &["SET", "fresh", "v"]).unwrap();
        assert_eq!(int(conn, &["OBJECT", "FREQ", "fresh"]), 5);
        q(conn, &["GET", "fresh"]).unwrap();
        assert_eq!(int(conn, &["OBJECT", "FREQ", "fresh"]), 6);
        cmd("RESTORE").arg("lfu").arg(0).arg(&dump).arg("FREQ").arg(100).query::<()>(conn).unwrap();
        assert_eq!(int(conn, &["OBJECT", "FREQ", "lfu"]), 100);
        let err = q(conn, &["OBJECT", "IDLETIME", "lfu"]).unwrap_err();
        assert!(err.to_string().contains("An LFU maxmemory policy is selected, idle time not tracked"), "{err}");
        q(conn, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]).unwrap();

        let err = q(conn, &["DEBUG", "OBJECT", "nosuchkey"]).unwrap_err();
        assert!(err.to_string().contains("no such key"), "{err}");
        let stats: String = cmd("MEMORY").arg("MALLOC-STATS").query(conn).unwrap();
        assert!(stats.starts_with("___ Begin jemalloc statistics ___"), "{}", &stats[..stats.len().min(80)]);
    }
}
