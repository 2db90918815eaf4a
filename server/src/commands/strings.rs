//! String commands: GET, SET (NX XX GET EX PX EXAT PXAT KEEPTTL), SETNX, SETEX, PSETEX, GETDEL,
//! GETSET, GETEX, MGET, MSET, MSETNX, APPEND, STRLEN, INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT.
//! Ranges and LCS are in `string_range`.

use bytes::Bytes;

use super::{engine_error, parse_i64, spec, CommandSpec, Session, ONE_KEY};
use crate::resp::Reply;
use crate::services::notifications::{GENERIC, STRING};
use crate::storage::{now_ms, KeyType, Meta, StringEdit};

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("get", 2, &["readonly", "fast"], (1, 1, 1), get),
    spec("set", -3, &["write", "denyoom"], (1, 1, 1), set),
    spec("setnx", 3, &["write", "denyoom", "fast"], (1, 1, 1), setnx),
    spec("setex", 4, &["write", "denyoom"], (1, 1, 1), setex),
    spec("psetex", 4, &["write", "denyoom"], (1, 1, 1), psetex),
    spec("getdel", 2, &["write", "fast"], (1, 1, 1), getdel),
    spec("mget", -2, &["readonly", "fast"], (1, -1, 1), mget),
    spec("mset", -3, &["write", "denyoom"], (1, -1, 2), mset),
    spec("append", 3, &["write", "denyoom", "fast"], (1, 1, 1), append),
    spec("strlen", 2, &["readonly", "fast"], (1, 1, 1), strlen),
    spec("incr", 2, &["write", "denyoom", "fast"], (1, 1, 1), incr),
    spec("decr", 2, &["write", "denyoom", "fast"], (1, 1, 1), decr),
    spec("incrby", 3, &["write", "denyoom", "fast"], (1, 1, 1), incrby),
    spec("decrby", 3, &["write", "denyoom", "fast"], (1, 1, 1), decrby),
];

pub(super) static MORE: &[CommandSpec] = &[
    spec("getset", 3, &["write", "denyoom", "fast"], ONE_KEY, getset),
    spec("getex", -2, &["write", "fast"], ONE_KEY, getex),
    spec("msetnx", -3, &["write", "denyoom"], (1, -1, 2), msetnx),
    spec("incrbyfloat", 3, &["write", "denyoom", "fast"], ONE_KEY, incrbyfloat),
];

pub(super) const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";

/// The live string at `key` with its whole value in `body` (a segmented value is assembled):
/// `Ok(None)` if absent, `Err(reply)` if another type.
pub(super) fn string_at(s: &Session, key: &[u8]) -> Result<Option<Meta>, Reply> {
    match string_meta_at(s, key)? {
        Some(m) if m.is_segmented() => {
            s.state.storage.view(&s.exec, s.db).inline_string(m).map(Some).map_err(engine_error)
        }
        m => Ok(m),
    }
}

/// The live string at `key` as stored (a segmented value's `body` is only its length: read it
/// through the storage view): `Ok(None)` if absent, `Err(reply)` if another type.
pub(super) fn string_meta_at(s: &Session, key: &[u8]) -> Result<Option<Meta>, Reply> {
    match s.state.storage.get(&s.exec, s.db, key) {
        Ok(Some(m)) if m.kind != KeyType::String => Err(Reply::error(WRONGTYPE)),
        Ok(m) => Ok(m),
        Err(e) => Err(engine_error(e)),
    }
}

/// An edit of part of the string at `key` (created if absent; its TTL kept), for a command that
/// holds the key's lock: `Err(reply)` if the key holds another type.
pub(super) fn string_edit<'a>(s: &'a Session, key: &[u8]) -> Result<StringEdit<'a>, Reply> {
    let existing = string_meta_at(s, key)?;
    Ok(StringEdit::new(s.state.storage.view(&s.exec, s.db), existing))
}

pub(super) fn done(r: lsm::Result<()>, ok: Reply) -> Reply {
    r.map_or_else(engine_error, |_| ok)
}

/// [`done`], recording keyspace event `event` (of `class`) for `key` if the write succeeded.
pub(super) fn done_event(
    s: &Session,
    r: lsm::Result<()>,
    ok: Reply,
    class: u32,
    event: &'static str,
    key: &[u8],
) -> Reply {
    if r.is_ok() {
        s.notify(class, event, key);
    }
    done(r, ok)
}

fn get(s: &mut Session, args: &[Bytes]) -> Reply {
    let hit = crate::exec::observe::keyspace_hit;
    match string_at(s, &args[1]) {
        Ok(Some(m)) => {
            hit(s, true);
            Reply::Bulk(m.body)
        }
        Ok(None) => {
            hit(s, false);
            Reply::Null
        }
        Err(e) => e,
    }
}

