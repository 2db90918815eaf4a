//! The insertion order of a small hash's fields, as Redis's listpack encoding keeps it.
//!
//! Redis stores a hash as a listpack while it has at most `hash-max-listpack-entries` fields
//! and no field or value longer than `hash-max-listpack-value` bytes; HGETALL, HKEYS, HVALS,
//! HSCAN and DUMP then list its fields in the order they were added (an update keeps a field's
//! place, a deleted and re-added field goes last). The first write that passes a limit
//! converts the hash to a hash table for good, whose order is unspecified.
//!
//! Shale's element records are sorted by field. A *compact* hash (one Redis would keep as a
//! listpack) numbers its fields as they are added: the number, its *ordinal*, is the value of
//! the field's pick record (which every hash field has anyway, see `picks.rs`), and the next
//! one to hand out is a third word in the hash's metadata body:
//!
//! ```text
//! hash metadata body   count u64 LE | removed u64 LE | [next ordinal u64 LE]
//! pick record value    ordinal u64 BE            (compact hashes; empty otherwise)
//! ```
//!
//! The word is there exactly while the hash is compact (OBJECT ENCODING `listpack`), so a body
//! without it is a hash table, whose pick records' values mean nothing. Keeping the order thus
//! costs no record and no read on a write; the commands that list a compact hash read its pick
//! records beside its elements (at most `hash-max-listpack-entries` of each).

use std::collections::HashMap;
use std::ops::Bound;

use bytes::{BufMut, Bytes, BytesMut};

use super::collection::{element_key, prefix_end};
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

/// The ordinal a pick record's value holds (`None`: not a compact hash's).
fn ordinal(value: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(value.try_into().ok()?))
}

impl View<'_> {
    /// Adds a new field of a hash: its element record and its pick record, which holds the
    /// field's `ordinal` when the hash is compact.
    pub fn add_field(&self, batch: &mut lsm::WriteBatch, uid: u64, field: &[u8], value: &[u8], ordinal: Option<u64>) {
        batch.put(element_key(self.pdb(), uid, field), value);
        let pick = pick_key(self.pdb(), uid, self.storage.pick_seed(), field);
        match ordinal {
            Some(n) => batch.put(pick, n.to_be_bytes()),
            None => batch.put(pick, b""),
        };
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
                out.push((super::collection::key_tail(&k, skip), n));
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

    /// Every (field, value) of the hash `meta`: a compact hash's in insertion order, read
    /// with one engine cursor for its elements and its pick records where it can (two range
    /// reads of a small hash cost about what one costs, most of it being the cursor's set-up).
    pub fn hash_fields(&self, meta: &Meta) -> lsm::Result<Vec<(Bytes, Bytes)>> {
        let cursor = next_ordinal(meta).and_then(|_| self.cursor());
        let Some(mut it) = cursor else {
            let all = self.elements(meta.uid, Bound::Unbounded).collect::<lsm::Result<Vec<_>>>()?;
            return self.in_field_order(meta, all, |(f, _)| f);
        };
        let mut read = |prefix: Vec<u8>, item: &mut dyn FnMut(&[u8], &lsm::DbIterator)| -> lsm::Result<()> {
            it.set_bounds(Bound::Included(prefix.clone()), Bound::Excluded(prefix_end(&prefix)));
            it.seek(&prefix)?;
            while it.valid() {
                item(&it.key()[prefix.len()..], &it);
                it.next()?;
            }
            it.status()
        };
        let mut fields = Vec::with_capacity(usize::try_from(Header::of(meta).count).unwrap_or(0));
        let walked = read(element_key(self.pdb(), meta.uid, b""), &mut |field, it| {
            fields.push((Bytes::copy_from_slice(field), it.value_bytes()));
        });
        self.noted_walk(walked)?;
        let mut ranks = vec![u64::MAX; fields.len()];
        // The pick records come in (hash, field) order: sort the fields the same way and walk
        // both together, comparing hashes (a binary search by field per record cost more).
        let seed = self.storage.pick_seed();
        let mut by_hash: Vec<(u64, usize)> =
            fields.iter().enumerate().map(|(i, (f, _))| (super::picks::member_hash(seed, f), i)).collect();
        by_hash.sort_unstable();
        let mut at = 0;
        let walked = read(pick_prefix(self.pdb(), meta.uid), &mut |rest, it| {
            let (Some(hash), Some(field), Some(n)) = (rest.get(..8), rest.get(8..), ordinal(it.value())) else {
                return;
            };
            let hash = u64::from_be_bytes(hash.try_into().unwrap_or_default());
            while by_hash.get(at).is_some_and(|&(h, _)| h < hash) {
                at += 1;
            }
            let mut same_hash = by_hash[at..].iter().take_while(|&&(h, _)| h == hash);
            if let Some(&(_, i)) = same_hash.find(|&&(_, i)| fields[i].0 == field) {
                ranks[i] = n;
            }
        });
        self.noted_walk(walked)?;
        let mut keyed: Vec<((u64, usize), (Bytes, Bytes))> =
            fields.into_iter().enumerate().map(|(i, kv)| ((ranks[i], i), kv)).collect();
        keyed.sort_unstable_by_key(|(k, _)| *k);
        Ok(keyed.into_iter().map(|(_, kv)| kv).collect())
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
