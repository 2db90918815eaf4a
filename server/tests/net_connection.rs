//! The network layer against a real `shale-server` process: connection commands through the
//! `redis` crate, pipelining, RESP3, protocol abuse, maxclients, config errors, SIGTERM.

mod common;

use std::io::Read;
use std::process::Command;

use common::{roundtrip, Server};

#[test]
fn connection_commands_through_a_real_client() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(redis::cmd("PING").query::<String>(&mut c).unwrap(), "PONG");
    assert_eq!(redis::cmd("ECHO").arg("hello world").query::<String>(&mut c).unwrap(), "hello world");
    assert_eq!(redis::cmd("SELECT").arg(15).query::<String>(&mut c).unwrap(), "OK");
    let err = redis::cmd("SELECT").arg(16).query::<String>(&mut c).unwrap_err();
    assert_eq!(err.detail(), Some("DB index is out of range"), "{err}");
    let err = redis::cmd("NOSUCHCMD").arg("a").query::<String>(&mut c).unwrap_err();
    assert!(err.to_string().contains("unknown command 'NOSUCHCMD', with args beginning with: 'a'"), "{err}");
    let err = redis::cmd("ECHO").query::<String>(&mut c).unwrap_err();
    assert!(err.to_string().contains("wrong number of arguments for 'echo' command"), "{err}");
    let n: i64 = redis::cmd("COMMAND").arg("COUNT").query(&mut c).unwrap();
    assert!(n >= 6);
}

#[test]
fn ten_thousand_pipelined_commands_answer_in_order() {
    let server = Server::start(&[]);
    let mut s = server.raw();
    let mut req = Vec::new();
    for i in 0..10_000 {
        req.extend_from_slice(format!("*2\r\n$4\r\nECHO\r\n${}\r\n{i}\r\n", i.to_string().len()).as_bytes());
    }
    let expected: Vec<u8> =
        (0..10_000).flat_map(|i| format!("${}\r\n{i}\r\n", i.to_string().len()).into_bytes()).collect();
    let got = roundtrip(&mut s, &req, expected.len());
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "replies out of order or damaged");
    // Inline commands work too.
    assert_eq!(roundtrip(&mut s, b"PING\r\n", 7), b"+PONG\r\n");
}

#[test]
fn resp3_after_hello_3() {
    let server = Server::start(&[]);
    let mut s = server.raw();
    std::io::Write::write_all(&mut s, b"HELLO 3\r\nHELLO 4\r\n").unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while !reply.ends_with(b"-NOPROTO unsupported protocol version\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&reply));
        reply.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&reply);
    assert!(text.starts_with("%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n"), "{text}");
    assert!(text.contains("$5\r\nproto\r\n:3\r\n"), "{text}");
}

