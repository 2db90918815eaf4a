//! The reading commands: XREAD (with BLOCK) and the option parsing it shares with
//! XREADGROUP, and XINFO.

use std::time::Duration;

use bytes::Bytes;

use super::group_records::*;
use super::groups::{id_reply, text};
use super::model::*;
use crate::commands::blocking_pops::block_on;
use crate::commands::collections::SYNTAX;
use crate::commands::{engine_error, parse_i64, Session};
use crate::resp::Reply;
use crate::storage::{now_ms, ExecContext, Meta, View};

/// Entries of `key` after `after` (at most `count`, 0: all), or `None` if there are none (or
/// the key holds no stream).
pub(super) fn read_after(view: &View, key: &[u8], after: StreamId, count: usize) -> Result<Option<Reply>, Reply> {
    let Some((meta, sm)) = stream_at(view, key)? else { return Ok(None) };
    let Some(start) = after.incr() else { return Ok(None) };
    if sm.length == 0 || sm.last < start {
        return Ok(None);
    }
    let entries = range(view, &meta, &sm, (start, StreamId::MAX), count, false).map_err(engine_error)?;
    Ok((!entries.is_empty()).then_some(Reply::Array(entries)))
}

/// Replies of XREAD for several streams: an array of `[key, entries]` (a map in RESP3).
pub(super) fn streams_reply(found: Vec<(Bytes, Reply)>, resp3: bool) -> Reply {
    if resp3 {
        Reply::Map(found.into_iter().map(|(k, v)| (Reply::Bulk(k), v)).collect())
    } else {
        Reply::Array(found.into_iter().map(|(k, v)| Reply::Array(vec![Reply::Bulk(k), v])).collect())
    }
}

/// The options of XREAD and XREADGROUP.
pub(super) struct ReadArgs {
    /// Most entries per stream (0: all).
    pub count: usize,
    /// BLOCK's timeout (`Some(None)`: forever).
    pub block: Option<Option<Duration>>,
    /// XREADGROUP's group and consumer.
    pub group: Option<(Bytes, Bytes)>,
    pub noack: bool,
    /// Where the keys start; the IDs follow them.
    pub streams_at: usize,
}

impl ReadArgs {
    /// The keys and their ID arguments.
    pub fn streams<'a>(&self, args: &'a [Bytes]) -> (&'a [Bytes], &'a [Bytes]) {
        let rest = &args[self.streams_at..];
        rest.split_at(rest.len() / 2)
    }
}

