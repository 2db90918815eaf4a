//! Helpers shared by the collection families: typed lookups, header bookkeeping (a collection
//! that becomes empty disappears), the SCAN-style cursor walk of a collection's elements, and
//! random picks.

use std::ops::Bound;

use bytes::Bytes;

use super::{engine_error, parse_i64, Session};
use crate::glob;
use crate::resp::Reply;
use crate::services::notifications;
use crate::storage::{next_ordinal, Header, KeyType, Meta, View};

pub(super) const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub(super) const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub(super) const SYNTAX: &str = "ERR syntax error";

/// The live collection of `kind` at `key`: `Ok(None)` if absent, `Err(WRONGTYPE)` if another type.
pub(super) fn fetch(view: &View, key: &[u8], kind: KeyType) -> Result<Option<Meta>, Reply> {
    match view.get(key) {
        Ok(Some(m)) if m.kind != kind => Err(Reply::error(WRONGTYPE)),
        Ok(m) => Ok(m),
        Err(e) => Err(engine_error(e)),
    }
}

/// The collection at `key`, or a new empty incarnation (its owner record goes into `batch`).
pub(super) fn fetch_or_create(
    view: &View,
    batch: &mut lsm::WriteBatch,
    key: &[u8],
    kind: KeyType,
) -> Result<Meta, Reply> {
    Ok(match fetch(view, key, kind)? {
        Some(m) => m,
        None => view.create(batch, key, kind),
    })
}

/// Adds the metadata of `meta` (`key`'s stored metadata, or a new incarnation's) with `header`
/// to `batch`, or its deletion when the collection is
/// now empty (an empty collection does not exist). A set, hash or sorted set whose removals
/// outnumber twice its members is rewritten under a fresh incarnation in the same batch.
pub(super) fn store(view: &View, batch: &mut lsm::WriteBatch, key: &[u8], meta: &Meta, header: Header) {
    if header.count == 0 {
        view.delete_meta(batch, key);
        return;
    }
    let updated = Meta { body: header.body_for(meta), ..meta.clone() };
    if header.needs_rebuild() {
        match view.rebuild_into(batch, key, &updated) {
            Ok(fresh) => return view.rewrite_meta(batch, key, &fresh, meta.expire_at_ms),
            // A memory-only attempt, voided: the command runs again where it may rewrite.
            Err(lsm::Error::WouldBlock) => {}
            // The rewrite only saves later reads work; the batch is right without it.
            Err(e) => tracing::warn!(target: "shale::storage", error = %e, "could not rewrite a collection"),
        }
    }
    view.rewrite_meta(batch, key, &updated, meta.expire_at_ms);
}

