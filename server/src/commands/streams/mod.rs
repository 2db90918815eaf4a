//! Streams: XADD, XLEN, XRANGE, XREVRANGE, XDEL, XTRIM, XSETID, XREAD (with BLOCK) and XINFO;
//! consumer groups are in [`groups`], XADD's and XTRIM's trimming in [`trim`].
//!
//! A stream is a collection (see `storage::collection`): a metadata record and, under the
//! key's incarnation, one element record per entry, keyed so that byte order is ID order:
//!
//! ```text
//! entry    field 'e' | ms u64 BE | seq u64 BE   ->  node u64 LE | n u32 LE | (len u32 LE | bytes) * n
//! ```
//! where the `n` strings are the entry's field, value, field, value, … The metadata body holds
//! (u64 LE each): length, 0, last ID (ms, seq), largest deleted ID (ms, seq), entries added
//! over the stream's life, first live ID (ms, seq), and the emulated tail node: its number, the
//! entries appended to it and their bytes; then the number of consumer groups (see `groups`).
//!
//! **Nodes.** Redis stores a stream as listpack nodes of at most `stream-node-max-entries`
//! entries (or `stream-node-max-bytes` bytes), and `~` trimming removes whole nodes only.
//! Shale numbers nodes the same way as entries are appended (each entry records its node), so
//! `MAXLEN ~` / `MINID ~` remove exactly what Redis would.
//!
//! **Trimming** finds the first entry to keep by walking live entries from the head, then
//! writes one range tombstone for everything before it and moves the first-ID bound past it:
//! later reads seek straight to the first live entry, however much was trimmed before. XDEL
//! writes one tombstone per entry (and moves the first ID when it deletes the first entry).
//!
//! **Blocking.** XREAD BLOCK waits through the same registry as BLPOP: XADD signals the key,
//! and the waiter's attempt reads the entries after the ID it waits past (`$` is resolved to
//! the stream's last ID when the command runs).

use bytes::Bytes;

mod group_records;
mod groups;
mod model;
mod pending;
mod read;
mod trim;

pub(super) use groups::COMMANDS as GROUP_COMMANDS;
use model::*;
pub(crate) use read::free_effort;
pub(crate) use read::read_may_block;
use read::{parse_read, streams_reply, xinfo, xread};
use trim::{parse_add_or_trim, trim};

use super::blocking_pops::block_on;
use super::collections::SYNTAX;
use super::{engine_error, parse_i64, spec, CommandSpec, Session, ONE_KEY};
use crate::resp::Reply;
use crate::services::notifications::STREAM;
use crate::storage::{KeyType, Meta, View};

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("xadd", -5, &["write", "denyoom", "fast"], ONE_KEY, xadd),
    spec("xlen", 2, &["readonly", "fast"], ONE_KEY, xlen),
    spec("xrange", -4, &["readonly"], ONE_KEY, xrange),
    spec("xrevrange", -4, &["readonly"], ONE_KEY, xrevrange),
    spec("xdel", -3, &["write", "fast"], ONE_KEY, xdel),
    spec("xtrim", -4, &["write"], ONE_KEY, xtrim),
    spec("xsetid", -3, &["write", "denyoom", "fast"], ONE_KEY, xsetid),
    spec("xread", -4, &["readonly", "blocking"], (0, 0, 0), xread),
    spec("xinfo", -2, &["readonly"], (2, 2, 1), xinfo),
];