/// Parses `[COUNT count] [BLOCK ms] [GROUP g c] [NOACK] STREAMS key … id …` (Redis's
/// `xreadCommand`).
pub(super) fn parse_read(s: &Session, args: &[Bytes], xreadgroup: bool) -> Result<ReadArgs, Reply> {
    let name = if xreadgroup { "xreadgroup" } else { "xread" };
    let mut out = ReadArgs { count: 0, block: None, group: None, noack: false, streams_at: 0 };
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = args[i].to_ascii_lowercase();
        match opt.as_slice() {
            b"block" if more > 0 => {
                if s.in_script {
                    return Err(Reply::error(format!(
                        "ERR {name} command is not allowed with BLOCK option from scripts"
                    )));
                }
                let ms = parse_i64(&args[i + 1])
                    .ok_or_else(|| Reply::error("ERR timeout is not an integer or out of range"))?;
                if ms < 0 {
                    return Err(Reply::error("ERR timeout is negative"));
                }
                out.block = Some((ms > 0).then(|| Duration::from_millis(ms as u64)));
                i += 2;
            }
            b"count" if more > 0 => {
                let n = parse_i64(&args[i + 1]).ok_or_else(|| Reply::error(NOT_INTEGER))?;
                out.count = usize::try_from(n.max(0)).unwrap_or(usize::MAX);
                i += 2;
            }
            b"streams" if more > 0 => {
                out.streams_at = i + 1;
                if !(args.len() - out.streams_at).is_multiple_of(2) {
                    return Err(Reply::error(
                        "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
                    ));
                }
                break;
            }
            b"group" if more >= 2 => {
                if !xreadgroup {
                    return Err(Reply::error(
                        "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                    ));
                }
                out.group = Some((args[i + 1].clone(), args[i + 2].clone()));
                i += 3;
            }
            b"noack" => {
                if !xreadgroup {
                    return Err(Reply::error(
                        "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                    ));
                }
                out.noack = true;
                i += 1;
            }
            _ => return Err(Reply::error(SYNTAX)),
        }
    }
    if out.streams_at == 0 {
        return Err(Reply::error(SYNTAX));
    }
    if xreadgroup && out.group.is_none() {
        return Err(Reply::error("ERR Missing GROUP option for XREADGROUP"));
    }
    Ok(out)
}

/// `XREAD [COUNT count] [BLOCK milliseconds] STREAMS key … id …`.
pub(super) fn xread(s: &mut Session, args: &[Bytes]) -> Reply {
    let read = match parse_read(s, args, false) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let (keys, id_args) = read.streams(args);
    let view = s.state.storage.view(&s.exec, s.db);
    let mut after = Vec::with_capacity(keys.len());
    for (key, arg) in keys.iter().zip(id_args) {
        let found = match stream_at(&view, key) {
            Ok(found) => found,
            Err(e) => return e,
        };
        if arg[..] == b"$"[..] {
            after.push(found.map_or(StreamId::default(), |(_, sm)| sm.last));
            continue;
        }
        if arg[..] == b">"[..] {
            return Reply::error(
                "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
            );
        }
        match strict_id(arg) {
            Ok(id) => after.push(id),
            Err(e) => return e,
        }
    }
    let mut found = Vec::new();
    for (key, &id) in keys.iter().zip(&after) {
        match read_after(&view, key, id, read.count) {
            Ok(Some(entries)) => found.push((key.clone(), entries)),
            Ok(None) => {}
            Err(e) => return e,
        }
    }
    let resp3 = s.protocol == crate::resp::Protocol::Resp3;
    if !found.is_empty() {
        return streams_reply(found, resp3);
    }
    let Some(timeout) = read.block else { return Reply::NullArray };
    // Blocked: each key is served on its own, with the entries after its ID.
    let waits: std::collections::HashMap<Bytes, StreamId> = keys.iter().cloned().zip(after).collect();
    let db = s.db;
    let count = if read.count == 0 { 1000 } else { read.count };
    block_on(s, keys.to_vec(), timeout, Reply::NullArray, move |state, cx: &ExecContext, key| {
        let Some(&id) = waits.get(key) else { return Ok(None) };
        let view = state.storage.view(cx, db);
        Ok(read_after(&view, key, id, count)?.map(|entries| streams_reply(vec![(key.clone(), entries)], resp3)))
    })
}

/// The emulated node of the stream's first live entry.
fn head_node(view: &View, meta: &Meta, sm: &StreamMeta) -> lsm::Result<Option<u64>> {
    if sm.length == 0 {
        return Ok(None);
    }
    match view.elements_between(meta.uid, &sm.first.field(), ENTRIES_END).next() {
        Some(kv) => Ok(Some(entry_node(&kv?.1).ok_or_else(damaged)?)),
        None => Ok(None),
    }
}

/// What freeing the stream would cost redis-server 7.0 (its `lazyfreeGetFreeEffort`): one
/// allocation per radix-tree node, and per consumer group one plus the first group's pending
/// entries (Redis's own estimate for every group).
pub(crate) fn free_effort(view: &View, meta: &Meta) -> lsm::Result<u64> {
    let sm = StreamMeta::of(meta);
    let nodes = head_node(view, meta, &sm)?.map_or(0, |h| sm.tail_node.saturating_sub(h) + 1) + 1;
    let groups = if sm.groups == 0 {
        0
    } else {
        let first = Groups::new(view, meta.uid).first_group()?;
        sm.groups * (1 + first.map_or(0, |g| g.pending))
    };
    Ok(nodes + groups)
}

/// `XINFO STREAM key [FULL [COUNT count]]`, `XINFO GROUPS key`, `XINFO CONSUMERS key group`,
/// `XINFO HELP`.
pub(super) fn xinfo(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match (sub.as_str(), args.len()) {
        ("help", 2) => {
            return Reply::Array(
                [
                    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "CONSUMERS <key> <groupname>",
                    "    Show consumers of <groupname>.",
                    "GROUPS <key>",
                    "    Show the stream consumer groups.",
                    "STREAM <key> [FULL [COUNT <count>]",
                    "    Show information about the stream.",
                    "HELP",
                    "    Prints this help.",
                ]
                .iter()
                .map(|l| Reply::Simple((*l).into()))
                .collect(),
            )
        }
        ("consumers", 4) | ("groups", 3) => {}
        ("stream", n) if n >= 3 => {}
        ("help" | "consumers" | "groups" | "stream", _) => {
            return Reply::error(format!("ERR wrong number of arguments for 'xinfo|{sub}' command"))
        }
        _ => {
            return Reply::error(format!(
                "ERR unknown subcommand '{}'. Try XINFO HELP.",
                String::from_utf8_lossy(&args[1])
            ))
        }
    }
    let view = s.state.storage.view(&s.exec, s.db);
    let (meta, sm) = match stream_at(&view, &args[2]) {
        Ok(Some(found)) => found,
        Ok(None) => return Reply::error("ERR no such key"),
        Err(e) => return e,
    };
    match sub.as_str() {
        "groups" => return info_groups(&view, &meta, &sm).unwrap_or_else(engine_error),
        "consumers" => {
            return match info_consumers(&view, &meta, &args[3]) {
                Ok(Some(r)) => r,
                Ok(None) => Reply::error(format!(
                    "NOGROUP No such consumer group '{}' for key name '{}'",
                    String::from_utf8_lossy(&args[3]),
                    String::from_utf8_lossy(&args[2])
                )),
                Err(e) => engine_error(e),
            }
        }
        _ => {}
    }
    let syntax = || {
        Reply::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try XINFO HELP.",
            String::from_utf8_lossy(&args[1])
        ))
    };
    let opts = &args[3..];
    let full = !opts.is_empty();
    let mut count = 10i64;
    if full {
        if (opts.len() != 1 && opts.len() != 3) || !opts[0].eq_ignore_ascii_case(b"full") {
            return syntax();
        }
        if opts.len() == 3 {
            if !opts[1].eq_ignore_ascii_case(b"count") {
                return syntax();
            }
            match parse_i64(&opts[2]) {
                Some(n) if n < 0 => count = 10,
                Some(n) => count = n,
                None => return Reply::error(NOT_INTEGER),
            }
        }
    }
    let nodes = match head_node(&view, &meta, &sm) {
        Ok(head) => head.map_or(0, |h| sm.tail_node.saturating_sub(h) + 1),
        Err(e) => return engine_error(e),
    };
    let text = |k: &str| Reply::bulk(Bytes::from(k.to_string()));
    let mut out = vec![
        (text("length"), Reply::Integer(sm.length as i64)),
        (text("radix-tree-keys"), Reply::Integer(nodes as i64)),
        (text("radix-tree-nodes"), Reply::Integer(nodes as i64 + 1)),
        (text("last-generated-id"), Reply::Bulk(sm.last.text())),
        (text("max-deleted-entry-id"), Reply::Bulk(sm.max_deleted.text())),
        (text("entries-added"), Reply::Integer(sm.added as i64)),
        (text("recorded-first-entry-id"), Reply::Bulk(sm.first.text())),
    ];
    let all = (StreamId::default(), StreamId::MAX);
    if full {
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        match range(&view, &meta, &sm, all, count, false) {
            Ok(entries) => out.push((text("entries"), Reply::Array(entries))),
            Err(e) => return engine_error(e),
        }
        match info_full_groups(&view, &meta, &sm, count) {
            Ok(g) => out.push((text("groups"), g)),
            Err(e) => return engine_error(e),
        }
    } else {
        out.push((text("groups"), Reply::Integer(sm.groups as i64)));
        for (name, rev) in [("first-entry", false), ("last-entry", true)] {
            match range(&view, &meta, &sm, all, 1, rev) {
                Ok(mut one) => out.push((text(name), one.pop().unwrap_or(Reply::Null))),
                Err(e) => return engine_error(e),
            }
        }
    }
    Reply::Map(out)
}

/// XINFO GROUPS: each group's name, consumers, pending, last delivered ID, entries read and lag.
pub(super) fn info_groups(view: &View, meta: &Meta, sm: &StreamMeta) -> lsm::Result<Reply> {
    let groups = Groups::new(view, meta.uid).all()?;
    Ok(Reply::Array(
        groups
            .iter()
            .map(|g| {
                Reply::Map(vec![
                    (text("name"), Reply::Bulk(g.name.clone())),
                    (text("consumers"), Reply::Integer(g.consumers as i64)),
                    (text("pending"), Reply::Integer(g.pending as i64)),
                    (text("last-delivered-id"), id_reply(g.last)),
                    (text("entries-read"), reads_reply(g.entries_read)),
                    (text("lag"), lag(sm, g).map_or(Reply::Null, Reply::Integer)),
                ])
            })
            .collect(),
    ))
}

fn reads_reply(entries_read: i64) -> Reply {
    if entries_read == UNKNOWN_READS {
        Reply::Null
    } else {
        Reply::Integer(entries_read)
    }
}

/// XINFO CONSUMERS: each consumer's name, pending count and idle time; `None` if the group
/// does not exist.
pub(super) fn info_consumers(view: &View, meta: &Meta, group: &[u8]) -> lsm::Result<Option<Reply>> {
    let groups = Groups::new(view, meta.uid);
    if groups.group(group)?.is_none() {
        return Ok(None);
    }
    let now = now_ms();
    Ok(Some(Reply::Array(
        groups
            .consumers_of(group)?
            .into_iter()
            .map(|(name, c)| {
                Reply::Map(vec![
                    (text("name"), Reply::Bulk(name)),
                    (text("pending"), Reply::Integer(c.pending as i64)),
                    (text("idle"), Reply::Integer(now.saturating_sub(c.seen) as i64)),
                ])
            })
            .collect(),
    )))
}

/// XINFO STREAM FULL's groups: everything about each, pending lists cut at `count` (0: all).
pub(super) fn info_full_groups(view: &View, meta: &Meta, sm: &StreamMeta, count: usize) -> lsm::Result<Reply> {
    let groups = Groups::new(view, meta.uid);
    let limit = if count == 0 { usize::MAX } else { count };
    let mut out = Vec::new();
    for g in groups.all()? {
        let pending: Vec<Reply> = groups
            .pending(&g.name, StreamId::default(), StreamId::MAX, limit)?
            .into_iter()
            .map(|(id, n)| {
                Reply::Array(vec![
                    id_reply(id),
                    Reply::Bulk(n.consumer),
                    Reply::Integer(n.time as i64),
                    Reply::Integer(n.deliveries as i64),
                ])
            })
            .collect();
        let mut consumers = Vec::new();
        for (name, c) in groups.consumers_of(&g.name)? {
            let mut own = Vec::new();
            for id in groups.consumer_pending(&g.name, &name, StreamId::default(), limit)? {
                let Some(v) = view.element(meta.uid, &pel_field(&g.name, id))? else { continue };
                let n = Nack::decode(&v).ok_or_else(damaged)?;
                own.push(Reply::Array(vec![
                    id_reply(id),
                    Reply::Integer(n.time as i64),
                    Reply::Integer(n.deliveries as i64),
                ]));
            }
            consumers.push(Reply::Map(vec![
                (text("name"), Reply::Bulk(name)),
                (text("seen-time"), Reply::Integer(c.seen as i64)),
                (text("pel-count"), Reply::Integer(c.pending as i64)),
                (text("pending"), Reply::Array(own)),
            ]));
        }
        out.push(Reply::Map(vec![
            (text("name"), Reply::Bulk(g.name.clone())),
            (text("last-delivered-id"), id_reply(g.last)),
            (text("entries-read"), reads_reply(g.entries_read)),
            (text("lag"), lag(sm, &g).map_or(Reply::Null, Reply::Integer)),
            (text("pel-count"), Reply::Integer(g.pending as i64)),
            (text("pending"), Reply::Array(pending)),
            (text("consumers"), Reply::Array(consumers)),
        ]));
    }
    Ok(Reply::Array(out))
}

/// True if an XREAD or XREADGROUP call may block: an option before `STREAMS` says `BLOCK`.
/// Without it the call answers at once, as any read does, so it is neither announced as a
/// blocking command nor kept out of write groups. (A group or consumer named "block" counts as
/// the option: the answer errs toward blocking.)
pub(crate) fn read_may_block(args: &[Bytes]) -> bool {
    args.iter().skip(1).take_while(|a| !a.eq_ignore_ascii_case(b"streams")).any(|a| a.eq_ignore_ascii_case(b"block"))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    fn call(words: &str) -> Vec<Bytes> {
        words.split(' ').map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    #[test]
    fn only_a_block_option_makes_a_stream_read_blocking() {
        assert!(super::read_may_block(&call("XREADGROUP GROUP g c COUNT 1 BLOCK 0 STREAMS s >")));
        assert!(super::read_may_block(&call("xread block 10 streams s $")));
        assert!(!super::read_may_block(&call("XREADGROUP GROUP g c COUNT 1 NOACK STREAMS s >")));
        assert!(!super::read_may_block(&call("XREAD COUNT 2 STREAMS block 0")), "a key named block");
    }

    /// A grouped XREADGROUP locks its streams, not its option words.
    #[test]
    fn an_xreadgroup_queues_the_keys_after_streams() {
        let keys = crate::commands::queued_keys(3, &[call("XREADGROUP GROUP g c COUNT 1 STREAMS s1 s2 > >")]);
        assert_eq!(keys, vec![(3, Bytes::from_static(b"s1")), (3, Bytes::from_static(b"s2"))]);
    }
}
