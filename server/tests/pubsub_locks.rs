//! Pub/sub and LOCK/UNLOCK against a real `shale-server`: fan-out, patterns, RESP2 subscribed
//! mode and RESP3 pushes, slow subscribers cut off by the output buffer limit, lock handoff order,
//! DEADLOCK, timeouts and release on disconnect.

mod common;

use std::io::{Read, Write};
use std::thread;
use std::time::{Duration, Instant};

use common::{roundtrip, Server};
use redis::cmd;

/// Reads from `s` until `want` bytes arrived.
fn read_exact_text(s: &mut std::net::TcpStream, want: usize) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while out.len() < want {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn publish_fans_out_to_a_hundred_subscribers_and_patterns() {
    let server = Server::start(&[]);
    let mut subs: Vec<_> = (0..100)
        .map(|_| {
            let mut s = server.raw();
            let want = "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n";
            assert_eq!(String::from_utf8_lossy(&roundtrip(&mut s, b"SUBSCRIBE news\r\n", want.len())), want);
            s
        })
        .collect();
    let mut pattern = server.raw();
    let want = "*3\r\n$10\r\npsubscribe\r\n$5\r\nn?ws*\r\n:1\r\n";
    assert_eq!(String::from_utf8_lossy(&roundtrip(&mut pattern, b"PSUBSCRIBE n?ws*\r\n", want.len())), want);
    let mut c = server.client();
    assert_eq!(cmd("PUBLISH").arg("news").arg("hello").query::<i64>(&mut c).unwrap(), 101);
    for s in &mut subs {
        let msg = "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$5\r\nhello\r\n";
        assert_eq!(read_exact_text(s, msg.len()), msg);
    }
    let pmsg = "*4\r\n$8\r\npmessage\r\n$5\r\nn?ws*\r\n$4\r\nnews\r\n$5\r\nhello\r\n";
    assert_eq!(read_exact_text(&mut pattern, pmsg.len()), pmsg);
    assert_eq!(cmd("PUBLISH").arg("nowhere").arg("x").query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(cmd("PUBSUB").arg("NUMSUB").arg("news").query::<(String, i64)>(&mut c).unwrap(), ("news".into(), 100));
    assert_eq!(cmd("PUBSUB").arg("NUMPAT").query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(cmd("PUBSUB").arg("CHANNELS").arg("n*").query::<Vec<String>>(&mut c).unwrap(), ["news"]);
    drop(subs);
    // Disconnected subscribers are gone.
    let deadline = Instant::now() + Duration::from_secs(5);
    while cmd("PUBSUB").arg("NUMSUB").arg("news").query::<(String, i64)>(&mut c).unwrap().1 != 0 {
        assert!(Instant::now() < deadline);
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn subscribed_mode_rules_in_resp2_and_pushes_in_resp3() {
    let server = Server::start(&[]);
    let mut s = server.raw();
    let both = "*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n";
    assert_eq!(String::from_utf8_lossy(&roundtrip(&mut s, b"SUBSCRIBE a b\r\n", both.len())), both);
    let script: &[(&[u8], &str)] = &[
        (
            b"GET k\r\n",
            "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n",
        ),
        (b"PING\r\n", "*2\r\n$4\r\npong\r\n$0\r\n\r\n"),
        (b"UNSUBSCRIBE a\r\n", "*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:1\r\n"),
        (b"UNSUBSCRIBE\r\n", "*3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:0\r\n"),
        (b"UNSUBSCRIBE\r\n", "*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n"),
        (b"GET k\r\n", "$-1\r\n"),
    ];
    for (req, want) in script {
        assert_eq!(String::from_utf8_lossy(&roundtrip(&mut s, req, want.len())), *want);
    }
    // RESP3: messages are pushes and ordinary commands keep working.
    let mut r3 = server.raw();
    let hello = roundtrip(&mut r3, b"HELLO 3\r\n", 1);
    assert!(hello.starts_with(b"%"));
    thread::sleep(Duration::from_millis(50));
    let mut sink = [0u8; 4096];
    r3.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let _ = r3.read(&mut sink);
    r3.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let sub = ">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n";
    assert_eq!(String::from_utf8_lossy(&roundtrip(&mut r3, b"SUBSCRIBE ch\r\n", sub.len())), sub);
    assert_eq!(String::from_utf8_lossy(&roundtrip(&mut r3, b"SET k v\r\n", 5)), "+OK\r\n");
    let mut c = server.client();
    cmd("PUBLISH").arg("ch").arg("m").query::<i64>(&mut c).unwrap();
    let push = ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nm\r\n";
    assert_eq!(read_exact_text(&mut r3, push.len()), push);
}

/// As in Redis 7, `CLIENT REPLY OFF` silences replies but not pub/sub: (un)subscribe
/// confirmations and messages still arrive; the next ordinary reply stays silent.
#[test]
fn client_reply_off_still_delivers_confirmations_and_messages() {
    let server = Server::start(&[]);
    let mut s = server.raw();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"CLIENT REPLY OFF\r\n").unwrap();
    let sub = "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n";
    assert_eq!(String::from_utf8_lossy(&roundtrip(&mut s, b"SUBSCRIBE ch\r\n", sub.len())), sub);
    let mut c = server.client();
    assert_eq!(cmd("PUBLISH").arg("ch").arg("m").query::<i64>(&mut c).unwrap(), 1);
    let msg = "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nm\r\n";
    assert_eq!(read_exact_text(&mut s, msg.len()), msg);
    // PING's reply is silenced; the unsubscribe confirmation after it is the next thing read.
    let unsub = "*3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:0\r\n";
    assert_eq!(String::from_utf8_lossy(&roundtrip(&mut s, b"PING\r\nUNSUBSCRIBE ch\r\n", unsub.len())), unsub);
}

#[test]
fn a_subscriber_that_does_not_read_is_cut_off() {
    let server = Server::start(&["--client-output-buffer-limit", "pubsub 256kb 0 0"]);
    let mut slow = server.raw();
    let ok = "*3\r\n$9\r\nsubscribe\r\n$8\r\nfirehose\r\n:1\r\n";
    assert_eq!(String::from_utf8_lossy(&roundtrip(&mut slow, b"SUBSCRIBE firehose\r\n", ok.len())), ok);
    let mut c = server.client();
    let payload = "x".repeat(64 * 1024);
    let mut delivered_to = Vec::new();
    for _ in 0..400 {
        delivered_to.push(cmd("PUBLISH").arg("firehose").arg(&payload).query::<i64>(&mut c).unwrap());
        if delivered_to.last() == Some(&0) {
            break;
        }
    }
    assert_eq!(delivered_to.last(), Some(&0), "the slow subscriber was disconnected, not buffered forever");
    // The server stays healthy for everyone else, and the slow connection is closed.
    assert_eq!(cmd("PING").query::<String>(&mut c).unwrap(), "PONG");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let info: String = cmd("INFO").arg("clients").query(&mut c).unwrap();
        if info.contains("connected_clients:1\r\n") {
            break;
        }
        assert!(Instant::now() < deadline, "the slow subscriber's connection stayed open: {info}");
        thread::sleep(Duration::from_millis(20));
    }
    let _ = slow.write_all(b"PING\r\n");
}

#[test]
fn locks_hand_over_in_order_and_are_released_on_disconnect() {
    let server = Server::start(&[]);
    let mut owner = server.client();
    assert_eq!(cmd("LOCK").arg("job").query::<String>(&mut owner).unwrap(), "OK");
    let e = cmd("LOCK").arg("job").arg(100).query::<String>(&mut owner).unwrap_err();
    assert_eq!(e.code(), Some("DEADLOCK"));
    let mut other = server.client();
    assert_eq!(cmd("LOCK").arg("job").query::<String>(&mut other).unwrap_err().code(), Some("LOCKED"));
    let t = Instant::now();
    let e = cmd("LOCK").arg("job").arg(150).query::<String>(&mut other).unwrap_err();
    assert_eq!(e.code(), Some("TIMEOUT"));
    assert!(t.elapsed() >= Duration::from_millis(150));
    // Three waiters get the lock in the order they asked.
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3 {
        let mut c = server.client();
        let order = std::sync::Arc::clone(&order);
        waiters.push(thread::spawn(move || {
            assert_eq!(cmd("LOCK").arg("job").arg(5000).query::<String>(&mut c).unwrap(), "OK");
            order.lock().unwrap().push(i);
            thread::sleep(Duration::from_millis(20));
            assert_eq!(cmd("UNLOCK").arg("job").query::<String>(&mut c).unwrap(), "OK");
        }));
        thread::sleep(Duration::from_millis(50)); // arrival order
    }
    assert_eq!(cmd("UNLOCK").arg("job").query::<String>(&mut owner).unwrap(), "OK");
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
    assert_eq!(
        cmd("UNLOCK").arg("job").query::<String>(&mut owner).unwrap_err().detail(),
        Some("lock 'job' is not locked")
    );
    // A lock held by a client that disconnects goes to the next waiter.
    let mut holder = server.client();
    cmd("LOCK").arg("job").query::<String>(&mut holder).unwrap();
    let waiter = thread::spawn(move || cmd("LOCK").arg("job").arg(5000).query::<String>(&mut other).unwrap());
    thread::sleep(Duration::from_millis(50));
    drop(holder);
    assert_eq!(waiter.join().unwrap(), "OK");
    // Locks have their own namespace.
    cmd("SET").arg("job").arg("a string").query::<()>(&mut owner).unwrap();
    assert_eq!(cmd("GET").arg("job").query::<String>(&mut owner).unwrap(), "a string");
}