/// `XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] *|id field value …`.
fn xadd(s: &mut Session, args: &[Bytes]) -> Reply {
    let parsed = match parse_add_or_trim(s, args, true) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let fields = &args[(parsed.id_at + 1).min(args.len())..];
    if parsed.id_at >= args.len() || fields.len() < 2 || !fields.len().is_multiple_of(2) {
        return Reply::error("ERR wrong number of arguments for 'xadd' command");
    }
    if let Some((StreamId { ms: 0, seq: 0 }, true)) = parsed.id {
        return Reply::error("ERR The ID specified in XADD must be greater than 0-0");
    }
    let key = &args[1];
    let guard = s.state.storage.lock(&s.exec, s.db, [&key[..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let mut b = lsm::WriteBatch::new();
    let (meta, mut sm) = match stream_at(&view, key) {
        Ok(Some(found)) => found,
        Ok(None) if parsed.nomkstream => return Reply::Null,
        Ok(None) => (view.create(&mut b, key, KeyType::Stream), StreamMeta::default()),
        Err(e) => return e,
    };
    if sm.last == StreamId::MAX {
        return Reply::error("ERR The stream has exhausted the last possible ID, unable to add more items");
    }
    let id = match parsed.id {
        Some((id, true)) => Some(id),
        Some((id, false)) if id.ms == sm.last.ms => sm.last.incr().filter(|n| n.ms == id.ms),
        Some((id, false)) => Some(id),
        None => StreamId::next_after(sm.last, crate::storage::now_ms()),
    };
    let Some(id) = id.filter(|&id| id > sm.last) else {
        return Reply::error("ERR The ID specified in XADD is equal or smaller than the target stream top item");
    };
    // A new emulated node when the tail one is full (Redis's listpack node limits).
    let bytes: u64 = fields.iter().map(|f| f.len() as u64 + 2).sum();
    let (max_entries, max_bytes) = {
        let cfg = s.state.config();
        (cfg.stream_node_max_entries, cfg.stream_node_max_bytes)
    };
    let full = sm.tail_entries > 0
        && ((max_entries > 0 && sm.tail_entries >= max_entries)
            || (max_bytes > 0 && sm.tail_bytes + bytes >= max_bytes));
    if full || sm.length == 0 {
        sm.tail_node += 1;
        sm.tail_entries = 0;
        sm.tail_bytes = 0;
    }
    sm.tail_entries += 1;
    sm.tail_bytes += bytes;
    view.put_element(&mut b, meta.uid, &id.field(), &encode_entry(sm.tail_node, fields));
    if sm.length == 0 {
        sm.first = id;
    }
    sm.length += 1;
    sm.added += 1;
    sm.last = id;
    let tail = sm.tail_node;
    let trimmed = match trim(&view, &mut b, (&meta, &mut sm), parsed.trim, Some((id, tail))) {
        Ok(n) => n,
        Err(e) => return engine_error(e),
    };
    put(&view, &mut b, key, &meta, &sm);
    if let Err(e) = s.state.storage.write(&s.exec, b) {
        return engine_error(e);
    }
    s.notify(STREAM, "xadd", key);
    if trimmed > 0 {
        s.notify(STREAM, "xtrim", key);
    }
    drop(guard);
    s.signal(key);
    Reply::Bulk(id.text())
}

/// Runs `f` on the stream at `key` (locked for the command); if it answers that it changed
/// something, commits its batch with the stream's new metadata and records `event`. `missing`
/// answers when there is no stream at `key`.
fn change_stream(
    s: &Session,
    (key, event): (&Bytes, &'static str),
    missing: Reply,
    f: impl FnOnce(&View, &Meta, &mut StreamMeta, &mut lsm::WriteBatch) -> Result<(Reply, bool), Reply>,
) -> Reply {
    let _guard = s.state.storage.lock(&s.exec, s.db, [&key[..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let (meta, mut sm) = match stream_at(&view, key) {
        Ok(Some(found)) => found,
        Ok(None) => return missing,
        Err(e) => return e,
    };
    let mut b = lsm::WriteBatch::new();
    let (reply, changed) = match f(&view, &meta, &mut sm, &mut b) {
        Ok(r) => r,
        Err(e) => return e,
    };
    if !changed {
        return reply;
    }
    put(&view, &mut b, key, &meta, &sm);
    if let Err(e) = s.state.storage.write(&s.exec, b) {
        return engine_error(e);
    }
    s.notify(STREAM, event, key);
    reply
}

/// `XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]`.
fn xtrim(s: &mut Session, args: &[Bytes]) -> Reply {
    let parsed = match parse_add_or_trim(s, args, false) {
        Ok(p) => p,
        Err(e) => return e,
    };
    change_stream(s, (&args[1], "xtrim"), Reply::Integer(0), |view, meta, sm, b| {
        let trimmed = trim(view, b, (meta, sm), parsed.trim, None).map_err(engine_error)?;
        Ok((Reply::Integer(trimmed as i64), trimmed > 0))
    })
}

fn xlen(s: &mut Session, args: &[Bytes]) -> Reply {
    match stream_at(&s.state.storage.view(&s.exec, s.db), &args[1]) {
        Ok(found) => Reply::Integer(found.map_or(0, |(_, sm)| sm.length as i64)),
        Err(e) => e,
    }
}

/// XRANGE and XREVRANGE (`rev`: the arguments are end, start).
fn xrange_generic(s: &mut Session, args: &[Bytes], rev: bool) -> Reply {
    let (start_arg, end_arg) = if rev { (&args[3], &args[2]) } else { (&args[2], &args[3]) };
    // `(id`: exclusive (strict: no `-`/`+` after it).
    let bound = |arg: &Bytes, missing_seq: u64| -> Result<(StreamId, bool), Reply> {
        if arg.len() > 1 && arg[0] == b'(' {
            let id = parse_id(&arg[1..], IdSyntax { missing_seq, strict: true, seq_star: false })?.0;
            return Ok((id, true));
        }
        Ok((parse_id(arg, IdSyntax { missing_seq, strict: false, seq_star: false })?.0, false))
    };
    let start = match bound(start_arg, 0) {
        Ok((id, false)) => id,
        Ok((id, true)) => match id.incr() {
            Some(id) => id,
            None => return Reply::error("ERR invalid start ID for the interval"),
        },
        Err(e) => return e,
    };
    let end = match bound(end_arg, u64::MAX) {
        Ok((id, false)) => id,
        Ok((id, true)) => match id.decr() {
            Some(id) => id,
            None => return Reply::error("ERR invalid end ID for the interval"),
        },
        Err(e) => return e,
    };
    let mut count: Option<i64> = None;
    let mut i = 4;
    while i < args.len() {
        if args[i].eq_ignore_ascii_case(b"count") && i + 1 < args.len() {
            match parse_i64(&args[i + 1]) {
                Some(n) => count = Some(n.max(0)),
                None => return Reply::error(NOT_INTEGER),
            }
            i += 2;
        } else {
            return Reply::error(SYNTAX);
        }
    }
    let view = s.state.storage.view(&s.exec, s.db);
    let (meta, sm) = match stream_at(&view, &args[1]) {
        Ok(Some(found)) => found,
        Ok(None) => return Reply::Array(Vec::new()),
        Err(e) => return e,
    };
    if count == Some(0) {
        return Reply::NullArray;
    }
    let count = usize::try_from(count.unwrap_or(0)).unwrap_or(usize::MAX);
    match range(&view, &meta, &sm, (start, end), count, rev) {
        Ok(entries) => Reply::Array(entries),
        Err(e) => engine_error(e),
    }
}

fn xrange(s: &mut Session, args: &[Bytes]) -> Reply {
    xrange_generic(s, args, false)
}

fn xrevrange(s: &mut Session, args: &[Bytes]) -> Reply {
    xrange_generic(s, args, true)
}

/// `XDEL key id [id …]`: how many entries were deleted.
fn xdel(s: &mut Session, args: &[Bytes]) -> Reply {
    // Every ID is checked before anything is deleted.
    let mut ids = Vec::with_capacity(args.len() - 2);
    for arg in &args[2..] {
        match strict_id(arg) {
            Ok(id) => ids.push(id),
            Err(e) => return e,
        }
    }
    change_stream(s, (&args[1], "xdel"), Reply::Integer(0), |view, meta, sm, b| {
        let mut deleted = std::collections::BTreeSet::new();
        for id in ids {
            if id < sm.first || deleted.contains(&id) {
                continue;
            }
            match view.element(meta.uid, &id.field()) {
                Ok(Some(_)) => {
                    view.delete_element(b, meta.uid, &id.field());
                    deleted.insert(id);
                    sm.max_deleted = sm.max_deleted.max(id);
                }
                Ok(None) => {}
                Err(e) => return Err(engine_error(e)),
            }
        }
        if deleted.is_empty() {
            return Ok((Reply::Integer(0), false));
        }
        sm.length -= deleted.len() as u64;
        if sm.length == 0 {
            sm.first = StreamId::default();
        } else if deleted.contains(&sm.first) {
            // The new first entry: the first live one after the deleted first, skipping the ones
            // this command deletes (not yet written).
            let mut from = sm.first.incr();
            loop {
                match first_from(view, meta.uid, from) {
                    Ok(Some(id)) if deleted.contains(&id) => from = id.incr(),
                    Ok(found) => {
                        sm.first = found.unwrap_or_default();
                        break;
                    }
                    Err(e) => return Err(engine_error(e)),
                }
            }
        }
        Ok((Reply::Integer(deleted.len() as i64), true))
    })
}

/// `XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]`.
fn xsetid(s: &mut Session, args: &[Bytes]) -> Reply {
    let id = match strict_id(&args[2]) {
        Ok(id) => id,
        Err(e) => return e,
    };
    let (mut added, mut max_deleted) = (None, StreamId::default());
    let mut i = 3;
    while i < args.len() {
        let more = args.len() - 1 - i;
        if args[i].eq_ignore_ascii_case(b"entriesadded") && more > 0 {
            match parse_i64(&args[i + 1]) {
                None => return Reply::error(NOT_INTEGER),
                Some(n) if n < 0 => return Reply::error("ERR entries_added must be positive"),
                Some(n) => added = Some(n as u64),
            }
        } else if args[i].eq_ignore_ascii_case(b"maxdeletedid") && more > 0 {
            match strict_id(&args[i + 1]) {
                Err(e) => return e,
                Ok(m) if id < m => {
                    return Reply::error(
                        "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                    )
                }
                Ok(m) => max_deleted = m,
            }
        } else {
            return Reply::error(SYNTAX);
        }
        i += 2;
    }
    let key = &args[1];
    let _guard = s.state.storage.lock(&s.exec, s.db, [&key[..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let (meta, mut sm) = match stream_at(&view, key) {
        Ok(Some(found)) => found,
        Ok(None) => return Reply::error("ERR no such key"),
        Err(e) => return e,
    };
    if sm.length > 0 {
        let top = match range(&view, &meta, &sm, (StreamId::default(), StreamId::MAX), 1, true) {
            Ok(top) => top,
            Err(e) => return engine_error(e),
        };
        let top_id = match top.first() {
            Some(Reply::Array(parts)) => match parts.first() {
                Some(Reply::Bulk(text)) => strict_id(text).unwrap_or_default(),
                _ => StreamId::default(),
            },
            _ => StreamId::default(),
        };
        if id < top_id {
            return Reply::error("ERR The ID specified in XSETID is smaller than the target stream top item");
        }
        if added.is_some_and(|a| sm.length > a) {
            return Reply::error("ERR The entries_added specified in XSETID is smaller than the target stream length");
        }
    }
    sm.last = id;
    if let Some(a) = added {
        sm.added = a;
    }
    if max_deleted != StreamId::default() {
        sm.max_deleted = max_deleted;
    }
    let mut b = lsm::WriteBatch::new();
    put(&view, &mut b, key, &meta, &sm);
    if let Err(e) = s.state.storage.write(&s.exec, b) {
        return engine_error(e);
    }
    s.notify(STREAM, "xsetid", key);
    Reply::ok()
}

/// The whole stream `meta` describes, as RDB carries it (DUMP, SAVE, MIGRATE): its entries in
/// their emulated nodes, its fields and its groups.
pub(crate) fn stream_value(view: &View, meta: &Meta) -> lsm::Result<crate::rdb::stream::StreamValue> {
    let sm = StreamMeta::of(meta);
    let mut nodes: Vec<crate::rdb::stream::Node> = Vec::new();
    let mut current = None;
    if sm.length > 0 {
        for kv in view.elements_between(meta.uid, &sm.first.field(), ENTRIES_END) {
            let (field, value) = kv?;
            let id = StreamId::of_field(&field).ok_or_else(damaged)?;
            let node = entry_node(&value).ok_or_else(damaged)?;
            let items = entry_items(&value).ok_or_else(damaged)?;
            if current != Some(node) {
                nodes.push(Vec::new());
                current = Some(node);
            }
            nodes.last_mut().ok_or_else(damaged)?.push(((id.ms, id.seq), items));
        }
    }
    Ok(crate::rdb::stream::StreamValue {
        nodes,
        length: sm.length,
        last: (sm.last.ms, sm.last.seq),
        first: (sm.first.ms, sm.first.seq),
        max_deleted: (sm.max_deleted.ms, sm.max_deleted.seq),
        added: sm.added,
        groups: group_records::rdb_groups(view, meta.uid)?,
    })
}

/// Adds writing stream `v` (from RDB) at `key` with expiry `expire_at` to `b`, under a new
/// incarnation; each RDB node is one emulated node.
pub(crate) fn write_stream_value(
    view: &View,
    b: &mut lsm::WriteBatch,
    key: &[u8],
    v: &crate::rdb::stream::StreamValue,
    expire_at: u64,
) {
    let mut meta = view.create(b, key, KeyType::Stream);
    meta.expire_at_ms = expire_at;
    let id = |(ms, seq): (u64, u64)| StreamId { ms, seq };
    let mut sm = StreamMeta {
        last: id(v.last),
        max_deleted: id(v.max_deleted),
        added: v.added,
        groups: v.groups.len() as u64,
        ..StreamMeta::default()
    };
    for (i, node) in v.nodes.iter().enumerate() {
        sm.tail_node = i as u64 + 1;
        sm.tail_entries = node.len() as u64;
        sm.tail_bytes = 0;
        for (entry, items) in node {
            view.put_element(b, meta.uid, &id(*entry).field(), &encode_entry(sm.tail_node, items));
            sm.tail_bytes += items.iter().map(|f| f.len() as u64 + 2).sum::<u64>();
            sm.length += 1;
        }
    }
    // The first live entry bounds every read: it is the first one loaded, whatever was recorded.
    sm.first = v.nodes.first().and_then(|n| n.first()).map_or_else(StreamId::default, |(e, _)| id(*e));
    group_records::write_rdb_groups(view, b, (meta.uid, &sm), &v.groups);
    put(view, b, key, &meta, &sm);
}
