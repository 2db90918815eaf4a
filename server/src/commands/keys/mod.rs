//! Generic key commands: DEL, UNLINK, EXISTS, TYPE, TTL, PTTL, EXPIRE, PEXPIRE, EXPIREAT,
//! PEXPIREAT (NX XX GT LT), PERSIST, DBSIZE, FLUSHDB, FLUSHALL here; moving keys in
//! [`relocate`], walking and inspecting them in [`inspect`], DUMP and RESTORE in [`dump`].

pub(super) mod dump;
pub(super) mod inspect;
pub(super) mod migrate;
pub(super) mod relocate;

use bytes::Bytes;

use super::strings::done_event;
use super::{engine_error, parse_i64, spec, CommandSpec, Session};
use crate::resp::Reply;
use crate::services::notifications::GENERIC;
use crate::storage::{now_ms, Meta};

const NOT_INTEGER: &str = "ERR value is not an integer or out of range";

/// The live metadata of `key` in `db`, as the running command sees it.
fn get(s: &Session, db: u32, key: &[u8]) -> Result<Option<Meta>, Reply> {
    s.state.storage.get(&s.exec, db, key).map_err(engine_error)
}

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("del", -2, &["write"], (1, -1, 1), del),
    spec("unlink", -2, &["write", "fast"], (1, -1, 1), del),
    spec("exists", -2, &["readonly", "fast"], (1, -1, 1), exists),
    spec("type", 2, &["readonly", "fast"], (1, 1, 1), key_type),
    spec("ttl", 2, &["readonly", "fast"], (1, 1, 1), ttl),
    spec("pttl", 2, &["readonly", "fast"], (1, 1, 1), pttl),
    spec("expire", -3, &["write", "fast"], (1, 1, 1), expire),
    spec("pexpire", -3, &["write", "fast"], (1, 1, 1), pexpire),
    spec("expireat", -3, &["write", "fast"], (1, 1, 1), expireat),
    spec("pexpireat", -3, &["write", "fast"], (1, 1, 1), pexpireat),
    spec("persist", 2, &["write", "fast"], (1, 1, 1), persist),
    spec("dbsize", 1, &["readonly", "fast"], (0, 0, 0), dbsize),
    spec("flushdb", -1, &["write"], (0, 0, 0), flushdb),
    spec("flushall", -1, &["write"], (0, 0, 0), flushall),
];

/// A lazily freed key with this many elements (Redis's free effort) has its memory returned
/// soon after UNLINK: see [`crate::storage::Storage::reclaim_memtable`].
const BIG_KEY_ELEMENTS: u64 = 10_000;

/// DEL and UNLINK. UNLINK (and DEL with `lazyfree-lazy-user-del yes`) counts the values Redis
/// would free in the background (see [`inspect::free_effort`]).
fn del(s: &mut Session, args: &[Bytes]) -> Reply {
    let lazy = args[0].eq_ignore_ascii_case(b"unlink") || s.state.config().get("lazyfree-lazy-user-del") == Some("yes");
    let storage = &s.state.storage;
    let _guard = storage.lock(&s.exec, s.db, args[1..].iter().map(|k| &k[..]));
    let mut b = lsm::WriteBatch::new();
    let mut deleted = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut lazily = 0;
    let mut big = false;
    for key in &args[1..] {
        match storage.get(&s.exec, s.db, key) {
            Ok(Some(meta)) if seen.insert(key) => {
                if lazy {
                    match inspect::free_effort(s, &meta) {
                        Ok(effort) => {
                            lazily += u64::from(effort > inspect::LAZYFREE_THRESHOLD);
                            big |= effort >= BIG_KEY_ELEMENTS;
                        }
                        Err(e) => return e,
                    }
                }
                storage.delete_into(&mut b, s.db, key);
                deleted.push(key);
            }
            Ok(_) => {}
            Err(e) => return engine_error(e),
        }
    }
    if !deleted.is_empty() {
        if let Err(e) = storage.write(&s.exec, b) {
            return engine_error(e);
        }
    }
    s.state.lazyfreed_objects.fetch_add(lazily, std::sync::atomic::Ordering::Relaxed);
    if big {
        storage.reclaim_memtable(&s.exec);
    }
    for key in &deleted {
        s.notify(GENERIC, "del", key);
    }
    Reply::Integer(deleted.len() as i64)
}