/// Parses an expiry given in `unit_ms` (1000 for seconds) relative to now or absolute.
fn expiry(arg: &[u8], unit_ms: u64, absolute: bool, cmd: &str) -> Result<u64, Reply> {
    let n = parse_i64(arg).ok_or_else(|| Reply::error(NOT_INTEGER))?;
    let invalid = || Reply::error(format!("ERR invalid expire time in '{cmd}' command"));
    if n <= 0 {
        return Err(invalid());
    }
    let ms = (n as u64).checked_mul(unit_ms).ok_or_else(invalid)?;
    let at = if absolute { ms } else { now_ms().checked_add(ms).ok_or_else(invalid)? };
    if at > i64::MAX as u64 {
        return Err(invalid());
    }
    Ok(at)
}

fn set(s: &mut Session, args: &[Bytes]) -> Reply {
    let (key, value) = (&args[1], &args[2]);
    if args.len() == 3 {
        // A plain SET replaces whatever was there: a blind write, no read.
        let _guard = s.state.storage.lock(&s.exec, s.db, [&key[..]]);
        let r = s.state.storage.set_string(&s.exec, s.db, key, value.clone(), 0);
        return done_event(s, r, Reply::ok(), STRING, "set", key);
    }
    let (mut nx, mut xx, mut get_old, mut keepttl) = (false, false, false, false);
    let mut expire: Option<u64> = None;
    let mut i = 3;
    while i < args.len() {
        let opt = String::from_utf8_lossy(&args[i]).to_ascii_uppercase();
        let next = args.get(i + 1);
        match opt.as_str() {
            "NX" if !xx => nx = true,
            "XX" if !nx => xx = true,
            "GET" => get_old = true,
            "KEEPTTL" if expire.is_none() => keepttl = true,
            "EX" | "PX" | "EXAT" | "PXAT" if expire.is_none() && !keepttl && next.is_some() => {
                let unit = if opt.starts_with('E') { 1000 } else { 1 };
                match expiry(next.map_or(&[][..], |b| b), unit, opt.ends_with("AT"), "set") {
                    Ok(at) => expire = Some(at),
                    Err(e) => return e,
                }
                i += 1;
            }
            _ => return Reply::error("ERR syntax error"),
        }
        i += 1;
    }
    let storage = &s.state.storage;
    let _guard = storage.lock(&s.exec, s.db, [&key[..]]);
    let old = match storage.get(&s.exec, s.db, key) {
        Ok(m) => m,
        Err(e) => return engine_error(e),
    };
    if get_old && old.as_ref().is_some_and(|m| m.kind != KeyType::String) {
        return Reply::error(WRONGTYPE);
    }
    let old_reply = || old.as_ref().map_or(Reply::Null, |m| Reply::Bulk(m.body.clone()));
    if (nx && old.is_some()) || (xx && old.is_none()) {
        return if get_old { old_reply() } else { Reply::Null };
    }
    let expire_at = match (expire, keepttl) {
        (Some(at), _) => at,
        (None, true) => old.as_ref().map_or(0, |m| m.expire_at_ms),
        (None, false) => 0,
    };
    let indexed_at = old.as_ref().map_or(0, |m| m.expire_at_ms);
    if let Err(e) = storage.rewrite_string(&s.exec, s.db, key, value.clone(), (expire_at, indexed_at)) {
        return engine_error(e);
    }
    s.notify(STRING, "set", key);
    if expire.is_some() {
        s.notify(GENERIC, "expire", key);
    }
    if get_old {
        old_reply()
    } else {
        Reply::ok()
    }
}

fn setnx(s: &mut Session, args: &[Bytes]) -> Reply {
    let storage = &s.state.storage;
    let _guard = storage.lock(&s.exec, s.db, [&args[1][..]]);
    match storage.get(&s.exec, s.db, &args[1]) {
        Ok(Some(_)) => Reply::Integer(0),
        Ok(None) => {
            let r = storage.set_string(&s.exec, s.db, &args[1], args[2].clone(), 0);
            done_event(s, r, Reply::Integer(1), STRING, "set", &args[1])
        }
        Err(e) => engine_error(e),
    }
}

fn set_with_expiry(s: &mut Session, args: &[Bytes], unit_ms: u64, cmd: &str) -> Reply {
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    match expiry(&args[2], unit_ms, false, cmd) {
        Ok(at) => {
            let r = s.state.storage.set_string(&s.exec, s.db, &args[1], args[3].clone(), at);
            if r.is_ok() {
                s.notify(STRING, "set", &args[1]);
            }
            done_event(s, r, Reply::ok(), GENERIC, "expire", &args[1])
        }
        Err(e) => e,
    }
}

fn setex(s: &mut Session, args: &[Bytes]) -> Reply {
    set_with_expiry(s, args, 1000, "setex")
}

