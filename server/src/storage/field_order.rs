//! The insertion order of a small hash's fields, as Redis's listpack encoding keeps it.
//!
//! Redis stores a hash as a listpack while it has at most `hash-max-listpack-entries` fields
//! and no field or value longer than `hash-max-listpack-value` bytes; HGETALL, HKEYS, HVALS,
//! HSCAN and DUMP then list its fields in the order they were added (an update keeps a field's
//! place, a deleted and re-added field goes last). The first write that passes a limit
//! converts the hash to a hash table for good, whose order is unspecified.
//!
//! A hash's fields are its pick records (`picks/mod.rs`), in the order of their seeded hashes. A
//! *compact* hash (one Redis would keep as a listpack) numbers its fields as they are added:
//! the number, its *ordinal*, is kept in the field's record before its value, and the next one
//! to hand out is a third word in the hash's metadata body:
//!
//! ```text
//! hash metadata body   count u64 LE | removed u64 LE | [next ordinal u64 LE]
//! field record value   0 | value                      (a hash table's field)
//!                      1 | ordinal u64 BE | value     (a compact hash's field)
//! ```
//!
//! The word is there exactly while the hash is compact (OBJECT ENCODING `listpack`), so a body
//! without it is a hash table, whose fields' ordinals (those written while it was compact)
//! mean nothing; converting one writes nothing but its metadata. Keeping the order thus costs
//! no record and no read on a write, and the commands that list a compact hash sort what they
//! read (at most `hash-max-listpack-entries` fields) by ordinal.

use std::collections::HashMap;
use std::ops::Bound;

use bytes::{BufMut, Bytes, BytesMut};

use super::collection::prefix_end;
use super::picks::{pick_key, pick_prefix};
use super::{Header, KeyType, Meta, View};

/// Redis's listpack limits for hashes: `hash-max-listpack-entries`, `hash-max-listpack-value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListpackLimits {
    /// The most fields a compact hash holds.
    pub entries: u64,
    /// The longest field or value (bytes) a compact hash holds.
    pub value: u64,
}

impl ListpackLimits {
    /// The limits `config` sets for hashes.
    pub fn of(config: &crate::config::Config) -> ListpackLimits {
        let number = |name, default| config.get(name).and_then(|v| v.parse().ok()).unwrap_or(default);
        ListpackLimits {
            entries: number("hash-max-listpack-entries", 512),
            value: number("hash-max-listpack-value", 64),
        }
    }

    /// Whether a field or value of this length may stay in a compact hash.
    pub fn fits(&self, bytes: &[u8]) -> bool {
        bytes.len() as u64 <= self.value
    }
}

/// The next ordinal of the hash `meta`: `Some` while it is compact, `None` for a hash table
/// (or any other type).
pub fn next_ordinal(meta: &Meta) -> Option<u64> {
    let word = meta.body.get(16..24).filter(|_| meta.kind == KeyType::Hash)?;
    Some(u64::from_le_bytes(word.try_into().ok()?))
}

/// The metadata of hash `meta` with `header` and, while it is compact, `next` ordinal.
pub fn with_order(meta: &Meta, header: &Header, next: Option<u64>) -> Meta {
    let head = header.body(KeyType::Hash);
    let body = match next {
        None => head,
        Some(next) => {
            let mut b = BytesMut::with_capacity(head.len() + 8);
            b.put_slice(&head);
            b.put_u64_le(next);
            b.freeze()
        }
    };
    Meta { body, ..meta.clone() }
}

/// The ordinal of `field` in `ordinals` (sorted by field, as [`View::field_ordinals`] gives).
pub(super) fn ordinal_of(ordinals: &[(Bytes, u64)], field: &[u8]) -> Option<u64> {
    ordinals.binary_search_by(|(f, _)| f[..].cmp(field)).ok().map(|i| ordinals[i].1)
}

/// The value of a hash field's record: `0 | value`, or `1 | ordinal u64 BE | value` for a
/// field of a compact hash (see the module docs).
pub(super) fn encode_field(ordinal: Option<u64>, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + value.len());
    match ordinal {
        Some(n) => {
            out.push(1);
            out.extend_from_slice(&n.to_be_bytes());
        }
        None => out.push(0),
    }
    out.extend_from_slice(value);
    out
}

/// The ordinal a hash field's record holds, if any (see [`encode_field`]).
fn ordinal(raw: &[u8]) -> Option<u64> {
    match raw.first() {
        Some(1) => Some(u64::from_be_bytes(raw.get(1..9)?.try_into().ok()?)),
        _ => None,
    }
}

