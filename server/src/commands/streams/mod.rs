//! Streams: XADD, XLEN, XRANGE, XREVRANGE, XDEL, XTRIM, XSETID, XREAD (with BLOCK) and XINFO;
//! consumer groups are in [`groups`].
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

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

mod groups;

pub(super) use groups::COMMANDS as GROUP_COMMANDS;

use super::blocking_pops::block_on;
use super::collections::{fetch, SYNTAX};
use super::{engine_error, parse_i64, spec, CommandSpec, Session, ONE_KEY};
use crate::resp::Reply;
use crate::services::notifications::STREAM;
use crate::storage::{ExecContext, KeyType, Meta, View};

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

pub(super) const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";
pub(super) const NOT_INTEGER: &str = "ERR value is not an integer or out of range";

/// A stream entry ID: milliseconds and a sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub(super) const MAX: StreamId = StreamId { ms: u64::MAX, seq: u64::MAX };

    /// The next ID, if there is one.
    pub fn incr(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (ms, u64::MAX) => Some(StreamId { ms: ms.checked_add(1)?, seq: 0 }),
            (ms, seq) => Some(StreamId { ms, seq: seq + 1 }),
        }
    }

    /// The previous ID, if there is one.
    pub fn decr(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (ms, 0) => Some(StreamId { ms: ms.checked_sub(1)?, seq: u64::MAX }),
            (ms, seq) => Some(StreamId { ms, seq: seq - 1 }),
        }
    }

    /// The element field of the entry with this ID.
    pub(super) fn field(self) -> [u8; 17] {
        let mut f = [0u8; 17];
        f[0] = b'e';
        f[1..9].copy_from_slice(&self.ms.to_be_bytes());
        f[9..].copy_from_slice(&self.seq.to_be_bytes());
        f
    }

    /// The ID of an entry's element field.
    pub(super) fn of_field(field: &[u8]) -> Option<StreamId> {
        if field.len() != 17 || field[0] != b'e' {
            return None;
        }
        Some(StreamId {
            ms: u64::from_be_bytes(field[1..9].try_into().ok()?),
            seq: u64::from_be_bytes(field[9..].try_into().ok()?),
        })
    }

    /// `ms-seq`.
    pub fn text(self) -> Bytes {
        Bytes::from(format!("{}-{}", self.ms, self.seq))
    }

    /// The ID an automatic XADD gives after `last` at time `now` (Redis's `streamNextID`).
    fn next_after(last: StreamId, now: u64) -> Option<StreamId> {
        if now > last.ms {
            Some(StreamId { ms: now, seq: 0 })
        } else {
            last.incr()
        }
    }
}

/// Everything after the `'e'` entries: the end of the entry range.
pub(super) const ENTRIES_END: &[u8] = b"f";

/// How an ID argument is read (Redis's `streamGenericParseIDOrReply`).
pub(super) struct IdSyntax {
    /// The sequence when only milliseconds are given.
    pub missing_seq: u64,
    /// `-` and `+` are refused.
    pub strict: bool,
    /// `ms-*` is accepted (XADD): the sequence is then not given.
    pub seq_star: bool,
}

/// Parses an ID; the flag says whether the sequence was given (false only for `ms-*`).
pub(super) fn parse_id(arg: &[u8], how: IdSyntax) -> Result<(StreamId, bool), Reply> {
    let invalid = || Reply::error(INVALID_ID);
    if arg.len() > 127 {
        return Err(invalid());
    }
    match arg {
        b"-" | b"+" if how.strict => return Err(invalid()),
        b"-" => return Ok((StreamId::default(), true)),
        b"+" => return Ok((StreamId::MAX, true)),
        _ => {}
    }
    let number = |s: &[u8]| -> Option<u64> {
        if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(s).ok()?.parse().ok()
    };
    let (ms, seq) = match arg.iter().position(|&c| c == b'-') {
        None => (number(arg).ok_or_else(invalid)?, None),
        Some(at) => (number(&arg[..at]).ok_or_else(invalid)?, Some(&arg[at + 1..])),
    };
    match seq {
        None => Ok((StreamId { ms, seq: how.missing_seq }, true)),
        Some(b"*") if how.seq_star => Ok((StreamId { ms, seq: 0 }, false)),
        Some(s) => Ok((StreamId { ms, seq: number(s).ok_or_else(invalid)? }, true)),
    }
}

