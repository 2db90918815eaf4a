//! DUMP and RESTORE (REPLACE, ABSTTL, IDLETIME, FREQ) with Redis's serialization (`crate::rdb`):
//! a payload from Redis 7.0's DUMP restores here, and Shale's restores in Redis.

use bytes::Bytes;

use super::super::collections::commit_event;
use super::{engine_error, get, parse_i64, NOT_INTEGER};
use crate::commands::{spec, CommandSpec, Session, ONE_KEY};
use crate::rdb;
use crate::resp::Reply;
use crate::services::notifications::GENERIC;
use crate::storage::now_ms;

pub(in crate::commands) static COMMANDS: &[CommandSpec] =
    &[spec("dump", 2, &["readonly"], ONE_KEY, dump), spec("restore", -4, &["write", "denyoom"], ONE_KEY, restore)];

fn dump(s: &mut Session, args: &[Bytes]) -> Reply {
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match get(s, s.db, &args[1]) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::Null,
        Err(e) => return e,
    };
    match view.read_value(&meta) {
        Ok(v) => Reply::Bulk(Bytes::from(rdb::dump(&v))),
        Err(e) => engine_error(e),
    }
}

/// `RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]`.
fn restore(s: &mut Session, args: &[Bytes]) -> Reply {
    let (mut replace, mut absttl, mut idle, mut freq) = (false, false, None, None);
    let mut j = 4;
    while j < args.len() {
        let more = args.len() - j - 1;
        match args[j].to_ascii_lowercase().as_slice() {
            b"replace" => replace = true,
            b"absttl" => absttl = true,
            b"idletime" if more >= 1 && freq.is_none() => {
                let Some(n) = parse_i64(&args[j + 1]) else { return Reply::error(NOT_INTEGER) };
                if n < 0 {
                    return Reply::error("ERR Invalid IDLETIME value, must be >= 0");
                }
                idle = Some(n);
                j += 1;
            }
            b"freq" if more >= 1 && idle.is_none() => {
                let Some(n) = parse_i64(&args[j + 1]) else { return Reply::error(NOT_INTEGER) };
                if !(0..=255).contains(&n) {
                    return Reply::error("ERR Invalid FREQ value, must be >= 0 and <= 255");
                }
                freq = Some(n);
                j += 1;
            }
            _ => return Reply::error("ERR syntax error"),
        }
        j += 1;
    }
    let key = &args[1];
    let state = std::sync::Arc::clone(&s.state);
    let guard = state.storage.lock(&s.exec, s.db, [&key[..]]);
    let existed = match get(s, s.db, key) {
        Ok(m) => m.is_some(),
        Err(e) => return e,
    };
    if existed && !replace {
        return Reply::error("BUSYKEY Target key name already exists.");
    }
    let Some(ttl) = parse_i64(&args[2]) else { return Reply::error(NOT_INTEGER) };
    if ttl < 0 {
        return Reply::error("ERR Invalid TTL value, must be >= 0");
    }
    let value = match rdb::restore(&args[3]) {
        Ok(v) => v,
        Err(e) => return Reply::error(e.message()),
    };
    let now = now_ms() as i64;
    let expire_at = if ttl != 0 && !absttl { ttl.saturating_add(now) } else { ttl };
    let view = state.storage.view(&s.exec, s.db);
    let mut b = lsm::WriteBatch::new();
    if expire_at != 0 && expire_at <= now {
        // Already expired: nothing is created, and a replaced key is simply gone.
        if !existed {
            return Reply::ok();
        }
        view.delete_meta(&mut b, key);
        return commit_event(s, b, Reply::ok(), (GENERIC, "del"), key, false);
    }
    let limits = crate::storage::ListpackLimits::of(&state.config());
    view.write_value(&mut b, key, value, expire_at as u64, limits);
    let reply = commit_event(s, b, Reply::ok(), (GENERIC, "restore"), key, false);
    // A new value, last used `IDLETIME` seconds ago or with counter `FREQ` where the policy
    // keeps that (as Redis's `objectSetLRUOrLFU`).
    s.state.access.touch(s.db, key);
    if let Some(idle) = idle {
        s.state.access.set_idle(s.db, key, idle as u64);
    }
    if let Some(freq) = freq {
        s.state.access.set_freq(s.db, key, freq as u8);
    }
    drop(guard);
    s.signal(key);
    reply
}
