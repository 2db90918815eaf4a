//! The stream model: entry IDs and their grammar, the stream's metadata fields, the entry
//! record codec, and the lookups every stream command shares (see the parent module for the
//! layout).

use bytes::{BufMut, Bytes, BytesMut};

use crate::commands::collections::fetch;
use crate::resp::Reply;
use crate::storage::{KeyType, Meta, View};

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
        let mut out = Vec::with_capacity(41);
        crate::num::push_u64(&mut out, self.ms);
        out.push(b'-');
        crate::num::push_u64(&mut out, self.seq);
        Bytes::from(out)
    }

    /// The ID an automatic XADD gives after `last` at time `now` (Redis's `streamNextID`).
    pub(super) fn next_after(last: StreamId, now: u64) -> Option<StreamId> {
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
    pub(super) tail_node: u64,
    pub(super) tail_entries: u64,
    pub(super) tail_bytes: u64,
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
pub(super) fn encode_entry(node: u64, items: &[Bytes]) -> Vec<u8> {
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
pub(super) fn entry_node(value: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(value.get(..8)?.try_into().ok()?))
}

/// The field/value strings of an entry's value.
pub(super) fn entry_items(value: &Bytes) -> Option<Vec<Bytes>> {
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
    let mut fields = Vec::with_capacity(items.len());
    fields.extend(items.into_iter().map(Reply::Bulk));
    Ok(Reply::Array(vec![Reply::Bulk(id.text()), Reply::Array(fields)]))
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
    let mut out = Vec::with_capacity(if count == 0 { 16 } else { count.min(1024) });
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
pub(super) fn first_from(view: &View, uid: u64, from: Option<StreamId>) -> lsm::Result<Option<StreamId>> {
    let Some(from) = from else { return Ok(None) };
    match view.elements_between(uid, &from.field(), ENTRIES_END).next() {
        Some(kv) => Ok(Some(StreamId::of_field(&kv?.0).ok_or_else(damaged)?)),
        None => Ok(None),
    }
}

/// Writes the stream's metadata with `sm` (an empty stream still exists).
pub(super) fn put(view: &View, b: &mut lsm::WriteBatch, key: &[u8], meta: &Meta, sm: &StreamMeta) {
    view.put_meta(b, key, &Meta { body: sm.body(), ..meta.clone() });
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
