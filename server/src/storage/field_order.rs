//! The insertion order of a small hash's fields, as Redis's listpack encoding keeps it.
//!
//! Redis stores a hash as a listpack while it has at most `hash-max-listpack-entries` fields
//! and no field or value longer than `hash-max-listpack-value` bytes; HGETALL, HKEYS, HVALS,
//! HSCAN and DUMP then list its fields in the order they were added (an update keeps a field's
//! place, a deleted and re-added field goes last). The first write that passes a limit
//! converts the hash to a hash table for good, whose order is unspecified.
//!
//! Shale's element records are sorted by field, so a compact hash also keeps its order in its
//! metadata body, after the collection header:
//!
//! ```text
//! hash metadata body   count u64 LE | removed u64 LE | [ 'L' | (len u32 LE | field)* ]
//! ```
//!
//! The section is there exactly while the hash is compact (OBJECT ENCODING `listpack`), so a
//! body without it (every hash written before this section existed, too) is a hash table.
//! Keeping it costs a rewrite of at most `entries × value` bytes of metadata per new field —
//! what Redis's listpack insert moves in memory.

use bytes::{BufMut, Bytes, BytesMut};

use super::{Header, KeyType, Meta};

/// The tag that starts the section.
const TAG: u8 = b'L';

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

/// A compact hash's fields in insertion order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldOrder {
    fields: Vec<Bytes>,
}

impl FieldOrder {
    /// The order kept in a hash's metadata; `None` for a hash table (or any other type).
    pub fn of(meta: &Meta) -> Option<FieldOrder> {
        if meta.kind != KeyType::Hash {
            return None;
        }
        let section = meta.body.get(16..).filter(|s| s.first() == Some(&TAG))?;
        let mut fields = Vec::new();
        let mut at = 1;
        while at < section.len() {
            let len = section.get(at..at + 4)?;
            let len = u32::from_le_bytes(len.try_into().ok()?) as usize;
            let end = (at + 4).checked_add(len).filter(|&e| e <= section.len())?;
            fields.push(meta.body.slice(16 + at + 4..16 + end));
            at = end;
        }
        Some(FieldOrder { fields })
    }

    /// The fields, in insertion order.
    pub fn fields(&self) -> &[Bytes] {
        &self.fields
    }

    /// How many fields it lists.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// True when it lists no field.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Adds a new field at the end.
    pub fn push(&mut self, field: Bytes) {
        self.fields.push(field);
    }

    /// Removes `field` (the later ones move up).
    pub fn remove(&mut self, field: &[u8]) {
        if let Some(i) = self.fields.iter().position(|f| f == field) {
            self.fields.remove(i);
        }
    }

    /// The metadata body of a hash with `header` and this order.
    pub fn body(&self, header: &Header) -> Bytes {
        let head = header.body(KeyType::Hash);
        let size = head.len() + 1 + self.fields.iter().map(|f| 4 + f.len()).sum::<usize>();
        let mut b = BytesMut::with_capacity(size);
        b.put_slice(&head);
        b.put_u8(TAG);
        for f in &self.fields {
            b.put_u32_le(f.len() as u32);
            b.put_slice(f);
        }
        b.freeze()
    }

    /// `items` (keyed by field, as element records are read: sorted) in insertion order; a
    /// field the order does not list keeps its relative place after the listed ones.
    pub fn arrange<T>(&self, items: Vec<T>, field: impl Fn(&T) -> &[u8]) -> Vec<T> {
        let position: std::collections::HashMap<&[u8], usize> =
            self.fields.iter().enumerate().map(|(i, f)| (&f[..], i)).collect();
        let mut keyed: Vec<(usize, T)> =
            items.into_iter().map(|t| (position.get(field(&t)).copied().unwrap_or(usize::MAX), t)).collect();
        keyed.sort_by_key(|(p, _)| *p);
        keyed.into_iter().map(|(_, t)| t).collect()
    }
}

/// The metadata of hash `meta` with `header` and `order` (`None`: a hash table).
pub fn with_order(meta: &Meta, header: &Header, order: Option<&FieldOrder>) -> Meta {
    let body = order.map_or_else(|| header.body(KeyType::Hash), |o| o.body(header));
    Meta { body, ..meta.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(body: Bytes) -> Meta {
        Meta { kind: KeyType::Hash, expire_at_ms: 0, uid: 3, body }
    }

    #[test]
    fn the_order_round_trips_through_the_body_and_its_absence_means_a_hash_table() {
        let header = Header { count: 3, removed: 1, ..Header::default() };
        let mut order = FieldOrder::default();
        for f in ["zeta", "", "alpha"] {
            order.push(Bytes::from(f));
        }
        let meta = hash(order.body(&header));
        assert_eq!(Header::of(&meta), header, "the header still reads first");
        assert_eq!(FieldOrder::of(&meta), Some(order.clone()));
        assert_eq!(FieldOrder::of(&hash(header.body(KeyType::Hash))), None, "no section: a hash table");
        assert_eq!(FieldOrder::of(&Meta { kind: KeyType::Set, ..meta.clone() }), None);
        // A truncated section is not read as a shorter order.
        let cut = meta.body.slice(..meta.body.len() - 1);
        assert_eq!(FieldOrder::of(&hash(cut)), None);
        order.remove(b"");
        assert_eq!(order.fields(), [Bytes::from("zeta"), Bytes::from("alpha")]);
        assert_eq!(with_order(&meta, &header, None).body, header.body(KeyType::Hash));
    }

    #[test]
    fn arrange_puts_sorted_items_in_insertion_order() {
        let mut order = FieldOrder::default();
        for f in ["b", "c", "a"] {
            order.push(Bytes::from(f));
        }
        let items = vec![("a", 1), ("b", 2), ("c", 3), ("x", 4)];
        assert_eq!(order.arrange(items, |(f, _)| f.as_bytes()), vec![("b", 2), ("c", 3), ("a", 1), ("x", 4)]);
    }

    #[test]
    fn limits_read_the_configuration() {
        let mut config = crate::config::Config::default();
        assert_eq!(ListpackLimits::of(&config).value, 64);
        config.apply("hash-max-listpack-entries", &["3".into()]).unwrap();
        let limits = ListpackLimits::of(&config);
        assert_eq!(limits.entries, 3);
        assert!(limits.fits(&[0; 64]) && !limits.fits(&[0; 65]));
    }
}
