//! Hashes: HSET, HMSET, HSETNX, HGET, HMGET, HDEL, HEXISTS, HLEN, HSTRLEN, HKEYS, HVALS,
//! HGETALL, HINCRBY, HINCRBYFLOAT, HRANDFIELD, HSCAN. Each field is one record (its pick
//! record, `storage/picks/mod.rs`); a compact hash (one Redis keeps as a listpack) also numbers its
//! fields as they are added, and the commands that list fields follow those numbers
//! (`storage/field_order.rs`).

use bytes::Bytes;

use super::collections::{
    commit_event, fetch, fetch_or_create, random_args, random_reply, scan_command, store, NOT_INTEGER,
};
use super::{engine_error, parse_i64, spec, CommandSpec, Session, ONE_KEY};
use crate::resp::{BulkArray, Reply};
use crate::services::notifications::HASH;
use crate::storage::{next_ordinal, with_order, Header, KeyType, ListpackLimits, Meta, View};

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("hset", -4, &["write", "denyoom", "fast"], ONE_KEY, hset),
    spec("hmset", -4, &["write", "denyoom", "fast"], ONE_KEY, hmset),
    spec("hsetnx", 4, &["write", "denyoom", "fast"], ONE_KEY, hsetnx),
    spec("hget", 3, &["readonly", "fast"], ONE_KEY, hget),
    spec("hmget", -3, &["readonly", "fast"], ONE_KEY, hmget),
    spec("hdel", -3, &["write", "fast"], ONE_KEY, hdel),
    spec("hexists", 3, &["readonly", "fast"], ONE_KEY, hexists),
    spec("hlen", 2, &["readonly", "fast"], ONE_KEY, hlen),
    spec("hstrlen", 3, &["readonly", "fast"], ONE_KEY, hstrlen),
    spec("hkeys", 2, &["readonly"], ONE_KEY, hkeys),
    spec("hvals", 2, &["readonly"], ONE_KEY, hvals),
    spec("hgetall", 2, &["readonly"], ONE_KEY, hgetall),
    spec("hincrby", 4, &["write", "denyoom", "fast"], ONE_KEY, hincrby),
    spec("hincrbyfloat", 4, &["write", "denyoom", "fast"], ONE_KEY, hincrbyfloat),
    spec("hrandfield", -2, &["readonly"], ONE_KEY, hrandfield),
    spec("hscan", -3, &["readonly"], ONE_KEY, hscan),
];

fn hash(view: &View, key: &[u8]) -> Result<Option<Meta>, Reply> {
    fetch(view, key, KeyType::Hash)
}

/// The next field ordinal of `meta`, just fetched or created: a new hash starts compact (as
/// Redis's start as a listpack), an existing one is compact if it still is (`None`: a hash
/// table).
fn next_of(meta: &Meta, header: &Header) -> Option<u64> {
    if header.count == 0 {
        Some(0)
    } else {
        next_ordinal(meta)
    }
}

/// Hands out the next ordinal of a compact hash (`None` for a hash table).
fn take_ordinal(next: &mut Option<u64>) -> Option<u64> {
    let n = (*next)?;
    *next = Some(n + 1);
    Some(n)
}

/// Sets field/value pairs; returns how many fields were new.
fn set_fields(s: &Session, key: &[u8], pairs: &[Bytes], only_new: bool) -> Result<i64, Reply> {
    let view = s.state.storage.view(&s.exec, s.db);
    let mut b = lsm::WriteBatch::new();
    let meta = fetch_or_create(&view, &mut b, key, KeyType::Hash)?;
    let mut header = Header::of(&meta);
    let limits = ListpackLimits::of(&s.state.config());
    // As Redis's `hashTypeTryConversion`: any long argument converts the hash first.
    let mut next = next_of(&meta, &header).filter(|_| pairs.iter().all(|a| limits.fits(a)));
    // New fields and their ordinals (a field given twice keeps its first).
    let mut added: std::collections::HashMap<&Bytes, Option<u64>> = std::collections::HashMap::new();
    // Existing fields this command sets (their writes in `b` are not visible to `view`).
    let mut rewritten: std::collections::HashSet<&Bytes> = std::collections::HashSet::new();
    for pair in pairs.chunks_exact(2) {
        let current =
            if header.count > 0 { view.field_with_ordinal(meta.uid, &pair[0]).map_err(engine_error)? } else { None };
        if current.is_some() && only_new {
            continue;
        }
        if let Some((ordinal, current)) = current {
            // A value set to what it is already is not written again (a hash of counters or a
            // cache refreshed with the same data would otherwise fill the memtable with copies);
            // the hash is still modified as far as WATCH and tracking go, as in Redis: its
            // metadata is written below. A field keeps its ordinal.
            if current != pair[1] || rewritten.contains(&pair[0]) {
                view.add_field(&mut b, meta.uid, &pair[0], &pair[1], ordinal);
                rewritten.insert(&pair[0]);
            }
        } else {
            let ordinal = *added.entry(&pair[0]).or_insert_with(|| take_ordinal(&mut next));
            view.add_field(&mut b, meta.uid, &pair[0], &pair[1], ordinal);
        }
    }
    let added = added.len() as i64;
    header.count += added as u64;
    let next = next.filter(|_| header.count <= limits.entries);
    store(&view, &mut b, key, &with_order(&meta, &header, next), header);
    s.state.storage.write(&s.exec, b).map_err(engine_error)?;
    if !only_new || added > 0 {
        s.notify(HASH, "hset", key);
    }
    Ok(added)
}