fn psetex(s: &mut Session, args: &[Bytes]) -> Reply {
    set_with_expiry(s, args, 1, "psetex")
}

fn getdel(s: &mut Session, args: &[Bytes]) -> Reply {
    let storage = &s.state.storage;
    let _guard = storage.lock(&s.exec, s.db, [&args[1][..]]);
    match string_at(s, &args[1]) {
        Ok(Some(m)) => {
            let mut b = lsm::WriteBatch::new();
            storage.delete_into(&mut b, s.db, &args[1]);
            done_event(s, storage.write(&s.exec, b), Reply::Bulk(m.body), GENERIC, "del", &args[1])
        }
        Ok(None) => Reply::Null,
        Err(e) => e,
    }
}

fn mget(s: &mut Session, args: &[Bytes]) -> Reply {
    let mut out = Vec::with_capacity(args.len() - 1);
    for key in &args[1..] {
        out.push(match string_at(s, key) {
            Ok(Some(m)) => Reply::Bulk(m.body),
            Ok(None) => Reply::Null,
            Err(e) if e == Reply::error(WRONGTYPE) => Reply::Null,
            Err(e) => return e,
        });
    }
    Reply::Array(out)
}

fn mset(s: &mut Session, args: &[Bytes]) -> Reply {
    if args.len().is_multiple_of(2) {
        return Reply::error("ERR wrong number of arguments for 'mset' command");
    }
    let _guard = s.state.storage.lock(&s.exec, s.db, args[1..].iter().step_by(2).map(|k| &k[..]));
    let mut b = lsm::WriteBatch::new();
    for pair in args[1..].chunks(2) {
        s.state.storage.put_into(&mut b, s.db, &pair[0], &Meta::string(pair[1].clone(), 0));
    }
    let mark = s.exec.event_mark();
    let r = s.state.storage.write(&s.exec, b);
    if r.is_ok() {
        s.exec.notify_each(mark, (STRING, "set"), s.db, args[1..].iter().step_by(2));
    }
    done(r, Reply::ok())
}

fn append(s: &mut Session, args: &[Bytes]) -> Reply {
    let storage = &s.state.storage;
    let _guard = storage.lock(&s.exec, s.db, [&args[1][..]]);
    let mut edit = match string_edit(s, &args[1]) {
        Ok(e) => e,
        Err(e) => return e,
    };
    let current = edit.len();
    if current + args[2].len() as u64 > s.state.config().proto_max_bulk_len {
        return Reply::error("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
    }
    let mut b = lsm::WriteBatch::new();
    if let Err(e) = edit.write(current, &args[2]) {
        return engine_error(e);
    }
    let len = edit.len() as i64;
    edit.finish(&mut b, &args[1]);
    done_event(s, storage.write(&s.exec, b), Reply::Integer(len), STRING, "append", &args[1])
}

fn strlen(s: &mut Session, args: &[Bytes]) -> Reply {
    match string_meta_at(s, &args[1]) {
        Ok(m) => Reply::Integer(m.map_or(0, |m| m.string_len() as i64)),
        Err(e) => e,
    }
}

/// Adds `delta` to the integer at `key`, keeping its TTL.
fn add(s: &mut Session, key: &[u8], delta: i64) -> Reply {
    let storage = &s.state.storage;
    let _guard = storage.lock(&s.exec, s.db, [key]);
    let (current, expire_at) = match string_at(s, key) {
        Ok(Some(m)) => match parse_i64(&m.body) {
            Some(n) if m.body.len() <= 20 => (n, m.expire_at_ms),
            _ => return Reply::error(NOT_INTEGER),
        },
        Ok(None) => (0, 0),
        Err(e) => return e,
    };
    let Some(next) = current.checked_add(delta) else {
        return Reply::error("ERR increment or decrement would overflow");
    };
    let r = storage.rewrite_string(&s.exec, s.db, key, Bytes::from(next.to_string()), (expire_at, expire_at));
    done_event(s, r, Reply::Integer(next), STRING, "incrby", key)
}

fn incr(s: &mut Session, args: &[Bytes]) -> Reply {
    add(s, &args[1], 1)
}

fn decr(s: &mut Session, args: &[Bytes]) -> Reply {
    add(s, &args[1], -1)
}

fn incrby(s: &mut Session, args: &[Bytes]) -> Reply {
    match parse_i64(&args[2]) {
        Some(d) => add(s, &args[1], d),
        None => Reply::error(NOT_INTEGER),
    }
}

fn decrby(s: &mut Session, args: &[Bytes]) -> Reply {
    match parse_i64(&args[2]) {
        Some(i64::MIN) => Reply::error("ERR decrement would overflow"),
        Some(d) => add(s, &args[1], -d),
        None => Reply::error(NOT_INTEGER),
    }
}

/// `GETSET key value`: SET … GET without options (the TTL is dropped).
fn getset(s: &mut Session, args: &[Bytes]) -> Reply {
    let storage = &s.state.storage;
    let _guard = storage.lock(&s.exec, s.db, [&args[1][..]]);
    match string_at(s, &args[1]) {
        Ok(old) => {
            let r = storage.set_string(&s.exec, s.db, &args[1], args[2].clone(), 0);
            done_event(s, r, old.map_or(Reply::Null, |m| Reply::Bulk(m.body)), STRING, "set", &args[1])
        }
        Err(e) => e,
    }
}

/// `GETEX key [EX s | PX ms | EXAT t | PXAT t | PERSIST]`.
fn getex(s: &mut Session, args: &[Bytes]) -> Reply {
    // None: leave the TTL; Some(0): persist; Some(t): expire at t.
    let mut new_expiry: Option<u64> = None;
    let mut i = 2;
    while i < args.len() {
        let opt = String::from_utf8_lossy(&args[i]).to_ascii_uppercase();
        match (opt.as_str(), args.get(i + 1)) {
            ("PERSIST", _) if new_expiry.is_none() => {
                new_expiry = Some(0);
                i += 1;
            }
            ("EX" | "PX" | "EXAT" | "PXAT", Some(v)) if new_expiry.is_none() => {
                let unit = if opt.starts_with('E') { 1000 } else { 1 };
                match expiry(v, unit, opt.ends_with("AT"), "getex") {
                    Ok(at) => new_expiry = Some(at),
                    Err(e) => return e,
                }
                i += 2;
            }
            _ => return Reply::error("ERR syntax error"),
        }
    }
    let storage = &s.state.storage;
    let _guard = storage.lock(&s.exec, s.db, [&args[1][..]]);
    let meta = match string_at(s, &args[1]) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::Null,
        Err(e) => return e,
    };
    let value = Reply::Bulk(meta.body.clone());
    match new_expiry {
        Some(at) if at != meta.expire_at_ms => {
            let mut b = lsm::WriteBatch::new();
            let event = if at != 0 && at <= now_ms() {
                storage.delete_into(&mut b, s.db, &args[1]);
                "del"
            } else {
                let indexed_at = meta.expire_at_ms;
                storage.rewrite_into(&mut b, s.db, &args[1], &Meta { expire_at_ms: at, ..meta }, indexed_at);
                if at == 0 {
                    "persist"
                } else {
                    "expire"
                }
            };
            done_event(s, storage.write(&s.exec, b), value, GENERIC, event, &args[1])
        }
        _ => value,
    }
}

