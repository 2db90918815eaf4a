//! Redis's own tools against a real `shale-server`: redis-cli (commands, errors, `--pipe` mass
//! insertion) and redis-benchmark (a smoke test: every request answered, no errors; speed is
//! measured by `bench/compare-redis.sh`, not here).
//!
//! The tools come from Debian's redis-tools, which `.ci/run` installs. Where they are missing
//! the tests say so and pass, unless `SHALE_REQUIRE_REDIS_TOOLS=1` (set by CI) demands them.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::Server;

fn cli(server: &Server, args: &[&str]) -> String {
    let out = Command::new("redis-cli").arg("-p").arg(server.port.to_string()).args(args).output().unwrap();
    assert!(out.status.success(), "{:?}", out);
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn redis_cli_commands_errors_and_pipe() {
    if !common::have_tool("redis-cli") {
        return;
    }
    let server = Server::start(&[]);
    assert_eq!(cli(&server, &["PING"]), "PONG\n");
    assert_eq!(cli(&server, &["SET", "greeting", "hello world"]), "OK\n");
    assert_eq!(cli(&server, &["GET", "greeting"]), "hello world\n");
    assert_eq!(cli(&server, &["INCRBY", "n", "41"]), "41\n");
    assert_eq!(cli(&server, &["--no-raw", "INCR", "n"]), "(integer) 42\n");
    assert_eq!(cli(&server, &["--no-raw", "GET", "missing"]), "(nil)\n");
    assert_eq!(
        cli(&server, &["--no-raw", "INCR", "greeting"]),
        "(error) ERR value is not an integer or out of range\n"
    );
    assert_eq!(cli(&server, &["--no-raw", "GET"]), "(error) ERR wrong number of arguments for 'get' command\n");
    assert_eq!(cli(&server, &["-n", "7", "SET", "in7", "x"]), "OK\n");
    assert_eq!(cli(&server, &["-n", "7", "DBSIZE"]), "1\n");
    assert_eq!(cli(&server, &["-3", "--no-raw", "HELLO", "3"]).lines().next(), Some("1# \"server\" => \"redis\""));

    // Mass insertion: redis-cli --pipe streams raw RESP and counts the replies.
    let mut child = Command::new("redis-cli")
        .args(["-p", &server.port.to_string(), "--pipe"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = Vec::new();
    for i in 0..20_000 {
        let (k, v) = (format!("mass:{i}"), format!("value-{i}"));
        input
            .extend_from_slice(format!("*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n", k.len(), v.len()).as_bytes());
    }
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("errors: 0, replies: 20000"), "{text}");
    assert_eq!(cli(&server, &["GET", "mass:19999"]), "value-19999\n");
    assert_eq!(cli(&server, &["DBSIZE"]), "20002\n");
}

#[test]
fn redis_benchmark_set_get_runs_clean() {
    if !common::have_tool("redis-benchmark") {
        return;
    }
    let bench = "redis-benchmark";
    let server = Server::start(&[]);
    let out = Command::new(bench)
        .args(["-p", &server.port.to_string(), "-t", "set,get", "-n", "100000", "-c", "50", "-r", "10000", "-q"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "\n");
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    for test in ["SET", "GET"] {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{test}: ")) && l.contains("requests per second")),
            "{test} finished: {text}"
        );
    }
    assert!(!text.to_lowercase().contains("error"), "{text}");
    let keys: u64 = cli(&server, &["DBSIZE"]).trim().parse().unwrap();
    assert!((9_000..=10_000).contains(&keys), "random keys over a 10000 keyspace were written: {keys}");
    let info = cli(&server, &["INFO", "stats"]);
    let processed: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    assert!(processed >= 200_000, "every request was a command: {processed}");
}