fn exists(s: &mut Session, args: &[Bytes]) -> Reply {
    let mut n = 0;
    for key in &args[1..] {
        match s.state.storage.get(&s.exec, s.db, key) {
            Ok(Some(_)) => n += 1,
            Ok(None) => {}
            Err(e) => return engine_error(e),
        }
    }
    Reply::Integer(n)
}

fn key_type(s: &mut Session, args: &[Bytes]) -> Reply {
    match s.state.storage.get(&s.exec, s.db, &args[1]) {
        Ok(m) => Reply::Simple(m.map_or("none", |m| m.kind.name()).into()),
        Err(e) => engine_error(e),
    }
}

fn remaining(s: &Session, key: &[u8], unit_ms: u64) -> Reply {
    match s.state.storage.get(&s.exec, s.db, key) {
        Ok(None) => Reply::Integer(-2),
        Ok(Some(m)) if m.expire_at_ms == 0 => Reply::Integer(-1),
        Ok(Some(m)) => {
            let left = m.expire_at_ms.saturating_sub(now_ms());
            Reply::Integer(((left + unit_ms / 2) / unit_ms) as i64)
        }
        Err(e) => engine_error(e),
    }
}

fn ttl(s: &mut Session, args: &[Bytes]) -> Reply {
    remaining(s, &args[1], 1000)
}

fn pttl(s: &mut Session, args: &[Bytes]) -> Reply {
    remaining(s, &args[1], 1)
}

