//! XADD's and XTRIM's trimming options, and the trim itself: the entries before the first one
//! kept go in one range tombstone, whole nodes at a time for `~` (see the module docs of
//! [`super`]).

use bytes::Bytes;

use super::model::*;
use super::Session;
use crate::commands::collections::SYNTAX;
use crate::commands::parse_i64;
use crate::resp::Reply;
use crate::storage::{Meta, View};

/// How XADD or XTRIM trims.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Strategy {
    None,
    MaxLen(u64),
    MinId(StreamId),
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Trim {
    pub(super) strategy: Strategy,
    pub(super) approx: bool,
    /// Most entries removed (0: no limit).
    pub(super) limit: u64,
}

/// XADD's and XTRIM's options (Redis's `streamParseAddOrTrimArgsOrReply`). For XADD also the
/// index of the ID argument, NOMKSTREAM, and the ID given (with whether its sequence was).
pub(super) struct AddArgs {
    pub(super) trim: Trim,
    pub(super) nomkstream: bool,
    pub(super) id: Option<(StreamId, bool)>,
    pub(super) id_at: usize,
}

pub(super) fn parse_add_or_trim(s: &Session, args: &[Bytes], xadd: bool) -> Result<AddArgs, Reply> {
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

fn node_max_entries(s: &Session) -> u64 {
    s.state.config().stream_node_max_entries
}

/// Trims the stream as `trim` says: one range tombstone for the entries removed from the head.
/// Returns how many were removed.
/// `pending` is an entry added to `b` already (XADD's), after every stored one.
pub(super) fn trim(
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