pub(super) fn strict_id(arg: &[u8]) -> Result<StreamId, Reply> {
    parse_id(arg, IdSyntax { missing_seq: 0, strict: true, seq_star: false }).map(|(id, _)| id)
}

/// A stream's own fields, kept in its metadata body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamMeta {
    /// Live entries.
    pub length: u64,
    /// The largest ID ever given (or set by XSETID).
    pub last: StreamId,
    /// The largest ID deleted by XDEL (or set by XSETID).
    pub max_deleted: StreamId,
    /// Entries ever added.
    pub added: u64,
    /// The first live entry (0-0 when empty).
    pub first: StreamId,
    /// Consumer groups.
    pub groups: u64,
    /// The emulated listpack node new entries go to, how many entries it got and their bytes.
    tail_node: u64,
    tail_entries: u64,
    tail_bytes: u64,
}

impl StreamMeta {
    const WORDS: usize = 13;

    /// The stream fields of `meta`'s body.
    pub fn of(meta: &Meta) -> StreamMeta {
        let w = |i: usize| {
            meta.body.get(i * 8..i * 8 + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
        };
        StreamMeta {
            length: w(0),
            last: StreamId { ms: w(2), seq: w(3) },
            max_deleted: StreamId { ms: w(4), seq: w(5) },
            added: w(6),
            first: StreamId { ms: w(7), seq: w(8) },
            tail_node: w(9),
            tail_entries: w(10),
            tail_bytes: w(11),
            groups: w(12),
        }
    }

    fn body(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(Self::WORDS * 8);
        for w in [
            self.length,
            0,
            self.last.ms,
            self.last.seq,
            self.max_deleted.ms,
            self.max_deleted.seq,
            self.added,
            self.first.ms,
            self.first.seq,
            self.tail_node,
            self.tail_entries,
            self.tail_bytes,
            self.groups,
        ] {
            b.put_u64_le(w);
        }
        b.freeze()
    }
}

/// Encodes an entry's value: its node and its field/value strings.
fn encode_entry(node: u64, items: &[Bytes]) -> Vec<u8> {
    let mut v = Vec::with_capacity(12 + items.iter().map(|i| i.len() + 4).sum::<usize>());
    v.extend_from_slice(&node.to_le_bytes());
    v.extend_from_slice(&(items.len() as u32).to_le_bytes());
    for i in items {
        v.extend_from_slice(&(i.len() as u32).to_le_bytes());
        v.extend_from_slice(i);
    }
    v
}

/// The node of an entry's value.
fn entry_node(value: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(value.get(..8)?.try_into().ok()?))
}

/// The field/value strings of an entry's value.
fn entry_items(value: &Bytes) -> Option<Vec<Bytes>> {
    let n = u32::from_le_bytes(value.get(8..12)?.try_into().ok()?) as usize;
    let mut at = 12;
    let mut out = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let len = u32::from_le_bytes(value.get(at..at + 4)?.try_into().ok()?) as usize;
        at += 4;
        if value.len() < at + len {
            return None;
        }
        out.push(value.slice(at..at + len));
        at += len;
    }
    (at == value.len()).then_some(out)
}

pub(super) fn damaged() -> lsm::Error {
    lsm::Error::InvalidArgument("damaged stream entry".into())
}

/// One entry as the range commands reply it: `[id, [field, value, …]]`.
pub(super) fn entry_reply(id: StreamId, value: &Bytes) -> lsm::Result<Reply> {
    let items = entry_items(value).ok_or_else(damaged)?;
    Ok(Reply::Array(vec![Reply::Bulk(id.text()), Reply::Array(items.into_iter().map(Reply::Bulk).collect())]))
}

/// The stream at `key`, with its fields.
pub(super) fn stream_at(view: &View, key: &[u8]) -> Result<Option<(Meta, StreamMeta)>, Reply> {
    Ok(fetch(view, key, KeyType::Stream)?.map(|m| {
        let sm = StreamMeta::of(&m);
        (m, sm)
    }))
}