/// EXPIRE and friends: `unit_ms` per unit, relative or `absolute`, with NX/XX/GT/LT.
fn set_expiry(s: &mut Session, args: &[Bytes], unit_ms: i64, absolute: bool, cmd: &str) -> Reply {
    let Some(n) = parse_i64(&args[2]) else { return Reply::error("ERR value is not an integer or out of range") };
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in &args[3..] {
        match String::from_utf8_lossy(opt).to_ascii_uppercase().as_str() {
            "NX" => nx = true,
            "XX" => xx = true,
            "GT" => gt = true,
            "LT" => lt = true,
            other => return Reply::error(format!("ERR Unsupported option {other}")),
        }
    }
    if nx && (xx || gt || lt) {
        return Reply::error("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if gt && lt {
        return Reply::error("ERR GT and LT options at the same time are not compatible");
    }
    let invalid = || Reply::error(format!("ERR invalid expire time in '{cmd}' command"));
    let Some(ms) = n.checked_mul(unit_ms) else { return invalid() };
    let Some(at) = (if absolute { Some(ms) } else { (now_ms() as i64).checked_add(ms) }) else { return invalid() };
    let storage = &s.state.storage;
    let _guard = storage.lock(&s.exec, s.db, [&args[1][..]]);
    let Some(mut meta) = (match storage.get(&s.exec, s.db, &args[1]) {
        Ok(m) => m,
        Err(e) => return engine_error(e),
    }) else {
        return Reply::Integer(0);
    };
    // No expiry counts as an infinite one for GT and LT.
    let current = if meta.expire_at_ms == 0 { i64::MAX } else { meta.expire_at_ms as i64 };
    if (nx && meta.expire_at_ms != 0)
        || (xx && meta.expire_at_ms == 0)
        || (gt && at <= current)
        || (lt && at >= current)
    {
        return Reply::Integer(0);
    }
    let mut b = lsm::WriteBatch::new();
    let event = if at <= now_ms() as i64 {
        storage.delete_into(&mut b, s.db, &args[1]);
        "del"
    } else {
        let indexed_at = std::mem::replace(&mut meta.expire_at_ms, at as u64);
        storage.rewrite_into(&mut b, s.db, &args[1], &meta, indexed_at);
        "expire"
    };
    done_event(s, storage.write(&s.exec, b), Reply::Integer(1), GENERIC, event, &args[1])
}

fn expire(s: &mut Session, args: &[Bytes]) -> Reply {
    set_expiry(s, args, 1000, false, "expire")
}

fn pexpire(s: &mut Session, args: &[Bytes]) -> Reply {
    set_expiry(s, args, 1, false, "pexpire")
}

fn expireat(s: &mut Session, args: &[Bytes]) -> Reply {
    set_expiry(s, args, 1000, true, "expireat")
}

fn pexpireat(s: &mut Session, args: &[Bytes]) -> Reply {
    set_expiry(s, args, 1, true, "pexpireat")
}

fn persist(s: &mut Session, args: &[Bytes]) -> Reply {
    let storage = &s.state.storage;
    let _guard = storage.lock(&s.exec, s.db, [&args[1][..]]);
    match storage.get(&s.exec, s.db, &args[1]) {
        Ok(Some(mut m)) if m.expire_at_ms != 0 => {
            m.expire_at_ms = 0;
            let mut b = lsm::WriteBatch::new();
            storage.put_into(&mut b, s.db, &args[1], &m);
            done_event(s, storage.write(&s.exec, b), Reply::Integer(1), GENERIC, "persist", &args[1])
        }
        Ok(_) => Reply::Integer(0),
        Err(e) => engine_error(e),
    }
}

fn dbsize(s: &mut Session, _: &[Bytes]) -> Reply {
    s.state.storage.dbsize_seen(&s.exec, s.db).map_or_else(engine_error, |n| Reply::Integer(n as i64))
}

/// FLUSHDB / FLUSHALL's mode: `Some(true)` for ASYNC (or no mode with
/// `lazyfree-lazy-user-flush yes`), `None` for a syntax error. Both modes are one range delete
/// here, after which a large memtable is flushed in the background (its memory returned, as
/// Redis's background free returns it); ASYNC counts the keys as freed lazily
/// (`lazyfreed_objects`), as Redis's background thread counts them.
fn flush_async(s: &Session, args: &[Bytes]) -> Option<bool> {
    match args {
        [_] => Some(s.state.config().get("lazyfree-lazy-user-flush") == Some("yes")),
        [_, mode] if mode.eq_ignore_ascii_case(b"async") => Some(true),
        [_, mode] if mode.eq_ignore_ascii_case(b"sync") => Some(false),
        _ => None,
    }
}

fn flushdb(s: &mut Session, args: &[Bytes]) -> Reply {
    let Some(lazy) = flush_async(s, args) else {
        return Reply::error("ERR syntax error");
    };
    let keys = s.state.storage.dbsize(s.db);
    if let Err(e) = s.state.storage.flushdb(&s.exec, s.db) {
        return engine_error(e);
    }
    s.state.storage.reclaim_memtable(&s.exec);
    if lazy {
        s.state.lazyfreed_objects.fetch_add(keys, std::sync::atomic::Ordering::Relaxed);
    }
    Reply::ok()
}

fn flushall(s: &mut Session, args: &[Bytes]) -> Reply {
    let Some(lazy) = flush_async(s, args) else {
        return Reply::error("ERR syntax error");
    };
    let keys = s.state.storage.keys_total();
    if let Err(e) = s.state.storage.flushall(&s.exec) {
        return engine_error(e);
    }
    s.state.storage.reclaim_memtable(&s.exec);
    if lazy {
        s.state.lazyfreed_objects.fetch_add(keys, std::sync::atomic::Ordering::Relaxed);
    }
    Reply::ok()
}
