//! AUTH with requirepass, INFO, TIME and CLIENT against a real `shale-server`.

mod common;

use common::{roundtrip, Server};
use redis::{cmd, Value};

#[test]
fn requirepass_demands_auth_first() {
    let server = Server::start(&["--requirepass", "s3cret"]);
    let mut s = server.raw();
    assert_eq!(roundtrip(&mut s, b"PING\r\n", 31), b"-NOAUTH Authentication required.\r\n");
    assert_eq!(roundtrip(&mut s, b"GET k\r\n", 31), b"-NOAUTH Authentication required.\r\n");
    let wrong = roundtrip(&mut s, b"AUTH nope\r\n", 10);
    assert!(wrong.starts_with(b"-WRONGPASS invalid username-password pair"), "{}", String::from_utf8_lossy(&wrong));
    let hello = roundtrip(&mut s, b"HELLO 3\r\n", 10);
    assert!(
        hello.starts_with(b"-NOAUTH HELLO must be called with the client already authenticated"),
        "{}",
        String::from_utf8_lossy(&hello)
    );
    assert_eq!(roundtrip(&mut s, b"AUTH s3cret\r\n", 5), b"+OK\r\n");
    assert_eq!(roundtrip(&mut s, b"PING\r\n", 7), b"+PONG\r\n");
    // AUTH with the default user, and HELLO … AUTH on a fresh connection.
    let mut t = server.raw();
    assert_eq!(roundtrip(&mut t, b"AUTH default s3cret\r\n", 5), b"+OK\r\n");
    let mut u = server.raw();
    let hello = roundtrip(&mut u, b"HELLO 3 AUTH default s3cret\r\n", 4);
    assert!(hello.starts_with(b"%7\r\n"), "{}", String::from_utf8_lossy(&hello));
    // A client library with the password in its URL just works.
    let client = redis::Client::open(format!("redis://:s3cret@127.0.0.1:{}/", server.port)).unwrap();
    let mut c = client.get_connection().unwrap();
    assert_eq!(cmd("SET").arg("k").arg("v").query::<String>(&mut c).unwrap(), "OK");
}

#[test]
fn auth_without_a_password_configured_is_an_error() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let e = cmd("AUTH").arg("x").query::<Value>(&mut c).unwrap_err().to_string();
    assert!(e.contains("called without any password configured for the default user"), "{e}");
}

#[test]
fn info_time_and_client_commands() {
    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("SET").arg("a").arg("1").query::<()>(&mut c).unwrap();
    cmd("SET").arg("b").arg("2").arg("EX").arg(100).query::<()>(&mut c).unwrap();
    cmd("SELECT").arg(5).query::<()>(&mut c).unwrap();
    cmd("SET").arg("c").arg("3").query::<()>(&mut c).unwrap();
    cmd("GET").arg("c").query::<String>(&mut c).unwrap();
    cmd("GET").arg("nope").query::<Value>(&mut c).unwrap();
    let info: String = cmd("INFO").query(&mut c).unwrap();
    for field in [
        "# Server",
        "redis_version:",
        "connected_clients:1",
        "total_commands_processed:",
        "keyspace_hits:1",
        "keyspace_misses:1",
        "role:master",
        "used_cpu_user:",
        "# LSM",
        "lsm_l0_files:",
        "used_memory_rss_anon:",
        "used_memory_rss_file:",
        "lsm_mapped_table_bytes:",
        "mem_allocator:jemalloc",
        "executor_threads:",
    ] {
        assert!(info.contains(field), "INFO lacks {field}:\n{info}");
    }
    // jemalloc's view of its memory, as Redis reports it: allocated <= active <= resident.
    let field = |name: &str| -> i64 {
        let line = info.lines().find_map(|l| l.strip_prefix(name).and_then(|l| l.strip_prefix(':')));
        line.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("INFO lacks {name}:\n{info}"))
    };
    let (allocated, active, resident) =
        (field("allocator_allocated"), field("allocator_active"), field("allocator_resident"));
    assert!(allocated > 0 && active >= allocated && resident >= active, "{info}");
    assert_eq!(field("allocator_frag_bytes"), active - allocated);
    assert_eq!(field("allocator_rss_bytes"), resident - active);
    for ratio in ["allocator_frag_ratio:", "allocator_rss_ratio:", "rss_overhead_ratio:", "rss_overhead_bytes:"] {
        assert!(info.contains(ratio), "INFO lacks {ratio}\n{info}");
    }
    assert!(info.contains("db5:keys=1,expires=0,avg_ttl=0\r\n"), "{info}");
    // avg_ttl is the remaining TTL in ms, as Redis reports it (b was set with EX 100).
    let db0 = info.lines().find(|l| l.starts_with("db0:")).unwrap_or_default();
    let avg: u64 = db0.strip_prefix("db0:keys=2,expires=1,avg_ttl=").and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!((90_000..=100_000).contains(&avg), "{info}");
    let keyspace: String = cmd("INFO").arg("keyspace").query(&mut c).unwrap();
    assert!(keyspace.starts_with("# Keyspace\r\n") && !keyspace.contains("# Server"), "{keyspace}");
    let t: Vec<String> = cmd("TIME").query(&mut c).unwrap();
    let secs: u64 = t[0].parse().unwrap();
    assert!(secs > 1_700_000_000 && t[1].parse::<u32>().unwrap() < 1_000_000);
    assert!(cmd("CLIENT").arg("ID").query::<i64>(&mut c).unwrap() > 0);
    assert_eq!(cmd("CLIENT").arg("GETNAME").query::<Value>(&mut c).unwrap(), Value::Nil);
    cmd("CLIENT").arg("SETNAME").arg("worker-1").query::<()>(&mut c).unwrap();
    assert_eq!(cmd("CLIENT").arg("GETNAME").query::<String>(&mut c).unwrap(), "worker-1");
    let e = cmd("CLIENT").arg("SETNAME").arg("has space").query::<Value>(&mut c).unwrap_err().to_string();
    assert!(e.contains("Client names cannot contain spaces"), "{e}");
}