/// Live entries with IDs in `[start, end]`, at most `count` (0: all), in ID order or reversed.
pub(super) fn range(
    view: &View,
    meta: &Meta,
    sm: &StreamMeta,
    (start, end): (StreamId, StreamId),
    count: usize,
    rev: bool,
) -> lsm::Result<Vec<Reply>> {
    let start = start.max(sm.first);
    if sm.length == 0 || start > end {
        return Ok(Vec::new());
    }
    let to = end.incr().map_or_else(|| ENTRIES_END.to_vec(), |e| e.field().to_vec());
    let mut it = view.elements_between(meta.uid, &start.field(), &to);
    let mut out = Vec::new();
    while count == 0 || out.len() < count {
        let next = if rev { it.next_back() } else { it.next() };
        let Some(kv) = next else { break };
        let (field, value) = kv?;
        let id = StreamId::of_field(&field).ok_or_else(damaged)?;
        out.push(entry_reply(id, &value)?);
    }
    Ok(out)
}

/// The first live entry at or after `from` (for a new first ID).
fn first_from(view: &View, uid: u64, from: Option<StreamId>) -> lsm::Result<Option<StreamId>> {
    let Some(from) = from else { return Ok(None) };
    match view.elements_between(uid, &from.field(), ENTRIES_END).next() {
        Some(kv) => Ok(Some(StreamId::of_field(&kv?.0).ok_or_else(damaged)?)),
        None => Ok(None),
    }
}

/// How XADD or XTRIM trims.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Strategy {
    None,
    MaxLen(u64),
    MinId(StreamId),
}

#[derive(Debug, Clone, Copy)]
struct Trim {
    strategy: Strategy,
    approx: bool,
    /// Most entries removed (0: no limit).
    limit: u64,
}

/// XADD's and XTRIM's options (Redis's `streamParseAddOrTrimArgsOrReply`). For XADD also the
/// index of the ID argument, NOMKSTREAM, and the ID given (with whether its sequence was).
struct AddArgs {
    trim: Trim,
    nomkstream: bool,
    id: Option<(StreamId, bool)>,
    id_at: usize,
}

fn parse_add_or_trim(s: &Session, args: &[Bytes], xadd: bool) -> Result<AddArgs, Reply> {
    let mut out = AddArgs {
        trim: Trim { strategy: Strategy::None, approx: false, limit: 0 },
        nomkstream: false,
        id: None,
        id_at: args.len(),
    };
    let mut limit = None;
    let mut i = 2;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = args[i].to_ascii_lowercase();
        if xadd && args[i][..] == b"*"[..] {
            out.id_at = i;
            break;
        }
        match opt.as_slice() {
            b"maxlen" | b"minid" if more > 0 => {
                if out.trim.strategy != Strategy::None {
                    return Err(Reply::error(
                        "ERR syntax error, MAXLEN and MINID options at the same time are not compatible",
                    ));
                }
                out.trim.approx = false;
                if more >= 2 && (args[i + 1][..] == b"~"[..] || args[i + 1][..] == b"="[..]) {
                    out.trim.approx = args[i + 1][..] == b"~"[..];
                    i += 1;
                }
                let arg = &args[i + 1];
                out.trim.strategy = if opt == b"maxlen" {
                    let n = parse_i64(arg).ok_or_else(|| Reply::error(NOT_INTEGER))?;
                    if n < 0 {
                        return Err(Reply::error("ERR The MAXLEN argument must be >= 0."));
                    }
                    Strategy::MaxLen(n as u64)
                } else {
                    Strategy::MinId(strict_id(arg)?)
                };
                i += 2;
            }
            b"limit" if more > 0 => {
                let n = parse_i64(&args[i + 1]).ok_or_else(|| Reply::error(NOT_INTEGER))?;
                if n < 0 {
                    return Err(Reply::error("ERR The LIMIT argument must be >= 0."));
                }
                limit = Some(n as u64);
                i += 2;
            }
            b"nomkstream" if xadd => {
                out.nomkstream = true;
                i += 1;
            }
            _ if xadd => {
                out.id = Some(parse_id(&args[i], IdSyntax { missing_seq: 0, strict: true, seq_star: true })?);
                out.id_at = i;
                break;
            }
            _ => return Err(Reply::error(SYNTAX)),
        }
    }
    if limit.is_some_and(|l| l > 0) && out.trim.strategy == Strategy::None {
        return Err(Reply::error("ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"));
    }
    if !xadd && out.trim.strategy == Strategy::None {
        return Err(Reply::error("ERR syntax error, XTRIM must be called with a trimming strategy"));
    }
    match limit {
        Some(_) if !out.trim.approx => {
            return Err(Reply::error("ERR syntax error, LIMIT cannot be used without the special ~ option"));
        }
        Some(l) => out.trim.limit = l,
        None if out.trim.approx => {
            let per_node = node_max_entries(s);
            out.trim.limit = (100 * per_node).clamp(1, 1_000_000);
            if per_node == 0 {
                out.trim.limit = 10_000;
            }
        }
        None => {}
    }
    Ok(out)
}