#[test]
fn protocol_abuse_closes_only_the_offending_connection() {
    let server = Server::start(&["--proto-max-bulk-len", "1mb"]);
    let mut good = server.client();
    let cases: &[(&[u8], &str)] = &[
        (b"*1\r\n$abc\r\n", "-ERR Protocol error: invalid bulk length\r\n"),
        (b"*1\r\n$2000000\r\n", "-ERR Protocol error: invalid bulk length\r\n"),
        (b"*3000000000\r\n", "-ERR Protocol error: invalid multibulk length\r\n"),
        (b"*2\r\n$4\r\nECHO\r\nxx\r\n", "-ERR Protocol error: expected '$', got 'x'\r\n"),
        (b"ECHO \"unbalanced\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"),
    ];
    for (req, want) in cases {
        let mut s = server.raw();
        let got = roundtrip(&mut s, req, usize::MAX);
        assert_eq!(String::from_utf8_lossy(&got), *want, "then the connection closed");
    }
    // A half-sent command just waits; 1000 garbage connections come and go (ten threads of a
    // hundred each) while a well-behaved client keeps working and gets every reply right.
    let mut half = server.raw();
    std::io::Write::write_all(&mut half, b"*2\r\n$4\r\nECHO\r\n$5\r\nhel").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checker = {
        let mut c = server.client();
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                redis::cmd("SET").arg(format!("k{}", n % 50)).arg(n).query::<()>(&mut c).unwrap();
                assert_eq!(redis::cmd("GET").arg(format!("k{}", n % 50)).query::<u64>(&mut c).unwrap(), n);
                n += 1;
            }
            n
        })
    };
    let garbage: Vec<_> = (0..10u32)
        .map(|t| {
            let port = server.port;
            std::thread::spawn(move || {
                for i in 0..100u32 {
                    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
                    let junk: Vec<u8> = (0..64).map(|j| ((t * 977 + i * 31 + j * 7) % 251) as u8 | 0x80).collect();
                    let (req, want): (Vec<u8>, &[u8]) = match i % 4 {
                        0 => (
                            [b"*1\r\n$".as_slice(), &junk, b"\r\n"].concat(),
                            b"-ERR Protocol error: invalid bulk length\r\n",
                        ),
                        1 => (b"*1\r\n$9999999999\r\n".to_vec(), b"-ERR Protocol error: invalid bulk length\r\n"),
                        2 => (
                            [b"*".as_slice(), &junk, b"\r\n"].concat(),
                            b"-ERR Protocol error: invalid multibulk length\r\n",
                        ),
                        // Half a command, then the client vanishes.
                        _ => (b"*3\r\n$3\r\nSET\r\n$1\r\nk".to_vec(), b""),
                    };
                    if want.is_empty() {
                        std::io::Write::write_all(&mut s, &req).unwrap();
                        continue;
                    }
                    let got = roundtrip(&mut s, &req, usize::MAX);
                    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
                }
            })
        })
        .collect();
    for t in garbage {
        t.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(checker.join().unwrap() > 0, "the good client made progress throughout");
    assert_eq!(redis::cmd("PING").query::<String>(&mut good).unwrap(), "PONG");
    assert_eq!(roundtrip(&mut half, b"lo\r\n", 11), b"$5\r\nhello\r\n");
}

#[test]
fn maxclients_refuses_extra_connections() {
    let server = Server::start(&["--maxclients", "2"]);
    let mut a = server.client();
    // The harness's readiness probe may still be counted for a moment; wait until only `a` is.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !redis::cmd("INFO").arg("clients").query::<String>(&mut a).unwrap().contains("connected_clients:1\r\n") {
        assert!(std::time::Instant::now() < deadline, "the probe connection was never released");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut b = server.client();
    let mut third = server.raw();
    let got = roundtrip(&mut third, b"", 40);
    assert_eq!(String::from_utf8_lossy(&got), "-ERR max number of clients reached\r\n");
    assert_eq!(redis::cmd("PING").query::<String>(&mut a).unwrap(), "PONG");
    assert_eq!(redis::cmd("PING").query::<String>(&mut b).unwrap(), "PONG");
}

#[test]
fn sigterm_stops_cleanly_and_config_errors_name_the_line() {
    let mut server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(redis::cmd("PING").query::<String>(&mut c).unwrap(), "PONG");
    assert!(server.terminate().success(), "exit status 0 after SIGTERM");
    assert!(server.dir.path().join("data").join("CURRENT").exists(), "the data directory holds a database");

    let out = Command::new(env!("CARGO_BIN_EXE_shale-server")).args(["--port", "70000"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("FATAL CONFIG FILE ERROR") && stderr.contains("Invalid port"), "{stderr}");
}

#[test]
fn pipelined_sets_are_batched_but_answer_in_order() {
    let server = Server::start(&[]);
    let mut s = server.raw();
    let req = b"SET a 1\r\nSET b 2\r\nGET a\r\nSET a 3\r\nCLIENT REPLY SKIP\r\nSET c 4\r\nGET a\r\nSET d 5 NX\r\nMGET a b c d\r\n";
    let want = "+OK\r\n+OK\r\n$1\r\n1\r\n+OK\r\n$1\r\n3\r\n+OK\r\n*4\r\n$1\r\n3\r\n$1\r\n2\r\n$1\r\n4\r\n$1\r\n5\r\n";
    let got = roundtrip(&mut s, req, want.len());
    assert_eq!(String::from_utf8_lossy(&got), want);
    // Another client sees every write once the replies have arrived.
    let mut c = server.client();
    assert_eq!(
        redis::cmd("MGET").arg(&["a", "b", "c", "d"]).query::<Vec<String>>(&mut c).unwrap(),
        ["3", "2", "4", "5"]
    );
}