/// Commits `batch` and answers `ok`, recording keyspace event `event` (of `class`) for `key`
/// once it is written — then `del` if the change `emptied` the collection (it no longer
/// exists). Nothing to write, no event.
pub(super) fn commit_event(
    s: &Session,
    batch: lsm::WriteBatch,
    ok: Reply,
    (class, event): (u32, &'static str),
    key: &[u8],
    emptied: bool,
) -> Reply {
    if batch.is_empty() {
        return ok;
    }
    if let Err(e) = s.state.storage.write(&s.exec, batch) {
        return engine_error(e);
    }
    s.notify(class, event, key);
    if emptied {
        s.notify(notifications::GENERIC, "del", key);
    }
    ok
}

/// Options of HSCAN / SSCAN / ZSCAN.
pub(super) struct ScanArgs {
    pub cursor: u64,
    pub pattern: Option<Bytes>,
    pub count: usize,
    pub novalues: bool,
}

/// Parses `cursor [MATCH p] [COUNT n] [NOVALUES]` (NOVALUES only when `allow_novalues`).
pub(super) fn scan_args(args: &[Bytes], allow_novalues: bool) -> Result<ScanArgs, Reply> {
    let cursor = std::str::from_utf8(&args[0])
        .ok()
        .and_then(|c| c.parse::<u64>().ok())
        .ok_or_else(|| Reply::error("ERR invalid cursor"))?;
    let mut out = ScanArgs { cursor, pattern: None, count: 10, novalues: false };
    let mut i = 1;
    while i < args.len() {
        let opt = String::from_utf8_lossy(&args[i]).to_ascii_lowercase();
        if opt == "novalues" && allow_novalues {
            out.novalues = true;
            i += 1;
            continue;
        }
        let Some(value) = args.get(i + 1) else { return Err(Reply::error(SYNTAX)) };
        match opt.as_str() {
            "match" => out.pattern = Some(value.clone()),
            "count" => match parse_i64(value) {
                Some(n) if n >= 1 => out.count = n.min(1 << 20) as usize,
                Some(_) => return Err(Reply::error(SYNTAX)),
                None => return Err(Reply::error(NOT_INTEGER)),
            },
            _ => return Err(Reply::error(SYNTAX)),
        }
        i += 2;
    }
    Ok(out)
}

/// Collections this small answer a whole SCAN in one call with cursor 0, as Redis does for its
/// compact encodings (so clients see the same pages).
pub(super) const SMALL_SCAN: u64 = 128;

/// One page of a SCAN-style walk over a collection's elements (in pick order: see
/// `storage/picks/mod.rs`): `(next cursor, elements)`, a cursor naming the field to go on from.
pub(super) fn scan_elements(
    s: &Session,
    view: &View,
    meta: &Meta,
    args: &ScanArgs,
) -> Result<(u64, Vec<(Bytes, Bytes)>), Reply> {
    let position = s.state.cursors.position(args.cursor).ok_or_else(|| Reply::error("ERR invalid cursor"))?;
    // A compact hash is listed whole in its order, as Redis scans a listpack in one call.
    let compact = next_ordinal(meta).is_some() && args.cursor == 0;
    let all = (compact || Header::of(meta).count <= SMALL_SCAN) && args.cursor == 0;
    let limit = if all { usize::MAX } else { args.count };
    let from = if position.is_empty() { Bound::Unbounded } else { Bound::Included(&position[..]) };
    let mut out = Vec::new();
    let mut next = 0;
    for (seen, kv) in view.entries(meta, from).enumerate() {
        let (field, value) = kv.map_err(engine_error)?;
        if seen == limit {
            next = s.state.cursors.save(field);
            break;
        }
        if args.pattern.as_ref().is_none_or(|p| glob::matches(p, &field, false)) {
            out.push((field, value));
        }
    }
    if compact {
        out = view.in_field_order(meta, out, |(f, _)| f).map_err(engine_error)?;
    }
    Ok((next, out))
}

/// The `[cursor, [items…]]` reply of a SCAN-style command.
pub(super) fn scan_reply(next: u64, items: Vec<Reply>) -> Reply {
    Reply::Array(vec![Reply::bulk(Bytes::from(next.to_string())), Reply::Array(items)])
}

/// `key [count [WITH…]]` of HRANDFIELD / ZRANDMEMBER: `(count, with)`, checked as Redis does.
pub(super) fn random_args(args: &[Bytes], with_word: &[u8]) -> Result<(Option<i64>, bool), Reply> {
    match args.len() {
        2 => Ok((None, false)),
        3 | 4 => {
            let n = parse_i64(&args[2]).ok_or_else(|| Reply::error(NOT_INTEGER))?;
            if args.len() == 4 && !args[3].eq_ignore_ascii_case(with_word) {
                return Err(Reply::error(SYNTAX));
            }
            if n < -(i64::MAX / 2) {
                return Err(Reply::error("ERR value is out of range"));
            }
            Ok((Some(n), args.len() == 4))
        }
        _ => Err(Reply::error(SYNTAX)),
    }
}

/// The reply of HRANDFIELD / ZRANDMEMBER on the collection `meta` (None: no such key): one
/// member (or nil) without a count, distinct members for a positive count, repeats allowed for
/// a negative one, each followed by its value rendered by `value` when `with` is set.
pub(super) fn random_reply(
    view: &View,
    key: &[u8],
    meta: Option<&Meta>,
    count: Option<i64>,
    with: bool,
    value: impl Fn(Bytes) -> Reply,
) -> Reply {
    let Some(meta) = meta else {
        return if count.is_some() { Reply::Array(Vec::new()) } else { Reply::Null };
    };
    let picks = match count {
        None => {
            return view
                .random_member(key, meta, false)
                .map_or_else(engine_error, |m| m.map_or(Reply::Null, Reply::Bulk))
        }
        Some(n) if n >= 0 => view.random_distinct(key, meta, n as usize, false),
        Some(n) => view.random_with_repeats(key, meta, n.unsigned_abs() as usize, false),
    };
    let picks = match picks {
        Ok(p) => p,
        Err(e) => return engine_error(e),
    };
    // Distinct fields of a compact hash come in its order, as Redis samples a listpack.
    let picks = match count {
        Some(n) if n >= 0 && picks.len() > 1 => match view.in_field_order(meta, picks, |m| m) {
            Ok(p) => p,
            Err(e) => return engine_error(e),
        },
        _ => picks,
    };
    if !with {
        return Reply::Array(picks.into_iter().map(Reply::Bulk).collect());
    }
    let mut pairs = Vec::with_capacity(picks.len());
    for m in picks {
        match view.entry(meta, &m) {
            Ok(Some(v)) => pairs.push((Reply::Bulk(m), value(v))),
            Ok(None) => return Reply::error("ERR internal error: a picked member has no record"),
            Err(e) => return engine_error(e),
        }
    }
    Reply::Pairs(pairs)
}

/// HSCAN / SSCAN / ZSCAN: parses the options, walks the collection of `kind` at `args[1]`, and
/// renders each (field, value) into the reply's items with `render`.
pub(super) fn scan_command(
    s: &Session,
    args: &[Bytes],
    kind: KeyType,
    allow_novalues: bool,
    render: impl Fn(Bytes, Bytes, bool, &mut Vec<Reply>),
) -> Reply {
    let opts = match scan_args(&args[2..], allow_novalues) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match fetch(&view, &args[1], kind) {
        Ok(Some(m)) => m,
        Ok(None) => return scan_reply(0, Vec::new()),
        Err(e) => return e,
    };
    match scan_elements(s, &view, &meta, &opts) {
        Ok((next, items)) => {
            let mut out = Vec::new();
            for (field, value) in items {
                render(field, value, opts.novalues, &mut out);
            }
            scan_reply(next, out)
        }
        Err(e) => e,
    }
}

/// The optional count of LPOP / RPOP / SPOP / ZPOPMIN / ZPOPMAX (`key [count]`).
pub(super) fn pop_count(args: &[Bytes]) -> Result<Option<usize>, Reply> {
    match args.len() {
        2 => Ok(None),
        3 => match parse_i64(&args[2]) {
            Some(n) if n >= 0 => Ok(Some(n as usize)),
            _ => Err(Reply::error("ERR value is out of range, must be positive")),
        },
        _ => Err(Reply::error(SYNTAX)),
    }
}

/// `numkeys key … WORD1|WORD2 [COUNT n]` of LMPOP/BLMPOP (LEFT|RIGHT) and ZMPOP/BZMPOP (MIN|MAX):
/// the keys, whether the first word was given, and the count.
pub(super) fn mpop_args<'a>(args: &'a [Bytes], words: [&str; 2]) -> Result<(&'a [Bytes], bool, usize), Reply> {
    let n = parse_i64(&args[0]).unwrap_or(0);
    if n <= 0 {
        return Err(Reply::error("ERR numkeys should be greater than 0"));
    }
    let n = n as usize;
    if args.len() < n + 2 {
        return Err(Reply::error(SYNTAX));
    }
    let word = String::from_utf8_lossy(&args[n + 1]).to_ascii_lowercase();
    let first = match word.as_str() {
        w if w == words[0] => true,
        w if w == words[1] => false,
        _ => return Err(Reply::error(SYNTAX)),
    };
    let count = match &args[n + 2..] {
        [] => 1,
        [opt, value] if opt.eq_ignore_ascii_case(b"count") => match parse_i64(value) {
            Some(c) if c > 0 => c as usize,
            _ => return Err(Reply::error("ERR count should be greater than 0")),
        },
        _ => return Err(Reply::error(SYNTAX)),
    };
    Ok((&args[1..=n], first, count))
}
