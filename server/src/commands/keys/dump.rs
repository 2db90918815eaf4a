//! DUMP and RESTORE (REPLACE, ABSTTL, IDLETIME, FREQ) with Redis's serialization (`crate::rdb`):
//! a payload from Redis 7.0's DUMP restores here, and Shale's restores in Redis.

use std::ops::Bound;

use bytes::Bytes;

use super::super::collections::{commit_event, store};
use super::super::lists::{all as list_all, create_list};
use super::super::strings::string_at;
use super::{engine_error, get, parse_i64, NOT_INTEGER};
use crate::commands::{spec, CommandSpec, Session, ONE_KEY};
use crate::rdb::{self, Value};
use crate::resp::Reply;
use crate::services::notifications::GENERIC;
use crate::storage::{decode_score, encode_score, now_ms, Header, KeyType, Meta, View};

pub(in crate::commands) static COMMANDS: &[CommandSpec] =
    &[spec("dump", 2, &["readonly"], ONE_KEY, dump), spec("restore", -4, &["write", "denyoom"], ONE_KEY, restore)];

/// The value of the key `meta` describes, as RDB carries it.
pub(in crate::commands) fn read_value(s: &Session, view: &View, key: &[u8], meta: &Meta) -> Result<Value, Reply> {
    let elements = || -> Result<Vec<(Bytes, Bytes)>, Reply> {
        view.elements(meta.uid, Bound::Unbounded).collect::<lsm::Result<_>>().map_err(engine_error)
    };
    Ok(match meta.kind {
        KeyType::String => Value::String(string_at(s, key)?.map(|m| m.body).unwrap_or_default()),
        KeyType::List => Value::List(list_all(view, meta)?),
        KeyType::Set => Value::Set(elements()?.into_iter().map(|(m, _)| m).collect()),
        KeyType::Hash => Value::Hash(elements()?),
        KeyType::ZSet => Value::ZSet(elements()?.into_iter().map(|(m, sc)| (m, decode_score(&sc))).collect()),
    })
}

/// Adds writing `value` at `key` (replacing whatever it held) with expiry `expire_at` to `b`.
pub(in crate::commands) fn write_value(view: &View, b: &mut lsm::WriteBatch, key: &[u8], value: Value, expire_at: u64) {
    let collection = |b: &mut lsm::WriteBatch, kind: KeyType| {
        let mut meta = view.create(b, key, kind);
        meta.expire_at_ms = expire_at;
        meta
    };
    match value {
        Value::String(body) => view.put_meta(b, key, &Meta::string(body, expire_at)),
        Value::List(items) => create_list(view, b, key, &items, expire_at),
        Value::Set(members) => {
            let meta = collection(b, KeyType::Set);
            for m in &members {
                view.add_member(b, meta.uid, m, b"");
            }
            store(view, b, key, &meta, Header { count: members.len() as u64, ..Header::default() });
        }
        Value::Hash(fields) => {
            let meta = collection(b, KeyType::Hash);
            for (f, v) in &fields {
                view.add_member(b, meta.uid, f, v);
            }
            store(view, b, key, &meta, Header { count: fields.len() as u64, ..Header::default() });
        }
        Value::ZSet(items) => {
            let meta = collection(b, KeyType::ZSet);
            for (m, sc) in &items {
                view.add_member(b, meta.uid, m, &encode_score(*sc));
                view.put_score(b, meta.uid, *sc, m);
            }
            store(view, b, key, &meta, Header { count: items.len() as u64, ..Header::default() });
        }
    }
}

fn dump(s: &mut Session, args: &[Bytes]) -> Reply {
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match get(s, s.db, &args[1]) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::Null,
        Err(e) => return e,
    };
    match read_value(s, &view, &args[1], &meta) {
        Ok(v) => Reply::Bulk(Bytes::from(rdb::dump(&v))),
        Err(e) => e,
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
    // Access times and frequencies are not tracked: IDLETIME and FREQ are accepted and checked.
    let _ = (idle, freq);
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
    write_value(&view, &mut b, key, value, expire_at as u64);
    let reply = commit_event(s, b, Reply::ok(), (GENERIC, "restore"), key, false);
    drop(guard);
    s.signal(key);
    reply
}
