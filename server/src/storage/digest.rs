//! `DEBUG DIGEST`: one checksum of the logical contents of every database, so two servers
//! (a primary and its replica, or a database before and after a move) can be compared with one
//! command. Each live key contributes SHA-1 of its database, name, type, expiry time and
//! contents (a string's value; a collection's elements in field order, a list's values in list
//! order); the key digests are XORed, so the result does not depend on the order keys are
//! visited. An empty keyspace digests to twenty zero bytes, as in Redis (whose numbers for the
//! same data differ: the per-value encoding is Shale's own).

use ring::digest::{Context, SHA1_FOR_LEGACY_USE_ONLY};

use std::ops::Bound;

use bytes::Bytes;

use super::picks::members_in_picks;
use super::{element_prefix, ExecContext, KeyType, Storage};

/// Adds one element (its field, unless a list's, and its value) to a key's digest.
fn digest_entry(h: &mut Context, field: Option<&[u8]>, value: &[u8]) {
    if let Some(f) = field {
        h.update(&f.len().to_be_bytes());
        h.update(f);
    }
    h.update(&(value.len() as u64).to_be_bytes());
    h.update(value);
}

impl Storage {
    /// The digest of logical databases `0..databases` (see the module docs).
    pub fn digest(&self, cx: &ExecContext, databases: u32) -> lsm::Result<[u8; 20]> {
        let mut total = [0u8; 20];
        for db in 0..databases {
            if self.dbsize(db) == 0 {
                continue;
            }
            let mut cursor = bytes::Bytes::new();
            loop {
                let page = self.scan(cx, db, &cursor, 1024)?;
                for (key, meta) in &page.keys {
                    let mut h = Context::new(&SHA1_FOR_LEGACY_USE_ONLY);
                    h.update(&db.to_be_bytes());
                    h.update(&(key.len() as u64).to_be_bytes());
                    h.update(key);
                    h.update(&[meta.kind as u8]);
                    h.update(&meta.expire_at_ms.to_be_bytes());
                    if meta.kind == KeyType::String {
                        h.update(&self.view(cx, db).inline_string(meta.clone())?.body);
                    } else if members_in_picks(meta.kind) {
                        // Members are kept in the order of a hash seeded per server: sorted
                        // first, so the same set digests the same everywhere.
                        let mut members: Vec<(Bytes, Bytes)> =
                            self.view(cx, db).entries(meta, Bound::Unbounded).collect::<lsm::Result<_>>()?;
                        members.sort_unstable();
                        for (m, v) in &members {
                            digest_entry(&mut h, Some(m), v);
                        }
                    } else {
                        let prefix = element_prefix(b'E', self.phys(db), meta.uid);
                        let end = super::collection::prefix_end(&prefix);
                        let range = cx.range(&self.engine, Bound::Included(prefix.clone()), Bound::Excluded(end));
                        for kv in range {
                            let (k, v) = kv?;
                            // A list's element keys are positions, which depend on its push/pop
                            // history: only the values, in order, are its contents.
                            let field = (meta.kind != KeyType::List).then(|| &k[prefix.len()..]);
                            digest_entry(&mut h, field, &v);
                        }
                    }
                    for (t, b) in total.iter_mut().zip(h.finish().as_ref()) {
                        *t ^= b;
                    }
                }
                match page.next {
                    Some(next) => cursor = next,
                    None => break,
                }
            }
        }
        Ok(total)
    }
}
