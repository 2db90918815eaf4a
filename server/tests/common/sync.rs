//! Waiting for servers and comparing a replica with its primary (replication and sentinel
//! tests).

use std::time::{Duration, Instant};

use super::Server;

/// An INFO field; None if the connection failed (sentinel kills normal clients) or it is absent.
pub fn try_info(c: &mut redis::Connection, field: &str) -> Option<String> {
    let text: String = redis::cmd("INFO").arg("everything").query(c).ok()?;
    text.lines().find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))
}

/// A new connection to `s`, or None if it failed (sentinel kills normal clients, also new ones).
pub fn try_client(s: &Server) -> Option<redis::Connection> {
    redis::Client::open(format!("redis://127.0.0.1:{}/", s.port)).ok()?.get_connection().ok()
}

/// Polls `cond` for up to 20 s.
pub fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    wait_for_secs(20, what, cond)
}

/// Polls `cond` for up to `secs` seconds.
pub fn wait_for_secs(secs: u64, what: &str, cond: impl FnMut() -> bool) {
    assert!(waited(secs, cond), "timed out waiting for {what}");
}

/// Polls `cond` for up to `secs` seconds; whether it came true.
pub fn waited(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// What [`assert_in_sync`] compares: the digest and DBSIZE of databases 0-3.
pub fn contents(c: &mut redis::Connection) -> Option<(String, Vec<i64>)> {
    let mut sizes = Vec::new();
    for db in 0..4 {
        redis::cmd("SELECT").arg(db).query::<()>(c).ok()?;
        sizes.push(redis::cmd("DBSIZE").query(c).ok()?);
    }
    Some((redis::cmd("DEBUG").arg("DIGEST").query(c).ok()?, sizes))
}

/// Waits until `r` has applied everything `p` has and they hold the same data: the same
/// digest and DBSIZE per database, read while neither moved (the primary's expiry cycle may
/// delete keys in between; a replica sees those deletes a moment later). A key whose TTL
/// passes between the two reads is in one digest and not the other: such a difference goes
/// away on the next look; a real one stays until the deadline. Fresh connections each look.
pub fn assert_in_sync(p: &Server, r: &Server) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (Some(mut pc), Some(mut rc)) = (try_client(p), try_client(r)) else {
            assert!(Instant::now() < deadline, "could not connect to compare the servers");
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        let mut offsets = || {
            Some((
                try_info(&mut pc, "master_repl_offset")?,
                try_info(&mut rc, "slave_repl_offset")?,
                try_info(&mut rc, "master_link_status")?,
            ))
        };
        let before = offsets();
        let mut seen = None;
        if let Some((ours, theirs, link)) = &before {
            if ours == theirs && link == "up" {
                let (theirs, ours) = (
                    try_client(p).and_then(|mut c| contents(&mut c)),
                    try_client(r).and_then(|mut c| contents(&mut c)),
                );
                if offsets() == before && theirs.is_some() {
                    if ours == theirs {
                        return;
                    }
                    seen = Some((ours, theirs));
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "the replica did not catch up: offsets {before:?}, (replica, primary) digest and DBSIZEs {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
