//! Consumer groups: XGROUP, XREADGROUP and XACK (XPENDING, XCLAIM and XAUTOCLAIM are in
//! `pending`, the records in `group_records`, what XINFO shows of groups in `read`).
//!
//! A group's state lives in element records beside the stream's entries, under the same
//! incarnation (so DEL, COPY, RENAME and MOVE take it along):
//!
//! ```text
//! group              'g' | name                                   -> last ID (ms, seq) | entries read i64 | pending | consumers
//! pending entry      'p' | len u32 BE | group | id                -> delivery time ms | deliveries | consumer
//! consumer           'c' | len u32 BE | group | consumer          -> seen time ms | pending
//! consumer's pending 'q' | len u32 BE | group | len u32 BE | consumer | id  -> (empty)
//! ```
//! (u64 LE numbers; IDs as 16 big-endian bytes, so the group's and each consumer's pending
//! entries are in ID order.) Each command reads what it needs by key and writes what it
//! changed in one batch: an XREADGROUP, XACK or XCLAIM of `n` entries costs O(n log N).

use bytes::Bytes;

use super::group_records::*;
use super::pending::{xautoclaim, xclaim, xpending};
use super::{
    block_on, damaged, entry_reply, parse_id, parse_read, put, stream_at, streams_reply, strict_id, IdSyntax, StreamId,
    StreamMeta, NOT_INTEGER,
};
use crate::commands::collections::SYNTAX;
use crate::commands::{engine_error, parse_i64, spec, CommandSpec, Session, ONE_KEY};
use crate::resp::Reply;
use crate::services::notifications::STREAM;
use crate::state::ServerState;
use crate::storage::{now_ms, ExecContext, KeyType, Meta, View};

pub(in crate::commands) static COMMANDS: &[CommandSpec] = &[
    spec("xgroup", -2, &["write"], (2, 2, 1), xgroup),
    spec("xreadgroup", -7, &["write", "blocking"], (0, 0, 0), xreadgroup),
    spec("xack", -4, &["write", "fast"], ONE_KEY, xack),
    spec("xpending", -3, &["readonly"], ONE_KEY, xpending),
    spec("xclaim", -6, &["write", "fast"], ONE_KEY, xclaim),
    spec("xautoclaim", -6, &["write", "fast"], ONE_KEY, xautoclaim),
];