fn hset(s: &mut Session, args: &[Bytes]) -> Reply {
    if !args.len().is_multiple_of(2) {
        return Reply::error("ERR wrong number of arguments for 'hset' command");
    }
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    set_fields(s, &args[1], &args[2..], false).map_or_else(|e| e, Reply::Integer)
}

fn hmset(s: &mut Session, args: &[Bytes]) -> Reply {
    if !args.len().is_multiple_of(2) {
        return Reply::error("ERR wrong number of arguments for 'hmset' command");
    }
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    set_fields(s, &args[1], &args[2..], false).map_or_else(|e| e, |_| Reply::ok())
}

fn hsetnx(s: &mut Session, args: &[Bytes]) -> Reply {
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    set_fields(s, &args[1], &args[2..], true).map_or_else(|e| e, Reply::Integer)
}

fn field_value(s: &Session, key: &[u8], field: &[u8]) -> Result<Option<Bytes>, Reply> {
    let view = s.state.storage.view(&s.exec, s.db);
    match hash(&view, key)? {
        Some(meta) => view.field(meta.uid, field).map_err(engine_error),
        None => Ok(None),
    }
}

fn hget(s: &mut Session, args: &[Bytes]) -> Reply {
    match field_value(s, &args[1], &args[2]) {
        Ok(v) => v.map_or(Reply::Null, Reply::Bulk),
        Err(e) => e,
    }
}

fn hmget(s: &mut Session, args: &[Bytes]) -> Reply {
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match hash(&view, &args[1]) {
        Ok(m) => m,
        Err(e) => return e,
    };
    let mut out = Vec::with_capacity(args.len() - 2);
    for field in &args[2..] {
        let v = match &meta {
            Some(m) => match view.field(m.uid, field) {
                Ok(v) => v,
                Err(e) => return engine_error(e),
            },
            None => None,
        };
        out.push(v.map_or(Reply::Null, Reply::Bulk));
    }
    Reply::Array(out)
}

fn hdel(s: &mut Session, args: &[Bytes]) -> Reply {
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match hash(&view, &args[1]) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::Integer(0),
        Err(e) => return e,
    };
    let mut header = Header::of(&meta);
    let mut b = lsm::WriteBatch::new();
    let mut removed = std::collections::HashSet::new();
    for field in &args[2..] {
        match view.field(meta.uid, field) {
            Ok(Some(_)) if removed.insert(field) => view.remove_field(&mut b, meta.uid, field),
            Ok(_) => {}
            Err(e) => return engine_error(e),
        }
    }
    header.count -= removed.len() as u64;
    header.removed += removed.len() as u64;
    if !removed.is_empty() {
        store(&view, &mut b, &args[1], &meta, header);
    }
    let emptied = header.count == 0;
    commit_event(s, b, Reply::Integer(removed.len() as i64), (HASH, "hdel"), &args[1], emptied)
}

fn hexists(s: &mut Session, args: &[Bytes]) -> Reply {
    match field_value(s, &args[1], &args[2]) {
        Ok(v) => Reply::Integer(i64::from(v.is_some())),
        Err(e) => e,
    }
}

fn hlen(s: &mut Session, args: &[Bytes]) -> Reply {
    match hash(&s.state.storage.view(&s.exec, s.db), &args[1]) {
        Ok(m) => Reply::Integer(m.map_or(0, |m| Header::of(&m).count as i64)),
        Err(e) => e,
    }
}

fn hstrlen(s: &mut Session, args: &[Bytes]) -> Reply {
    match field_value(s, &args[1], &args[2]) {
        Ok(v) => Reply::Integer(v.map_or(0, |v| v.len() as i64)),
        Err(e) => e,
    }
}

/// Every (field, value) of the hash at `key` framed into `out` by `push(out, field, value)`
/// (nothing if absent), a compact hash's in insertion order.
fn all_fields(s: &Session, key: &[u8], mut out: BulkArray, push: impl Fn(&mut BulkArray, &[u8], &[u8])) -> Reply {
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match hash(&view, key) {
        Ok(Some(meta)) => meta,
        Ok(None) => return Reply::Bulks(out),
        Err(e) => return e,
    };
    match view.each_field(&meta, |f, v| push(&mut out, f, v)) {
        Ok(()) => Reply::Bulks(out),
        Err(e) => engine_error(e),
    }
}

