//! A table's index, decoded once when the table opens: which data block may hold a key.

use std::path::Path;

use super::block::Block;
use super::format::BlockHandle;
use crate::iter::InternalIterator;
use crate::key;
use crate::{Error, Result};

/// The index block decoded once at open: separator keys back to back, and the handle of each
/// data block. A lookup binary-searches plain byte slices instead of decoding varints at every
/// probe, and first narrows the search with `probes`: for each separator, the 8 bytes of its
/// user key that follow the prefix all separators share, as a big-endian number. Those numbers
/// are in key order and lie in one dense array (8 bytes a block, so a table's fit in the CPU
/// cache), and keys sharing a long prefix (a server's `M<db>…` keys) still differ in them; only
/// separators with the same number as the target are compared in full.
#[derive(Debug, Default)]
pub(super) struct Index {
    keys: Vec<u8>,
    ends: Vec<u32>,
    pub(super) handles: Vec<BlockHandle>,
    /// Length of the user-key prefix every separator shares.
    shared: usize,
    probes: Vec<u64>,
}

/// The 8 bytes of `user_key` after its first `skip`, zero-padded, as a big-endian number:
/// `a <= b` (bytewise) implies `probe(a) <= probe(b)` for keys that share those `skip` bytes.
fn probe(user_key: &[u8], skip: usize) -> u64 {
    let mut b = [0u8; 8];
    let rest = user_key.get(skip..).unwrap_or(&[]);
    let n = rest.len().min(8);
    b[..n].copy_from_slice(&rest[..n]);
    u64::from_be_bytes(b)
}

impl Index {
    pub(super) fn decode(block: &Block, path: &Path, offset: u64) -> Result<Index> {
        let mut idx = Index::default();
        let mut it = block.iter();
        it.seek_to_first()?;
        while it.valid() {
            let h = BlockHandle::decode(it.value())
                .ok_or_else(|| Error::corruption(path.to_path_buf(), offset, "bad block handle in index"))?;
            idx.keys.extend_from_slice(it.key());
            idx.ends.push(
                u32::try_from(idx.keys.len())
                    .map_err(|_| Error::corruption(path.to_path_buf(), offset, "index too large"))?,
            );
            idx.handles.push(h);
            it.next()?;
        }
        idx.build_probes();
        // The vectors grew by doubling; an open table keeps them for its life.
        idx.keys.shrink_to_fit();
        idx.ends.shrink_to_fit();
        idx.handles.shrink_to_fit();
        Ok(idx)
    }

    fn build_probes(&mut self) {
        let n = self.len();
        if n == 0 {
            return;
        }
        // Separators are sorted: what the first and the last share, all share.
        let (first, last) = (key::user_key(self.key(0)), key::user_key(self.key(n - 1)));
        self.shared = first.iter().zip(last).take_while(|(a, b)| a == b).count();
        self.probes = (0..n).map(|i| probe(key::user_key(self.key(i)), self.shared)).collect();
    }

    /// Bytes the decoded index holds.
    pub(super) fn memory(&self) -> usize {
        self.keys.capacity()
            + self.ends.capacity() * 4
            + self.handles.capacity() * std::mem::size_of::<BlockHandle>()
            + self.probes.capacity() * 8
    }

    pub(super) fn len(&self) -> usize {
        self.handles.len()
    }

    fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.keys[start..self.ends[i] as usize]
    }

    /// The first block whose separator is `>= target` (`len()` if none).
    pub(super) fn find(&self, target: &[u8]) -> usize {
        if self.len() == 0 {
            return 0;
        }
        let user = key::user_key(target);
        let common = &key::user_key(self.key(0))[..self.shared];
        let n = user.len().min(self.shared);
        // A target that is a proper prefix of `common` sorts before every separator.
        let (mut lo, mut hi) = match user[..n].cmp(&common[..n]).then(n.cmp(&self.shared)) {
            std::cmp::Ordering::Less => return 0,
            std::cmp::Ordering::Greater => return self.len(),
            std::cmp::Ordering::Equal => {
                // Separators with a smaller number are smaller than the target, those with a
                // larger one larger: only equal numbers need the full comparison.
                let p = probe(user, self.shared);
                let lo = self.probes.partition_point(|&q| q < p);
                (lo, lo + self.probes[lo..].partition_point(|&q| q == p))
            }
        };
        while lo < hi {
            let mid = (lo + hi) / 2;
            if key::compare(self.key(mid), target).is_lt() {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::key::ValueKind;

    /// An index over `separators` (sorted and deduplicated here), as `decode` builds it.
    fn index(mut separators: Vec<(Vec<u8>, u64)>) -> Index {
        separators.sort_by(|a, b| {
            key::compare(
                &key::make_internal_key(&a.0, a.1, ValueKind::Put),
                &key::make_internal_key(&b.0, b.1, ValueKind::Put),
            )
        });
        separators.dedup();
        let mut idx = Index::default();
        for (i, (user, seq)) in separators.iter().enumerate() {
            idx.keys.extend_from_slice(&key::make_internal_key(user, *seq, ValueKind::Put));
            idx.ends.push(idx.keys.len() as u32);
            idx.handles.push(BlockHandle { offset: i as u64, size: 1 });
        }
        idx.build_probes();
        idx
    }

    /// The plain binary search the probes narrow.
    fn find_by_comparing(idx: &Index, target: &[u8]) -> usize {
        (0..idx.len()).find(|&i| !key::compare(idx.key(i), target).is_lt()).unwrap_or(idx.len())
    }

    /// Keys over a small alphabet around a shared prefix: prefixes of each other, equal probes,
    /// zero bytes, keys shorter than the shared prefix.
    fn user_key() -> impl Strategy<Value = Vec<u8>> {
        (0usize..3, proptest::collection::vec(prop_oneof![Just(0u8), Just(1), Just(b'a'), Just(255)], 0..12)).prop_map(
            |(prefix, rest)| {
                let mut k = [b"Mdb".as_slice(), b"Mdb\x00\x01", b""][prefix].to_vec();
                k.extend(rest);
                k
            },
        )
    }

    proptest! {
        #[test]
        fn find_agrees_with_comparing_every_separator(
            separators in proptest::collection::vec((user_key(), 1u64..4), 1..40),
            targets in proptest::collection::vec((user_key(), 0u64..5), 1..40),
        ) {
            let idx = index(separators);
            for (user, seq) in targets {
                let target = key::make_internal_key(&user, seq, ValueKind::Put);
                prop_assert_eq!(idx.find(&target), find_by_comparing(&idx, &target), "target {:?}@{}", user, seq);
            }
        }
    }

    #[test]
    fn separators_sharing_a_long_prefix_still_have_distinct_probes() {
        let seps: Vec<_> = (0..100u32).map(|i| (format!("M\x00\x07user:{i:06}").into_bytes(), 1)).collect();
        let idx = index(seps);
        assert_eq!(idx.shared, "M\x00\x07user:0000".len());
        let distinct: std::collections::HashSet<_> = idx.probes.iter().collect();
        assert_eq!(distinct.len(), 100);
        let target = key::make_internal_key(b"M\x00\x07user:000042", 9, ValueKind::Put);
        assert_eq!(idx.find(&target), 42);
        assert_eq!(idx.find(&key::make_internal_key(b"A", 1, ValueKind::Put)), 0);
        assert_eq!(idx.find(&key::make_internal_key(b"M\x00\x07user", 1, ValueKind::Put)), 0);
        assert_eq!(idx.find(&key::make_internal_key(b"Z", 1, ValueKind::Put)), 100);
    }
}