fn config_u64(s: &Session, name: &str, default: u64) -> u64 {
    s.state.config().get(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn node_max_entries(s: &Session) -> u64 {
    config_u64(s, "stream-node-max-entries", 100)
}

/// Trims the stream as `trim` says: one range tombstone for the entries removed from the head.
/// Returns how many were removed.
/// `pending` is an entry added to `b` already (XADD's), after every stored one.
fn trim(
    view: &View,
    b: &mut lsm::WriteBatch,
    (meta, sm): (&Meta, &mut StreamMeta),
    trim: Trim,
    pending: Option<(StreamId, u64)>,
) -> lsm::Result<u64> {
    if trim.strategy == Strategy::None || sm.length == 0 {
        return Ok(0);
    }
    let mut deleted = 0u64;
    // Entries before `cut` go; `kept` is the first one that stays.
    let mut cut: Option<StreamId> = None;
    let mut kept: Option<StreamId> = None;
    let pending =
        pending.map(|(id, node)| Ok((Bytes::copy_from_slice(&id.field()), Bytes::from(encode_entry(node, &[])))));
    let mut entries = view.elements_between(meta.uid, &sm.first.field(), ENTRIES_END).chain(pending).peekable();
    let mut node: Vec<StreamId> = Vec::new();
    'nodes: loop {
        // The next node: the live entries that share the head entry's node number.
        node.clear();
        let mut number = None;
        while let Some(kv) = entries.peek() {
            let (field, value) = match kv {
                Ok(kv) => kv,
                Err(_) => return Err(entries.next().and_then(|r| r.err()).unwrap_or_else(damaged)),
            };
            let this = entry_node(value).ok_or_else(damaged)?;
            if number.is_some_and(|n| n != this) {
                break;
            }
            number = Some(this);
            node.push(StreamId::of_field(field).ok_or_else(damaged)?);
            entries.next();
        }
        let Some(&node_last) = node.last() else { break };
        let n = node.len() as u64;
        let left = sm.length - deleted;
        if matches!(trim.strategy, Strategy::MaxLen(max) if left <= max) || (trim.limit > 0 && deleted + n > trim.limit)
        {
            kept = Some(node[0]);
            break;
        }
        let whole = match trim.strategy {
            Strategy::MaxLen(max) => left - n >= max,
            Strategy::MinId(min) => node_last < min,
            Strategy::None => false,
        };
        if whole {
            deleted += n;
            cut = node_last.incr();
            continue;
        }
        if trim.approx {
            kept = Some(node[0]);
            break;
        }
        for &id in &node {
            let stop = match trim.strategy {
                Strategy::MaxLen(max) => sm.length - deleted <= max,
                Strategy::MinId(min) => id >= min,
                Strategy::None => true,
            };
            if stop {
                kept = Some(id);
                break 'nodes;
            }
            deleted += 1;
            cut = id.incr();
        }
        // The whole node went: the next one starts with the first entry kept.
        kept = match entries.next() {
            Some(kv) => StreamId::of_field(&kv?.0),
            None => None,
        };
        break;
    }
    let Some(cut) = cut.filter(|_| deleted > 0) else { return Ok(0) };
    view.delete_elements(b, meta.uid, &sm.first.field(), &cut.field());
    sm.length -= deleted;
    sm.first = if sm.length == 0 { StreamId::default() } else { kept.unwrap_or_default() };
    Ok(deleted)
}

/// Writes the stream's metadata with `sm` (an empty stream still exists).
pub(super) fn put(view: &View, b: &mut lsm::WriteBatch, key: &[u8], meta: &Meta, sm: &StreamMeta) {
    view.put_meta(b, key, &Meta { body: sm.body(), ..meta.clone() });
}

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
    let (max_entries, max_bytes) = (node_max_entries(s), config_u64(s, "stream-node-max-bytes", 4096));
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

/// Entries of `key` after `after` (at most `count`, 0: all), or `None` if there are none (or
/// the key holds no stream).
fn read_after(view: &View, key: &[u8], after: StreamId, count: usize) -> Result<Option<Reply>, Reply> {
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
fn xread(s: &mut Session, args: &[Bytes]) -> Reply {
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
        groups: groups::rdb_groups(view, meta.uid)?,
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
    groups::write_rdb_groups(view, b, (meta.uid, &sm), &v.groups);
    put(view, b, key, &meta, &sm);
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

/// `XINFO STREAM key [FULL [COUNT count]]`, `XINFO GROUPS key`, `XINFO CONSUMERS key group`,
/// `XINFO HELP`.
fn xinfo(s: &mut Session, args: &[Bytes]) -> Reply {
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
        "groups" => return groups::info_groups(&view, &meta, &sm).unwrap_or_else(engine_error),
        "consumers" => {
            return match groups::info_consumers(&view, &meta, &args[3]) {
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
        match groups::info_full_groups(&view, &meta, &sm, count) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_like_redis() {
        let loose = || IdSyntax { missing_seq: 0, strict: false, seq_star: false };
        assert_eq!(parse_id(b"5-3", loose()).unwrap(), (StreamId { ms: 5, seq: 3 }, true));
        assert_eq!(parse_id(b"5", IdSyntax { missing_seq: u64::MAX, ..loose() }).unwrap().0.seq, u64::MAX);
        assert_eq!(parse_id(b"-", loose()).unwrap().0, StreamId::default());
        assert_eq!(parse_id(b"+", loose()).unwrap().0, StreamId::MAX);
        assert!(parse_id(b"+", IdSyntax { strict: true, ..loose() }).is_err());
        assert!(parse_id(b"5-*", loose()).is_err());
        assert_eq!(
            parse_id(b"5-*", IdSyntax { seq_star: true, ..loose() }).unwrap(),
            (StreamId { ms: 5, seq: 0 }, false)
        );
        for bad in [&b""[..], b"x", b"1-", b"-1", b"1-2-3", b"1--2", b"18446744073709551616"] {
            assert!(parse_id(bad, loose()).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn ids_order_as_their_fields_and_step() {
        let ids =
            [StreamId { ms: 0, seq: 1 }, StreamId { ms: 1, seq: 0 }, StreamId { ms: 1, seq: u64::MAX }, StreamId::MAX];
        assert!(ids.windows(2).all(|w| w[0] < w[1] && w[0].field() < w[1].field()));
        assert_eq!(StreamId { ms: 1, seq: u64::MAX }.incr(), Some(StreamId { ms: 2, seq: 0 }));
        assert_eq!(StreamId::MAX.incr(), None);
        assert_eq!(StreamId::default().decr(), None);
        assert_eq!(StreamId::of_field(&ids[2].field()), Some(ids[2]));
        assert_eq!(StreamId::next_after(StreamId { ms: 9, seq: 4 }, 5), Some(StreamId { ms: 9, seq: 5 }));
        assert_eq!(StreamId::next_after(StreamId { ms: 9, seq: 4 }, 10), Some(StreamId { ms: 10, seq: 0 }));
    }

    #[test]
    fn entries_and_metadata_round_trip() {
        let items = vec![Bytes::from_static(b"f"), Bytes::from_static(b""), Bytes::from_static(b"v2")];
        let v = Bytes::from(encode_entry(7, &items));
        assert_eq!((entry_node(&v), entry_items(&v)), (Some(7), Some(items)));
        assert_eq!(entry_items(&v.slice(..v.len() - 1)), None, "truncated");
        let sm = StreamMeta {
            length: 3,
            last: StreamId { ms: 9, seq: 2 },
            max_deleted: StreamId { ms: 4, seq: 0 },
            added: 5,
            first: StreamId { ms: 1, seq: 1 },
            tail_node: 2,
            tail_entries: 1,
            tail_bytes: 30,
            groups: 2,
        };
        let meta = Meta { kind: KeyType::Stream, expire_at_ms: 0, uid: 1, body: sm.body() };
        assert_eq!(StreamMeta::of(&meta), sm);
    }
}
