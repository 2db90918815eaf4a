//! Rewriting a collection under a fresh incarnation once its removals outnumber twice its
//! members (see [`Header::needs_rebuild`]), so the tombstones its reads step over stay within a
//! small multiple of its live members.

use std::ops::Bound;

use super::picks::{members_in_picks, pick_prefix};
use super::{decode_score, Header, KeyType, Meta, View};

impl View<'_> {
    /// Adds to `batch` a copy of the collection `meta` at `key` under a fresh incarnation id
    /// (member and score-index records, as they will be once `batch` is applied) and
    /// returns the new metadata, with no removals counted and unbounded scores. Called when
    /// [`Header::needs_rebuild`]: the old incarnation's records, tombstones included, are never
    /// read again and compaction drops them as orphans.
    pub fn rebuild_into(&self, batch: &mut lsm::WriteBatch, key: &[u8], meta: &Meta) -> lsm::Result<Meta> {
        use lsm::key::ValueKind;
        // Only sets, hashes and sorted sets count removals; their members are their pick
        // records, after the member's hash.
        if !members_in_picks(meta.kind) {
            return Err(lsm::Error::InvalidArgument(format!("a {:?} is not rebuilt", meta.kind)));
        }
        // A rewrite copies every member, far too long for a connection's thread: a memory-only
        // attempt is voided, and the command runs again on an executor thread, which rewrites.
        if self.void_memory_only() {
            return Err(lsm::Error::WouldBlock);
        }
        let old_prefix = pick_prefix(self.pdb(), meta.uid);
        // What this batch already does to the old incarnation's elements.
        let mut pending: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>> = std::collections::BTreeMap::new();
        for entry in batch.iter() {
            let entry = entry?;
            if let Some(field) = entry.key.strip_prefix(&old_prefix[..]).and_then(|rest| rest.get(8..)) {
                match entry.kind {
                    // (A hash's field record holds an ordinal before the value.)
                    ValueKind::Put if meta.kind == KeyType::Hash => {
                        let raw = bytes::Bytes::copy_from_slice(entry.value);
                        pending.insert(field.to_vec(), Some(super::field_order::decode_field(&raw).1.to_vec()))
                    }
                    ValueKind::Put => pending.insert(field.to_vec(), Some(entry.value.to_vec())),
                    ValueKind::Delete => pending.insert(field.to_vec(), None),
                    ValueKind::RangeDelete => continue,
                };
            }
        }
        let mut live = Vec::new();
        for kv in self.entries(meta, Bound::Unbounded) {
            let (field, value) = kv?;
            match pending.remove(&field[..]) {
                Some(Some(v)) => live.push((field.to_vec(), v)),
                Some(None) => {}
                None => live.push((field.to_vec(), value.to_vec())),
            }
        }
        live.extend(pending.into_iter().filter_map(|(f, v)| v.map(|v| (f, v))));
        // A compact hash's fields keep their ordinals (see `field_order.rs`).
        let ordinals = match super::next_ordinal(meta) {
            Some(_) => Some(self.field_ordinals(meta.uid, Some(batch))?),
            None => None,
        };
        let uid = self.storage.new_uid();
        self.claim(batch, uid, key);
        for (field, value) in &live {
            match &ordinals {
                Some(o) => self.add_field(batch, uid, field, value, super::field_order::ordinal_of(o, field)),
                None if meta.kind == KeyType::Hash => self.add_field(batch, uid, field, value, None),
                None => self.add_member(batch, uid, field, value),
            }
            if meta.kind == KeyType::ZSet {
                self.put_score(batch, uid, decode_score(value), field);
            }
        }
        let count = live.len() as u64;
        let header = Header { count, ..Header::default() };
        // A compact hash keeps its field order; a sorted set's score bounds start unbounded.
        let body = if meta.kind == KeyType::Hash { header.body_for(meta) } else { header.body(meta.kind) };
        Ok(Meta { uid, body, ..meta.clone() })
    }
}