pub(super) fn nogroup(key: &[u8], group: &[u8]) -> Reply {
    Reply::error(format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

pub(super) fn text(k: &str) -> Reply {
    Reply::bulk(Bytes::from(k.to_string()))
}

pub(super) fn id_reply(id: StreamId) -> Reply {
    Reply::Bulk(id.text())
}

/// Where a command runs: the server, its execution context and its database.
type Place<'a> = (&'a ServerState, &'a ExecContext, u32);

fn place(s: &Session) -> Place<'_> {
    (&s.state, &s.exec, s.db)
}

/// Commits `b` with the stream's metadata, then records `events` for `key`.
fn commit(
    (state, cx, db): Place,
    view: &View,
    mut b: lsm::WriteBatch,
    (key, meta, sm): (&[u8], &Meta, &StreamMeta),
    events: &[&'static str],
) -> Result<(), Reply> {
    put(view, &mut b, key, meta, sm);
    state.storage.write(cx, b).map_err(engine_error)?;
    for e in events {
        cx.notify(STREAM, e, db, key);
    }
    Ok(())
}

/// `XGROUP CREATE | SETID | DESTROY | CREATECONSUMER | DELCONSUMER | HELP`.
fn xgroup(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    let syntax = || {
        Reply::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try XGROUP HELP.",
            String::from_utf8_lossy(&args[1])
        ))
    };
    if sub == "help" {
        return Reply::Array(
            [
                "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CREATE <key> <groupname> <id|$> [option]",
                "    Create a new consumer group. Options are:",
                "    * MKSTREAM",
                "      Create the empty stream if it does not exist.",
                "    * ENTRIESREAD entries_read",
                "      Set the group's entries_read counter (internal use).",
                "CREATECONSUMER <key> <groupname> <consumer>",
                "    Create a new consumer in the specified group.",
                "DELCONSUMER <key> <groupname> <consumer>",
                "    Remove the specified consumer.",
                "DESTROY <key> <groupname>",
                "    Remove the specified group.",
                "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
                "    Set the current group ID and entries_read counter.",
                "HELP",
                "    Prints this help.",
            ]
            .iter()
            .map(|l| Reply::Simple((*l).into()))
            .collect(),
        );
    }
    if !matches!(sub.as_str(), "create" | "setid" | "destroy" | "createconsumer" | "delconsumer") {
        return Reply::error(format!(
            "ERR unknown subcommand '{}'. Try XGROUP HELP.",
            String::from_utf8_lossy(&args[1])
        ));
    }
    if args.len() < 4 {
        return syntax();
    }
    let (mut mkstream, mut entries_read) = (false, UNKNOWN_READS);
    let mut i = 5;
    while i < args.len() {
        if sub == "create" && args[i].eq_ignore_ascii_case(b"mkstream") {
            mkstream = true;
            i += 1;
        } else if (sub == "create" || sub == "setid")
            && args[i].eq_ignore_ascii_case(b"entriesread")
            && i + 1 < args.len()
        {
            match parse_i64(&args[i + 1]) {
                None => return Reply::error(NOT_INTEGER),
                Some(n) if n < 0 && n != UNKNOWN_READS => {
                    return Reply::error("ERR value for ENTRIESREAD must be positive or -1")
                }
                Some(n) => entries_read = n,
            }
            i += 2;
        } else {
            return syntax();
        }
    }
    let (key, name) = (&args[2], &args[3]);
    let guard = s.state.storage.lock(&s.exec, s.db, [&key[..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let mut b = lsm::WriteBatch::new();
    let found = match stream_at(&view, key) {
        Ok(found) => found,
        Err(e) => return e,
    };
    let (meta, mut sm) = match found {
        Some(found) => found,
        None if mkstream => (view.create(&mut b, key, KeyType::Stream), StreamMeta::default()),
        None => {
            return Reply::error(
                "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
            )
        }
    };
    let mut groups = Groups::new(&view, meta.uid);
    let group = match groups.group(name) {
        Ok(g) => g,
        Err(e) => return engine_error(e),
    };
    let no_group = || {
        Reply::error(format!(
            "NOGROUP No such consumer group '{}' for key name '{}'",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(key)
        ))
    };
    let id_arg = |at: usize, strict: bool| -> Result<StreamId, Reply> {
        if args[at][..] == b"$"[..] {
            return Ok(sm.last);
        }
        Ok(parse_id(&args[at], IdSyntax { missing_seq: 0, strict, seq_star: false })?.0)
    };
    let (reply, event) = match (sub.as_str(), group) {
        ("create", _) if !(5..=8).contains(&args.len()) => return syntax(),
        ("create", Some(_)) => return Reply::error("BUSYGROUP Consumer Group name already exists"),
        ("create", None) => {
            let last = match id_arg(4, true) {
                Ok(id) => id,
                Err(e) => return e,
            };
            let g = Group { name: name.clone(), last, entries_read, pending: 0, consumers: 0 };
            groups.put_group(&mut b, &g);
            sm.groups += 1;
            (Reply::ok(), "xgroup-create")
        }
        ("setid", _) if args.len() != 5 && args.len() != 7 => return syntax(),
        ("setid", None) => return no_group(),
        ("setid", Some(mut g)) => {
            g.last = match id_arg(4, false) {
                Ok(id) => id,
                Err(e) => return e,
            };
            g.entries_read = entries_read;
            groups.put_group(&mut b, &g);
            (Reply::ok(), "xgroup-setid")
        }
        ("destroy", _) if args.len() != 4 => return syntax(),
        ("destroy", None) => return Reply::Integer(0),
        ("destroy", Some(_)) => {
            groups.destroy(&mut b, name);
            sm.groups = sm.groups.saturating_sub(1);
            (Reply::Integer(1), "xgroup-destroy")
        }
        ("createconsumer" | "delconsumer", _) if args.len() != 5 => return syntax(),
        ("createconsumer" | "delconsumer", None) => return no_group(),
        ("createconsumer", Some(mut g)) => {
            match groups.consumer(name, &args[4]) {
                Ok(Some(_)) => return Reply::Integer(0),
                Ok(None) => {}
                Err(e) => return engine_error(e),
            }
            if let Err(e) = groups.consumer_or_create(&mut g, &args[4], true) {
                return engine_error(e);
            }
            groups.events.clear();
            groups.put_group(&mut b, &g);
            (Reply::Integer(1), "xgroup-createconsumer")
        }
        ("delconsumer", Some(mut g)) => {
            let consumer = &args[4];
            let c = match groups.consumer(name, consumer) {
                Ok(Some(c)) => c,
                Ok(None) => return Reply::Integer(0),
                Err(e) => return engine_error(e),
            };
            let ids = match groups.consumer_pending(name, consumer, StreamId::default(), usize::MAX) {
                Ok(ids) => ids,
                Err(e) => return engine_error(e),
            };
            for id in &ids {
                if let Err(e) = groups.release(&mut g, *id) {
                    return engine_error(e);
                }
            }
            groups.set_consumer(name, consumer, None);
            g.consumers = g.consumers.saturating_sub(1);
            groups.put_group(&mut b, &g);
            (Reply::Integer(c.pending as i64), "xgroup-delconsumer")
        }
        _ => return syntax(),
    };
    if let Err(e) = groups.write(&mut b) {
        return engine_error(e);
    }
    if let Err(e) = commit(place(s), &view, b, (key, &meta, &sm), &[event]) {
        return e;
    }
    drop(guard);
    // A destroyed group answers its blocked readers with NOGROUP.
    if event == "xgroup-destroy" {
        s.signal(key);
    }
    reply
}

/// Delivers up to `count` (0: all) new entries of `key` to `consumer` of `group` (XREADGROUP
/// with `>`), writing the group's progress and the pending entries. `None` if there is nothing
/// new.
fn deliver_new(
    at: Place,
    view: &View,
    (key, opened): (&[u8], Opened),
    consumer: &Bytes,
    count: usize,
    noack: bool,
) -> Result<Option<Reply>, Reply> {
    let Opened { meta, sm, group: mut g } = opened;
    let mut groups = Groups::new(view, meta.uid);
    let Some(start) = g.last.incr() else { return Ok(None) };
    if sm.length == 0 || sm.last < start {
        return Ok(None);
    }
    let mut entries = Vec::new();
    let to = StreamId::MAX;
    let now = now_ms();
    let mut b = lsm::WriteBatch::new();
    groups.consumer_or_create(&mut g, consumer, true).map_err(engine_error)?;
    let mut it = view.elements_resuming(meta.uid, &start.max(sm.first).field(), super::ENTRIES_END);
    while count == 0 || entries.len() < count {
        let Some(kv) = it.next() else { break };
        let (field, value) = kv.map_err(engine_error)?;
        let id = StreamId::of_field(&field).ok_or_else(|| engine_error(damaged()))?;
        if id > to {
            break;
        }
        if g.entries_read != UNKNOWN_READS && !has_tombstones(&sm, id, StreamId::MAX) {
            g.entries_read += 1;
        } else if sm.added > 0 {
            g.entries_read = reads_up_to(&sm, id).unwrap_or(UNKNOWN_READS);
        }
        g.last = id;
        if !noack {
            groups.assign(&mut g, id, consumer, now, 1).map_err(engine_error)?;
        }
        entries.push(entry_reply(id, &value).map_err(engine_error)?);
    }
    if entries.is_empty() {
        return Ok(None);
    }
    groups.put_group(&mut b, &g);
    groups.write(&mut b).map_err(engine_error)?;
    let events = std::mem::take(&mut groups.events);
    commit(at, view, b, (key, &meta, &sm), &events)?;
    Ok(Some(Reply::Array(entries)))
}

/// XREADGROUP with an ID: the consumer's own pending entries after it, each delivered again.
fn deliver_history(
    at: Place,
    view: &View,
    (key, opened): (&[u8], Opened),
    consumer: &Bytes,
    after: StreamId,
    count: usize,
) -> Result<Reply, Reply> {
    let Opened { meta, sm, group: mut g } = opened;
    let group = &g.name.clone();
    let mut groups = Groups::new(view, meta.uid);
    let Some(start) = after.incr() else { return Ok(Reply::Array(Vec::new())) };
    groups.consumer_or_create(&mut g, consumer, true).map_err(engine_error)?;
    let limit = if count == 0 { usize::MAX } else { count };
    let ids = groups.consumer_pending(group, consumer, start, limit).map_err(engine_error)?;
    let now = now_ms();
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        match view.element(meta.uid, &id.field()).map_err(engine_error)? {
            Some(value) => {
                out.push(entry_reply(id, &value).map_err(engine_error)?);
                if let Some(mut n) = groups.nack(group, id).map_err(engine_error)? {
                    n.time = now;
                    n.deliveries += 1;
                    groups.nacks.insert((group.clone(), id), Some(n));
                }
            }
            // Pending, but deleted from the stream: the ID with a null entry.
            None => out.push(Reply::Array(vec![id_reply(id), Reply::NullArray])),
        }
    }
    let mut b = lsm::WriteBatch::new();
    groups.put_group(&mut b, &g);
    groups.write(&mut b).map_err(engine_error)?;
    let events = std::mem::take(&mut groups.events);
    commit(at, view, b, (key, &meta, &sm), &events)?;
    Ok(Reply::Array(out))
}

/// `XREADGROUP GROUP group consumer [COUNT count] [BLOCK ms] [NOACK] STREAMS key … id …`.
fn xreadgroup(s: &mut Session, args: &[Bytes]) -> Reply {
    let read = match parse_read(s, args, true) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let Some((group, consumer)) = read.group.clone() else { return Reply::error(SYNTAX) };
    let (keys, id_args) = read.streams(args);
    let guard = s.state.storage.lock(&s.exec, s.db, keys.iter().map(|k| &k[..]));
    let view = s.state.storage.view(&s.exec, s.db);
    // Every key and group must exist, and every ID be valid, before anything is read. Each
    // stream and group is read once: what was opened here is what is delivered from.
    let mut history = Vec::with_capacity(keys.len());
    let mut opened = Vec::with_capacity(keys.len());
    for (key, arg) in keys.iter().zip(id_args) {
        match open_group(&view, key, &group) {
            Ok(Some(o)) => opened.push(o),
            Ok(None) => {
                return Reply::error(format!(
                    "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                    String::from_utf8_lossy(key),
                    String::from_utf8_lossy(&group)
                ))
            }
            Err(e) => return e,
        }
        if arg[..] == b"$"[..] {
            return Reply::error("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.");
        }
        if arg[..] == b">"[..] {
            history.push(None);
            continue;
        }
        match strict_id(arg) {
            Ok(id) => history.push(Some(id)),
            Err(e) => return e,
        }
    }
    let mut found = Vec::new();
    for (i, ((key, from), opened)) in keys.iter().zip(&history).zip(opened).enumerate() {
        // A key named twice is opened again: the first delivery moved its group on.
        let opened = if keys[..i].contains(key) {
            match open_group(&view, key, &group) {
                Ok(Some(o)) => o,
                Ok(None) => continue,
                Err(e) => return e,
            }
        } else {
            opened
        };
        let served = match from {
            Some(after) => deliver_history(place(s), &view, (key, opened), &consumer, *after, read.count).map(Some),
            None => deliver_new(place(s), &view, (key, opened), &consumer, read.count, read.noack),
        };
        match served {
            Ok(Some(entries)) => found.push((key.clone(), entries)),
            Ok(None) => {}
            Err(e) => return e,
        }
    }
    drop(guard);
    let resp3 = s.protocol == crate::resp::Protocol::Resp3;
    if !found.is_empty() {
        return streams_reply(found, resp3);
    }
    let Some(timeout) = read.block else { return Reply::NullArray };
    let db = s.db;
    let count = if read.count == 0 { 1000 } else { read.count };
    let noack = read.noack;
    block_on(s, keys.to_vec(), timeout, Reply::NullArray, move |state, cx: &ExecContext, key| {
        serve_blocked((state, cx, db), key, (&group, &consumer), (count, noack)).map(|r| {
            r.map(|r| match r {
                Reply::Error(_) => r,
                entries => streams_reply(vec![(key.clone(), entries)], resp3),
            })
        })
    })
}

/// A blocked XREADGROUP's attempt on `key`: new entries, or the error that ends its wait when
/// the stream or the group is gone.
fn serve_blocked(
    (state, cx, db): Place,
    key: &Bytes,
    (group, consumer): (&Bytes, &Bytes),
    (count, noack): (usize, bool),
) -> Result<Option<Reply>, Reply> {
    let _guard = state.storage.lock(cx, db, [&key[..]]);
    let view = state.storage.view(cx, db);
    let meta = match view.get(key) {
        Ok(Some(m)) if m.kind == KeyType::Stream => m,
        Ok(_) => return Ok(Some(Reply::error("UNBLOCKED the stream key no longer exists"))),
        Err(e) => return Err(engine_error(e)),
    };
    let Some(group) = Groups::new(&view, meta.uid).group(group).map_err(engine_error)? else {
        return Ok(Some(Reply::error("NOGROUP the consumer group this client was blocked on no longer exists")));
    };
    let sm = StreamMeta::of(&meta);
    deliver_new((state, cx, db), &view, (key, Opened { meta, sm, group }), consumer, count, noack)
}

/// A stream and one of its consumer groups, read for a delivery.
struct Opened {
    meta: Meta,
    sm: StreamMeta,
    group: Group,
}

/// The stream at `key` and its group `group`; `None` if either does not exist (an error if
/// the key holds another type).
fn open_group(view: &View, key: &[u8], group: &[u8]) -> Result<Option<Opened>, Reply> {
    let Some((meta, sm)) = stream_at(view, key)? else { return Ok(None) };
    let group = Groups::new(view, meta.uid).group(group).map_err(engine_error)?;
    Ok(group.map(|group| Opened { meta, sm, group }))
}

/// Runs `f` on group `group` of the stream at `key` (locked for the command), then writes the
/// group, the records `f` changed and the stream's metadata in one batch — unless `f` answers
/// that nothing changed. `missing` answers when the key or the group does not exist.
pub(super) fn change_group(
    s: &Session,
    (key, group): (&Bytes, &Bytes),
    missing: Reply,
    f: impl FnOnce(&View, &Meta, &mut Groups, &mut Group) -> Result<(Reply, bool), Reply>,
) -> Reply {
    let _guard = s.state.storage.lock(&s.exec, s.db, [&key[..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let (meta, sm) = match stream_at(&view, key) {
        Ok(Some(found)) => found,
        Ok(None) => return missing,
        Err(e) => return e,
    };
    let mut groups = Groups::new(&view, meta.uid);
    let mut g = match groups.group(group) {
        Ok(Some(g)) => g,
        Ok(None) => return missing,
        Err(e) => return engine_error(e),
    };
    let (reply, changed) = match f(&view, &meta, &mut groups, &mut g) {
        Ok(r) => r,
        Err(e) => return e,
    };
    if !changed {
        return reply;
    }
    let mut b = lsm::WriteBatch::new();
    groups.put_group(&mut b, &g);
    if let Err(e) = groups.write(&mut b) {
        return engine_error(e);
    }
    let events = std::mem::take(&mut groups.events);
    match commit(place(s), &view, b, (key, &meta, &sm), &events) {
        Ok(()) => reply,
        Err(e) => e,
    }
}

/// `XACK key group id …`: how many pending entries were acknowledged.
fn xack(s: &mut Session, args: &[Bytes]) -> Reply {
    change_group(s, (&args[1], &args[2]), Reply::Integer(0), |_, _, groups, g| {
        let mut ids = Vec::with_capacity(args.len() - 3);
        for arg in &args[3..] {
            ids.push(strict_id(arg)?);
        }
        let mut acked = 0;
        for id in ids {
            acked += i64::from(groups.release(g, id).map_err(engine_error)?);
        }
        Ok((Reply::Integer(acked), acked > 0))
    })
}