/// `MSETNX key value …`: sets all the keys only if none of them exists.
fn msetnx(s: &mut Session, args: &[Bytes]) -> Reply {
    if args.len().is_multiple_of(2) {
        return Reply::error("ERR wrong number of arguments for 'msetnx' command");
    }
    let storage = &s.state.storage;
    let _guard = storage.lock(&s.exec, s.db, args[1..].iter().step_by(2).map(|k| &k[..]));
    for key in args[1..].iter().step_by(2) {
        match storage.get(&s.exec, s.db, key) {
            Ok(Some(_)) => return Reply::Integer(0),
            Ok(None) => {}
            Err(e) => return engine_error(e),
        }
    }
    let mut b = lsm::WriteBatch::new();
    for pair in args[1..].chunks(2) {
        storage.put_into(&mut b, s.db, &pair[0], &Meta::string(pair[1].clone(), 0));
    }
    let mark = s.exec.event_mark();
    let r = storage.write(&s.exec, b);
    if r.is_ok() {
        s.exec.notify_each(mark, (STRING, "set"), s.db, args[1..].iter().step_by(2));
    }
    done(r, Reply::Integer(1))
}

/// `INCRBYFLOAT key increment`, printed as Redis prints long doubles.
fn incrbyfloat(s: &mut Session, args: &[Bytes]) -> Reply {
    let storage = &s.state.storage;
    let _guard = storage.lock(&s.exec, s.db, [&args[1][..]]);
    let (current, expire_at) = match string_at(s, &args[1]) {
        Ok(Some(m)) => (m.body, m.expire_at_ms),
        Ok(None) => (Bytes::from_static(b"0"), 0),
        Err(e) => return e,
    };
    match crate::num::incr_by_float(&current, &args[2]) {
        Ok(text) => {
            let value = Bytes::from(text);
            let r = storage.rewrite_string(&s.exec, s.db, &args[1], value.clone(), (expire_at, expire_at));
            done_event(s, r, Reply::Bulk(value), STRING, "incrbyfloat", &args[1])
        }
        Err(e) => Reply::error(e.message()),
    }
}