fn hkeys(s: &mut Session, args: &[Bytes]) -> Reply {
    all_fields(s, &args[1], BulkArray::with_capacity(1024), |out, f, _| out.push(f))
}

fn hvals(s: &mut Session, args: &[Bytes]) -> Reply {
    all_fields(s, &args[1], BulkArray::with_capacity(1024), |out, _, v| out.push(v))
}

fn hgetall(s: &mut Session, args: &[Bytes]) -> Reply {
    all_fields(s, &args[1], BulkArray::map_with_capacity(2048), |out, f, v| {
        out.push(f);
        out.push(v);
    })
}

/// Read-modify-write of one field: `update` gets the current value (if any) and returns the
/// new one and the reply.
fn update_field(
    s: &Session,
    (key, event): (&[u8], &'static str),
    field: &[u8],
    update: impl FnOnce(Option<&Bytes>) -> Result<(Bytes, Reply), Reply>,
) -> Reply {
    let _guard = s.state.storage.lock(&s.exec, s.db, [key]);
    let view = s.state.storage.view(&s.exec, s.db);
    let mut b = lsm::WriteBatch::new();
    let meta = match fetch_or_create(&view, &mut b, key, KeyType::Hash) {
        Ok(m) => m,
        Err(e) => return e,
    };
    let mut header = Header::of(&meta);
    let (ordinal, current) = if header.count == 0 {
        (None, None)
    } else {
        match view.field_with_ordinal(meta.uid, field) {
            Ok(Some((ordinal, v))) => (ordinal, Some(v)),
            Ok(None) => (None, None),
            Err(e) => return engine_error(e),
        }
    };
    let (value, reply) = match update(current.as_ref()) {
        Ok(r) => r,
        Err(e) => return e,
    };
    // As Redis's `hashTypeSet`: a long field or value converts the hash first.
    let limits = ListpackLimits::of(&s.state.config());
    let mut next = next_of(&meta, &header).filter(|_| limits.fits(field) && limits.fits(&value));
    if current.is_none() {
        header.count += 1;
        view.add_field(&mut b, meta.uid, field, &value, take_ordinal(&mut next));
    } else {
        view.add_field(&mut b, meta.uid, field, &value, ordinal);
    }
    let next = next.filter(|_| header.count <= limits.entries);
    store(&view, &mut b, key, &with_order(&meta, &header, next), header);
    commit_event(s, b, reply, (HASH, event), key, false)
}

fn hincrby(s: &mut Session, args: &[Bytes]) -> Reply {
    let Some(delta) = parse_i64(&args[3]) else { return Reply::error(NOT_INTEGER) };
    update_field(s, (&args[1], "hincrby"), &args[2], |current| {
        let n = match current {
            Some(v) => parse_i64(v)
                .filter(|_| v.len() <= 20)
                .ok_or_else(|| Reply::error("ERR hash value is not an integer"))?,
            None => 0,
        };
        let next = n.checked_add(delta).ok_or_else(|| Reply::error("ERR increment or decrement would overflow"))?;
        Ok((Bytes::from(next.to_string()), Reply::Integer(next)))
    })
}

fn hincrbyfloat(s: &mut Session, args: &[Bytes]) -> Reply {
    match crate::num::parse_float(&args[3]) {
        None => return Reply::error("ERR value is not a valid float"),
        Some(incr) if !incr.is_finite() => return Reply::error("ERR value is NaN or Infinity"),
        Some(_) => {}
    }
    update_field(s, (&args[1], "hincrbyfloat"), &args[2], |current| {
        let current = current.cloned().unwrap_or_else(|| Bytes::from_static(b"0"));
        if crate::num::parse_float(&current).is_none() {
            return Err(Reply::error("ERR hash value is not a float"));
        }
        let text = crate::num::incr_by_float(&current, &args[3]).map_err(|e| Reply::error(e.message()))?;
        let value = Bytes::from(text);
        Ok((value.clone(), Reply::Bulk(value)))
    })
}

/// `HRANDFIELD key [count [WITHVALUES]]`.
fn hrandfield(s: &mut Session, args: &[Bytes]) -> Reply {
    let (count, withvalues) = match random_args(args, b"withvalues") {
        Ok(a) => a,
        Err(e) => return e,
    };
    let view = s.state.storage.view(&s.exec, s.db);
    match hash(&view, &args[1]) {
        Ok(meta) => random_reply(&view, &args[1], meta.as_ref(), count, withvalues, Reply::Bulk),
        Err(e) => e,
    }
}

/// `HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]`.
fn hscan(s: &mut Session, args: &[Bytes]) -> Reply {
    scan_command(s, args, KeyType::Hash, true, |field, value, novalues, out| {
        out.push(Reply::Bulk(field));
        if !novalues {
            out.push(Reply::Bulk(value));
        }
    })
}
