//! Client-side caching (`CLIENT TRACKING`) against a real `shale-server`, byte for byte the
//! way redis-server answers: one scripted session of several connections (default mode with a
//! RESP2 redirect, BCAST with prefixes, RESP3 pushes to the client itself, OPTIN, NOLOOP,
//! flushes, the tracking table's bound) is run against both and the transcripts must match;
//! the transcript is also checked against what Redis 7.0 is documented to send, so the test
//! holds where redis-server is not installed.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::Server;

/// A raw connection that renders each RESP2/RESP3 reply as compact text.
struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(port: u16) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Conn { s, buf: Vec::new() }
    }

    fn send(&mut self, args: &[&str]) {
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req += &format!("${}\r\n{a}\r\n", a.len());
        }
        self.s.write_all(req.as_bytes()).unwrap();
    }

    /// The next reply (or push), rendered.
    fn read(&mut self) -> String {
        loop {
            let mut pos = 0;
            if let Some(v) = render(&self.buf, &mut pos) {
                self.buf.drain(..pos);
                return v;
            }
            let mut chunk = [0u8; 4096];
            let n = self.s.read(&mut chunk).expect("a reply within 10 s");
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn call(&mut self, args: &[&str]) -> String {
        self.send(args);
        self.read()
    }
}

/// Renders one RESP value from `b[*pos..]`, or None if it is not complete yet.
fn render(b: &[u8], pos: &mut usize) -> Option<String> {
    let line_end = b[*pos..].windows(2).position(|w| w == b"\r\n")? + *pos;
    let kind = b[*pos];
    let line = String::from_utf8_lossy(&b[*pos + 1..line_end]).into_owned();
    *pos = line_end + 2;
    let aggregate = |open: &str, n: usize, pos: &mut usize| -> Option<String> {
        let mut items = Vec::new();
        for _ in 0..n {
            items.push(render(b, pos)?);
        }
        let close = if open == "{" { "}" } else { "]" };
        Some(format!("{open}{}{close}", items.join(",")))
    };
    match kind {
        b'+' | b'-' | b':' => Some(format!("{}{line}", kind as char)),
        b'_' => Some("nil".into()),
        b'$' => {
            let n: i64 = line.parse().ok()?;
            if n < 0 {
                return Some("nil".into());
            }
            let end = *pos + n as usize;
            if b.len() < end + 2 {
                return None;
            }
            let s = String::from_utf8_lossy(&b[*pos..end]).into_owned();
            *pos = end + 2;
            Some(s)
        }
        b'*' | b'>' | b'~' => {
            let n: i64 = line.parse().ok()?;
            if n < 0 {
                return Some("nil".into());
            }
            aggregate(if kind == b'>' { ">[" } else { "[" }, n as usize, pos)
        }
        b'%' => {
            let n: usize = line.parse().ok()?;
            aggregate("{", 2 * n, pos)
        }
        other => panic!("unexpected RESP type {:?}", other as char),
    }
}

/// Sorts the keys inside `…[k1,k2]]`-shaped renderings (BCAST key order is the server's).
fn sorted_keys(msg: String) -> String {
    let Some(open) = msg.rfind('[') else { return msg };
    let close = msg[open..].find(']').map(|i| open + i).unwrap_or(msg.len());
    let mut keys: Vec<&str> = msg[open + 1..close].split(',').collect();
    keys.sort();
    format!("{}{}{}", &msg[..=open], keys.join(","), &msg[close..])
}

/// The scripted session; returns what the connections received, line by line.
fn session(port: u16) -> Vec<String> {
    let mut t = Vec::new();
    let mut log = |what: &str, got: String| t.push(format!("{what} -> {got}"));
    let mut redir = Conn::open(port);
    let id = redir.call(&["CLIENT", "ID"]).trim_start_matches(':').to_string();
    log("redir SUBSCRIBE", redir.call(&["SUBSCRIBE", "__redis__:invalidate"]));
    let mut w = Conn::open(port);
    let mut b = Conn::open(port);

    // Default mode, redirected to a RESP2 subscriber.
    log("b TRACKING on REDIRECT", b.call(&["CLIENT", "TRACKING", "on", "REDIRECT", &id]));
    w.call(&["MSET", "a", "1", "b", "1"]);
    log("b GET a", b.call(&["GET", "a"]));
    w.call(&["INCR", "b"]);
    w.call(&["INCR", "a"]);
    log("redir", redir.read());
    // The entry was forgotten: a second write sends nothing (PING's reply comes next).
    w.call(&["INCR", "a"]);
    log("redir PING", redir.call(&["PING"]));
    log("b GETREDIR", b.call(&["CLIENT", "GETREDIR"]).replace(&id, "<id>"));

    // BCAST with prefixes: one message per prefix for a transaction's writes.
    b.call(&["CLIENT", "TRACKING", "off"]);
    log("b BCAST", b.call(&["CLIENT", "TRACKING", "on", "BCAST", "REDIRECT", &id, "PREFIX", "a:", "PREFIX", "b:"]));
    log("b overlapping PREFIX", b.call(&["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "a:x"]));
    b.call(&["MULTI"]);
    for k in ["a:1", "a:2", "b:1", "c:1"] {
        b.call(&["INCR", k]);
    }
    log("b EXEC", b.call(&["EXEC"]));
    let mut two = [sorted_keys(redir.read()), sorted_keys(redir.read())];
    two.sort();
    log("redir (two prefixes)", two.join(" "));
    log("b TRACKINGINFO", b.call(&["CLIENT", "TRACKINGINFO"]).replace(&id, "<id>"));
    b.call(&["CLIENT", "TRACKING", "off"]);

    // RESP3: pushes to the client itself, after the reply of the command that caused them.
    let mut c = Conn::open(port);
    c.call(&["HELLO", "3"]);
    log("c TRACKING on", c.call(&["CLIENT", "TRACKING", "on"]));
    c.call(&["HSET", "h", "f", "1"]);
    log("c HGET", c.call(&["HGET", "h", "f"]));
    log("c HDEL", c.call(&["HDEL", "h", "f"]));
    log("c", c.read());
    c.call(&["GET", "k"]);
    w.call(&["SET", "k", "v"]);
    log("c PING", c.call(&["PING"]));
    log("c", c.read());

    // OPTIN: only what follows CLIENT CACHING yes is remembered.
    let mut d = Conn::open(port);
    d.call(&["HELLO", "3"]);
    log("d CACHING before TRACKING", d.call(&["CLIENT", "CACHING", "yes"]));
    log("d TRACKING on OPTIN", d.call(&["CLIENT", "TRACKING", "on", "OPTIN"]));
    d.call(&["GET", "x"]);
    w.call(&["SET", "x", "1"]);
    log("d PING (nothing pending)", d.call(&["PING"]));
    log("d CACHING no", d.call(&["CLIENT", "CACHING", "no"]));
    log("d CACHING yes", d.call(&["CLIENT", "CACHING", "yes"]));
    log("d TRACKINGINFO", d.call(&["CLIENT", "TRACKINGINFO"]));
    d.call(&["GET", "x"]);
    w.call(&["SET", "x", "2"]);
    log("d PING", d.call(&["PING"]));
    log("d", d.read());

    // NOLOOP: a client's own writes are not reported to it.
    let mut e = Conn::open(port);
    e.call(&["HELLO", "3"]);
    e.call(&["CLIENT", "TRACKING", "on", "NOLOOP"]);
    e.call(&["GET", "n"]);
    e.call(&["SET", "n", "1"]);
    log("e PING (own write)", e.call(&["PING"]));
    log("e RESET", e.call(&["RESET"]));
    log("e TRACKINGINFO after RESET", e.call(&["CLIENT", "TRACKINGINFO"]));

    // A flush tells every tracking client "everything".
    c.call(&["GET", "k"]);
    w.call(&["FLUSHALL"]);
    log("c PING", c.call(&["PING"]));
    log("c", c.read());
    log("d PING", d.call(&["PING"]));
    log("d", d.read());

    // The table's bound: past it, remembered keys are invalidated as if written.
    for k in ["t1", "t2", "t3"] {
        c.call(&["GET", k]);
    }
    w.call(&["CONFIG", "SET", "tracking-table-max-keys", "1"]);
    let mut evicted = [c.read(), c.read()];
    evicted.sort();
    log("c (evicted two of three)", format!("{}", evicted.iter().filter(|m| m.starts_with(">[invalidate,[t")).count()));
    w.call(&["CONFIG", "SET", "tracking-table-max-keys", "1000000"]);
    log("c PING", c.call(&["PING"]));

    // A redirect target that went away.
    b.call(&["HELLO", "3"]);
    let mut gone = Conn::open(port);
    let gone_id = gone.call(&["CLIENT", "ID"]).trim_start_matches(':').to_string();
    b.call(&["CLIENT", "TRACKING", "on", "REDIRECT", &gone_id]);
    b.call(&["GET", "z"]);
    gone.call(&["QUIT"]);
    drop(gone);
    std::thread::sleep(Duration::from_millis(200));
    w.call(&["SET", "z", "1"]);
    log("b PING", b.call(&["PING"]).replace(&gone_id, "<id>"));
    log("b", b.read());
    log("b TRACKINGINFO", b.call(&["CLIENT", "TRACKINGINFO"]).replace(&gone_id, "<id>"));
    t
}

const EXPECTED: &[&str] = &[
    "redir SUBSCRIBE -> [subscribe,__redis__:invalidate,:1]",
    "b TRACKING on REDIRECT -> +OK",
    "b GET a -> 1",
    "redir -> [message,__redis__:invalidate,[a]]",
    "redir PING -> [pong,]",
    "b GETREDIR -> :<id>",
    "b BCAST -> +OK",
    "b overlapping PREFIX -> -ERR Prefix 'a:x' overlaps with an existing prefix 'a:'. Prefixes for a single client must not overlap.",
    "b EXEC -> [:1,:1,:1,:1]",
    "redir (two prefixes) -> [message,__redis__:invalidate,[a:1,a:2]] [message,__redis__:invalidate,[b:1]]",
    "b TRACKINGINFO -> [flags,[on,bcast],redirect,:<id>,prefixes,[a:,b:]]",
    "c TRACKING on -> +OK",
    "c HGET -> 1",
    "c HDEL -> :1",
    "c -> >[invalidate,[h]]",
    "c PING -> >[invalidate,[k]]",
    "c -> +PONG",
    "d CACHING before TRACKING -> -ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled",
    "d TRACKING on OPTIN -> +OK",
    "d PING (nothing pending) -> +PONG",
    "d CACHING no -> -ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
    "d CACHING yes -> +OK",
    "d TRACKINGINFO -> {flags,[on,optin,caching-yes],redirect,:0,prefixes,[]}",
    "d PING -> >[invalidate,[x]]",
    "d -> +PONG",
    "e PING (own write) -> +PONG",
    "e RESET -> +RESET",
    "e TRACKINGINFO after RESET -> [flags,[off],redirect,:-1,prefixes,[]]",
    "c PING -> >[invalidate,nil]",
    "c -> +PONG",
    "d PING -> >[invalidate,nil]",
    "d -> +PONG",
    "c (evicted two of three) -> 2",
    "c PING -> +PONG",
    "b PING -> >[tracking-redir-broken,:<id>]",
    "b -> +PONG",
    "b TRACKINGINFO -> {flags,[on,broken_redirect],redirect,:<id>,prefixes,[]}",
];

#[test]
fn client_tracking_matches_redis_byte_for_byte() {
    let server = Server::start(&[]);
    let shale = session(server.port);
    if let Some((_redis, _, port)) = common::start_redis() {
        assert_eq!(shale, session(port), "Shale's transcript (left) against redis-server's (right)");
    }
    assert_eq!(shale, EXPECTED, "the transcript");
}

#[test]
fn tracking_counts_show_in_info_and_client_list() {
    let server = Server::start(&[]);
    let mut a = Conn::open(server.port);
    let mut b = Conn::open(server.port);
    a.call(&["HELLO", "3"]);
    a.call(&["CLIENT", "TRACKING", "on"]);
    a.call(&["MGET", "k1", "k2"]);
    b.call(&["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "p:"]);
    let mut c = server.client();
    let info: String = redis::cmd("INFO").query(&mut c).unwrap();
    for field in ["tracking_clients:2", "tracking_total_keys:2", "tracking_total_items:2", "tracking_total_prefixes:1"]
    {
        assert!(info.contains(&format!("{field}\r\n")), "{field} in {info}");
    }
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut c).unwrap();
    assert_eq!(list.matches(" flags=t ").count(), 1, "{list}");
    assert_eq!(list.matches(" flags=tB ").count(), 1, "{list}");
    // Closing the tracking clients leaves nothing behind.
    drop((a, b));
    std::thread::sleep(Duration::from_millis(300));
    let info: String = redis::cmd("INFO").query(&mut c).unwrap();
    for field in ["tracking_clients:0", "tracking_total_keys:0", "tracking_total_items:0", "tracking_total_prefixes:0"]
    {
        assert!(info.contains(&format!("{field}\r\n")), "{field} in {info}");
    }
}