/// The ordinal and the value of a hash field's record (see [`encode_field`]).
pub(super) fn decode_field(raw: &Bytes) -> (Option<u64>, Bytes) {
    match ordinal(raw) {
        Some(n) => (Some(n), raw.slice(9..)),
        None => (None, raw.slice(raw.len().min(1)..)),
    }
}

/// [`decode_field`] of a borrowed record.
fn decode_field_ref(raw: &[u8]) -> (Option<u64>, &[u8]) {
    match ordinal(raw) {
        Some(n) => (Some(n), &raw[9..]),
        None => (None, &raw[raw.len().min(1)..]),
    }
}

impl View<'_> {
    /// Adds setting a field of a hash (a new one, or a new value) to `batch`, with the field's
    /// `ordinal` while the hash is compact.
    pub fn add_field(&self, batch: &mut lsm::WriteBatch, uid: u64, field: &[u8], value: &[u8], ordinal: Option<u64>) {
        batch.put(pick_key(self.pdb(), uid, self.storage.pick_seed(), field), encode_field(ordinal, value));
    }

    /// Adds removing a field of a hash to `batch`.
    pub fn remove_field(&self, batch: &mut lsm::WriteBatch, uid: u64, field: &[u8]) {
        self.remove_member(batch, uid, field);
    }

    /// The value of `field` of the hash incarnation `uid`.
    pub fn field(&self, uid: u64, field: &[u8]) -> lsm::Result<Option<Bytes>> {
        Ok(self.member(uid, field)?.map(|raw| decode_field(&raw).1))
    }

    /// The ordinal (if the field was added to a compact hash) and the value of `field` of the
    /// hash incarnation `uid`.
    pub fn field_with_ordinal(&self, uid: u64, field: &[u8]) -> lsm::Result<Option<(Option<u64>, Bytes)>> {
        Ok(self.member(uid, field)?.map(|raw| decode_field(&raw)))
    }

    /// The ordinals of incarnation `uid`'s fields, from their pick records, with what `batch`
    /// (if any) already does to them applied; sorted by field.
    pub(super) fn field_ordinals(&self, uid: u64, batch: Option<&lsm::WriteBatch>) -> lsm::Result<Vec<(Bytes, u64)>> {
        let prefix = pick_prefix(self.pdb(), uid);
        let skip = prefix.len() + 8;
        let mut out = Vec::new();
        let end = prefix_end(&prefix);
        for kv in self.raw_range(Bound::Included(prefix.clone()), Bound::Excluded(end)) {
            let (k, v) = kv?;
            if let Some(n) = ordinal(&v).filter(|_| k.len() >= skip) {
                out.push((super::elements::key_tail(&k, skip), n));
            }
        }
        if let Some(batch) = batch {
            let mut pending: HashMap<Bytes, Option<u64>> = HashMap::new();
            for entry in batch.iter() {
                let entry = entry?;
                let Some(rest) = entry.key.strip_prefix(&prefix[..]).filter(|r| r.len() >= 8) else { continue };
                let field = Bytes::copy_from_slice(&rest[8..]);
                match entry.kind {
                    lsm::key::ValueKind::Put => pending.insert(field, ordinal(entry.value)),
                    lsm::key::ValueKind::Delete => pending.insert(field, None),
                    lsm::key::ValueKind::RangeDelete => continue,
                };
            }
            out.retain(|(f, _)| !pending.contains_key(f));
            out.extend(pending.into_iter().filter_map(|(f, n)| Some((f, n?))));
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Every (field, value) of the hash `meta`: a compact hash's in insertion order (one walk
    /// of its records, which hold the ordinals).
    pub fn hash_fields(&self, meta: &Meta) -> lsm::Result<Vec<(Bytes, Bytes)>> {
        let compact = next_ordinal(meta).is_some();
        let mut fields = Vec::with_capacity(usize::try_from(Header::of(meta).count).unwrap_or(0).min(1 << 16));
        for (i, kv) in self.members(meta.uid, Bound::Unbounded).enumerate() {
            let (field, raw) = kv?;
            let (n, value) = decode_field(&raw);
            fields.push(((n.filter(|_| compact).unwrap_or(u64::MAX), i), (field, value)));
        }
        if compact {
            fields.sort_unstable_by_key(|(k, _)| *k);
        }
        Ok(fields.into_iter().map(|(_, kv)| kv).collect())
    }

    /// Calls `each(field, value)` for every field of the hash `meta` in the order
    /// [`View::hash_fields`] lists them, borrowing both from the engine's buffers (HGETALL,
    /// HKEYS and HVALS frame them straight into their replies). A compact hash's fields (at
    /// most `hash-max-listpack-entries` of them) are gathered into one buffer and sorted first.
    pub fn each_field(&self, meta: &Meta, mut each: impl FnMut(&[u8], &[u8])) -> lsm::Result<()> {
        let count = Header::of(meta).count;
        if next_ordinal(meta).is_none() {
            return self.each_member(meta.uid, count, |field, raw| each(field, decode_field_ref(raw).1));
        }
        let mut bytes = Vec::new();
        // (ordinal, position read, where the field starts, field length, value length)
        let mut fields: Vec<(u64, usize, usize, usize, usize)> =
            Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(1 << 16));
        self.each_member(meta.uid, count, |field, raw| {
            let (n, value) = decode_field_ref(raw);
            fields.push((n.unwrap_or(u64::MAX), fields.len(), bytes.len(), field.len(), value.len()));
            bytes.extend_from_slice(field);
            bytes.extend_from_slice(value);
        })?;
        fields.sort_unstable();
        for (_, _, at, field, value) in fields {
            each(&bytes[at..at + field], &bytes[at + field..at + field + value]);
        }
        Ok(())
    }

    /// `items` of the hash `meta` in insertion order if it is compact, else as they are. An
    /// item whose field has no ordinal (none should) goes last.
    pub fn in_field_order<T>(&self, meta: &Meta, items: Vec<T>, field: impl Fn(&T) -> &[u8]) -> lsm::Result<Vec<T>> {
        if next_ordinal(meta).is_none() {
            return Ok(items);
        }
        let ordinals = self.field_ordinals(meta.uid, None)?;
        let rank = |t: &T| ordinal_of(&ordinals, field(t)).unwrap_or(u64::MAX);
        let mut keyed: Vec<((u64, usize), T)> =
            items.into_iter().enumerate().map(|(i, t)| ((rank(&t), i), t)).collect();
        keyed.sort_unstable_by_key(|(k, _)| *k);
        Ok(keyed.into_iter().map(|(_, t)| t).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{ExecContext, Storage};

    #[test]
    fn the_next_ordinal_lives_in_the_body_and_its_absence_means_a_hash_table() {
        let header = Header { count: 3, removed: 1, ..Header::default() };
        let table = Meta { kind: KeyType::Hash, expire_at_ms: 0, uid: 3, body: header.body(KeyType::Hash) };
        assert_eq!(next_ordinal(&table), None);
        let compact = with_order(&table, &header, Some(7));
        assert_eq!((next_ordinal(&compact), Header::of(&compact)), (Some(7), header), "the header still reads first");
        assert_eq!(next_ordinal(&Meta { kind: KeyType::ZSet, ..compact.clone() }), None);
        assert_eq!(with_order(&compact, &header, None).body, table.body);
    }

    #[test]
    fn fields_come_back_in_ordinal_order_with_a_batch_applied() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::new(lsm::Db::open(dir.path(), lsm::Options::default()).unwrap()).unwrap();
        let cx = ExecContext::new();
        let v = s.view(&cx, 0);
        let mut b = lsm::WriteBatch::new();
        for (i, f) in ["c", "a", "b"].iter().enumerate() {
            v.add_field(&mut b, 9, f.as_bytes(), b"x", Some(i as u64));
        }
        v.add_field(&mut b, 9, b"table", b"x", None);
        s.write(&cx, b).unwrap();
        let meta = with_order(
            &Meta { kind: KeyType::Hash, expire_at_ms: 0, uid: 9, body: Bytes::new() },
            &Header { count: 4, ..Header::default() },
            Some(3),
        );
        let sorted = vec!["a", "b", "c", "table"];
        assert_eq!(v.in_field_order(&meta, sorted.clone(), |f| f.as_bytes()).unwrap(), ["c", "a", "b", "table"]);
        let table = with_order(&meta, &Header::of(&meta), None);
        assert_eq!(v.in_field_order(&table, sorted, |f| f.as_bytes()).unwrap(), ["a", "b", "c", "table"]);
        // A batch not yet written: "c" removed, "d" added.
        let mut b = lsm::WriteBatch::new();
        v.remove_field(&mut b, 9, b"c");
        v.add_field(&mut b, 9, b"d", b"x", Some(3));
        let ordinals = v.field_ordinals(9, Some(&b)).unwrap();
        assert_eq!(ordinals, [(Bytes::from("a"), 1), (Bytes::from("b"), 2), (Bytes::from("d"), 3)]);
    }

    #[test]
    fn limits_read_the_configuration() {
        let mut config = crate::config::Config::default();
        assert_eq!(ListpackLimits::of(&config), ListpackLimits { entries: 512, value: 64 });
        config.apply("hash-max-listpack-entries", &["3".into()]).unwrap();
        let limits = ListpackLimits::of(&config);
        assert_eq!(limits.entries, 3);
        assert!(limits.fits(&[0; 64]) && !limits.fits(&[0; 65]));
    }
}
