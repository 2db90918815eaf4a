//! INFO's sections and per-command statistics against a real `shale-server`, compared with a
//! real redis-server (Debian's) running the same commands: which sections each selection
//! shows, `commandstats` (calls, rejected and failed calls per command and subcommand),
//! `errorstats`, `latencystats` and `total_error_replies`.
//!
//! Needs `redis-server`; without it the test says so and passes, unless
//! `SHALE_REQUIRE_REDIS_TOOLS=1` (as in CI).

mod common;

use std::collections::BTreeMap;

use common::{start_redis, Server};
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
