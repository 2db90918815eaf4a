//! A table's index, decoded once when the table opens: which data block may hold a key.

use std::path::Path;

use super::block::Block;
use super::format::{BlockHandle, BLOCK_TRAILER_LEN};
use crate::iter::InternalIterator;
use crate::key;
use crate::{Error, Result};

/// The index block decoded once at open: separator keys back to back, and where each data
/// block is. A lookup binary-searches plain byte slices instead of decoding varints at every
/// probe, and first narrows the search with `probes`: for each separator, the 8 bytes of its
/// user key that follow the prefix all separators share, as a big-endian number. Those numbers
/// are in key order and lie in one dense array (8 bytes a block), and keys sharing a long
/// prefix (a server's `M<db>…` keys) still differ in them; only separators with the same number
/// as the target are compared in full. A 64 MiB table has ~30,000 of them (240 KB): a search
/// first picks its stretch of 64 from every 64th number (`samples`, small enough to stay in
/// cache), so it reads two or three cache lines of `probes` rather than one per step.
///
/// An open table keeps its index for its life, so it is kept small (about 20 bytes a block
/// where the plain form took 40, which is half of a 10 M-entry database's index memory):
/// - a separator the builder shortened ends in the same trailer, [`SEPARATOR_TRAILER`]; only
///   the others keep their 8 trailer bytes (flagged in `ends`);
/// - the builder writes data blocks back to back, so one 32-bit start per block says where
///   each block is and how long it is; a table written otherwise keeps full handles.
#[derive(Debug, Default)]
pub(super) struct Index {
    /// Each separator's user key, followed by its trailer unless that is [`SEPARATOR_TRAILER`].
    keys: Vec<u8>,
    /// Where each separator ends in `keys`, with [`HAS_TRAILER`] set when its trailer is stored.
    ends: Vec<u32>,
    handles: Handles,
    /// Length of the user-key prefix every separator shares.
    shared: usize,
    probes: Vec<u64>,
    /// Every [`SAMPLE`]th probe: a search first finds its stretch of `probes` here (a few
    /// kilobytes even for a 64 MiB table, so it stays in cache), then searches only that
    /// stretch, instead of a binary search over all of `probes` that misses the cache at most
    /// of its steps.
    samples: Vec<u64>,
}

/// Probes per sample (512 bytes of `probes`: eight cache lines).
const SAMPLE: usize = 64;

/// The trailer of a separator [`key::shortest_separator`] or [`key::short_successor`] shortened.
const SEPARATOR_TRAILER: u64 = (key::MAX_SEQUENCE << 8) | key::ValueKind::MAX as u64;

/// The flag in [`Index::ends`] of a separator whose trailer is stored.
const HAS_TRAILER: u32 = 1 << 31;

/// Where the data blocks are.
#[derive(Debug)]
enum Handles {
    /// Block `i` spans `starts[i]..starts[i + 1]`, its trailer included (`n + 1` starts).
    Packed(Vec<u32>),
    /// Any other layout (or a table past 4 GiB).
    Full(Vec<BlockHandle>),
}

impl Default for Handles {
    fn default() -> Self {
        Handles::Packed(Vec::new())
    }
}

impl Handles {
    /// Packs `handles` if each block starts where the previous one's trailer ends.
    fn new(handles: Vec<BlockHandle>) -> Handles {
        if handles.is_empty() {
            return Handles::Packed(Vec::new());
        }
        let trailer = BLOCK_TRAILER_LEN as u64;
        let mut starts = Vec::with_capacity(handles.len() + 1);
        for (i, h) in handles.iter().enumerate() {
            let end = h.offset.checked_add(h.size).and_then(|e| e.checked_add(trailer));
            let contiguous = i == 0 || u64::from(starts[i]) == h.offset;
            match end.and_then(|e| u32::try_from(e).ok()) {
                Some(end) if contiguous && u32::try_from(h.offset).is_ok() => {
                    if i == 0 {
                        starts.push(h.offset as u32);
                    }
                    starts.push(end);
                }
                _ => {
                    let mut full = handles;
                    full.shrink_to_fit();
                    return Handles::Full(full);
                }
            }
        }
        Handles::Packed(starts)
    }

    fn get(&self, i: usize) -> BlockHandle {
        match self {
            Handles::Packed(starts) => {
                let (start, end) = (u64::from(starts[i]), u64::from(starts[i + 1]));
                BlockHandle { offset: start, size: end - start - BLOCK_TRAILER_LEN as u64 }
            }
            Handles::Full(h) => h[i],
        }
    }

    fn memory(&self) -> usize {
        match self {
            Handles::Packed(starts) => starts.capacity() * 4,
            Handles::Full(h) => h.capacity() * std::mem::size_of::<BlockHandle>(),
        }
    }
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
        let corrupt = |what: &str| Error::corruption(path.to_path_buf(), offset, what.to_string());
        // A first pass counts, so every vector is allocated once at its size: an open table
        // keeps them for its life, and the copies a doubling vector leaves behind are pages the
        // allocator holds on to (a 64 MiB table's index has ~30,000 entries).
        let (mut n, mut key_bytes) = (0usize, 0usize);
        let mut it = block.iter();
        it.seek_to_first()?;
        while it.valid() {
            n += 1;
            key_bytes += it.key().len();
            it.next()?;
        }
        let mut idx = Index { keys: Vec::with_capacity(key_bytes), ends: Vec::with_capacity(n), ..Index::default() };
        let mut handles = Vec::with_capacity(n);
        it.seek_to_first()?;
        while it.valid() {
            handles.push(BlockHandle::decode(it.value()).ok_or_else(|| corrupt("bad block handle in index"))?);
            idx.push(it.key()).ok_or_else(|| corrupt("bad separator in index"))?;
            it.next()?;
        }
        idx.handles = Handles::new(handles);
        idx.build_probes();
        // Shortened separators left their trailers out.
        idx.keys.shrink_to_fit();
        Ok(idx)
    }

    /// Appends a separator (an internal key); `None` if it is too short or `keys` too long.
    fn push(&mut self, separator: &[u8]) -> Option<()> {
        if separator.len() < key::TRAILER_LEN {
            return None;
        }
        let trailer = key::trailer(separator);
        let kept = if trailer == SEPARATOR_TRAILER { key::user_key(separator) } else { separator };
        self.keys.extend_from_slice(kept);
        let end = u32::try_from(self.keys.len()).ok().filter(|&e| e < HAS_TRAILER)?;
        self.ends.push(if trailer == SEPARATOR_TRAILER { end } else { end | HAS_TRAILER });
        Some(())
    }

    fn build_probes(&mut self) {
        let n = self.len();
        if n == 0 {
            return;
        }
        // Separators are sorted: what the first and the last share, all share.
        let (first, last) = (self.separator(0).0, self.separator(n - 1).0);
        self.shared = first.iter().zip(last).take_while(|(a, b)| a == b).count();
        self.probes = (0..n).map(|i| probe(self.separator(i).0, self.shared)).collect();
        self.samples = self.probes.iter().step_by(SAMPLE).copied().collect();
    }

    /// The first `i` with `probes[i] >= p`, through the samples.
    fn first_probe_at_least(&self, p: u64) -> usize {
        let j = self.samples.partition_point(|&q| q < p);
        // probes[SAMPLE * (j - 1)] < p <= probes[SAMPLE * j]: the answer is between them.
        let start = if j == 0 { 0 } else { SAMPLE * (j - 1) + 1 };
        let end = (SAMPLE * j).min(self.probes.len());
        start + self.probes[start..end].partition_point(|&q| q < p)
    }

    /// The end of the run of probes equal to `p` that starts at `lo` (`lo` if there is none),
    /// by galloping: such runs are short (separators rarely share the probed bytes), so this
    /// reads a cache line or two where a binary search over the rest of the index read many.
    fn end_of_equal_run(&self, lo: usize, p: u64) -> usize {
        let probes = &self.probes;
        let mut bound = 1;
        while lo + bound <= probes.len() && probes[lo + bound - 1] == p {
            bound *= 2;
        }
        // probes[lo..lo + bound / 2] all equal p; probes[lo + bound - 1] does not (or is past
        // the end).
        let start = lo + bound / 2;
        let end = (lo + bound).min(probes.len());
        start + probes[start..end].partition_point(|&q| q == p)
    }

    /// Bytes the decoded index holds.
    pub(super) fn memory(&self) -> usize {
        self.keys.capacity()
            + self.ends.capacity() * 4
            + self.handles.memory()
            + self.probes.capacity() * 8
            + self.samples.capacity() * 8
    }

    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Where data block `i` is.
    pub(super) fn handle(&self, i: usize) -> BlockHandle {
        self.handles.get(i)
    }

    /// Separator `i`: its user key and its trailer.
    fn separator(&self, i: usize) -> (&[u8], u64) {
        let start = if i == 0 { 0 } else { (self.ends[i - 1] & !HAS_TRAILER) as usize };
        let end = self.ends[i];
        let stored = &self.keys[start..(end & !HAS_TRAILER) as usize];
        if end & HAS_TRAILER == 0 {
            (stored, SEPARATOR_TRAILER)
        } else {
            (key::user_key(stored), key::trailer(stored))
        }
    }

    /// [`key::compare`] of separator `i` with the internal key `target`.
    fn compare(&self, i: usize, target: &[u8]) -> std::cmp::Ordering {
        let (user, trailer) = self.separator(i);
        match key::compare_bytes(user, key::user_key(target)) {
            std::cmp::Ordering::Equal => key::trailer(target).cmp(&trailer),
            o => o,
        }
    }

    /// True when [`find`](Self::find) of `target` is block `i` (`i < len()`): the separators on
    /// either side of `target` are `i - 1` and `i`. Two comparisons, where `find` makes a
    /// binary search: a cursor seeking ahead within its block asks this first.
    pub(super) fn finds_at(&self, i: usize, target: &[u8]) -> bool {
        i < self.len() && !self.compare(i, target).is_lt() && (i == 0 || self.compare(i - 1, target).is_lt())
    }

    /// The first block whose separator is `>= target` (`len()` if none).
    pub(super) fn find(&self, target: &[u8]) -> usize {
        if self.len() == 0 {
            return 0;
        }
        let user = key::user_key(target);
        let common = &self.separator(0).0[..self.shared];
        let n = user.len().min(self.shared);
        // A target that is a proper prefix of `common` sorts before every separator.
        let (mut lo, mut hi) = match user[..n].cmp(&common[..n]).then(n.cmp(&self.shared)) {
            std::cmp::Ordering::Less => return 0,
            std::cmp::Ordering::Greater => return self.len(),
            std::cmp::Ordering::Equal => {
                // Separators with a smaller number are smaller than the target, those with a
                // larger one larger: only equal numbers need the full comparison.
                let p = probe(user, self.shared);
                let lo = self.first_probe_at_least(p);
                (lo, self.end_of_equal_run(lo, p))
            }
        };
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.compare(mid, target).is_lt() {
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

    /// `user` at `seq`; sequence 0 stands for the trailer of a shortened separator (and of a
    /// seek to the newest version).
    fn ikey(user: &[u8], seq: u64) -> Vec<u8> {
        match seq {
            0 => key::make_internal_key(user, key::MAX_SEQUENCE, ValueKind::MAX),
            _ => key::make_internal_key(user, seq, ValueKind::Put),
        }
    }

    /// `separators` as internal keys, sorted and deduplicated.
    fn sorted(separators: &[(Vec<u8>, u64)]) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = separators.iter().map(|(user, seq)| ikey(user, *seq)).collect();
        keys.sort_by(|a, b| key::compare(a, b));
        keys.dedup();
        keys
    }

    /// An index over `separators` (sorted and deduplicated here), as `decode` builds it.
    fn index(separators: Vec<(Vec<u8>, u64)>) -> Index {
        let mut idx = Index::default();
        let mut handles = Vec::new();
        for (i, separator) in sorted(&separators).iter().enumerate() {
            idx.push(separator).unwrap();
            handles.push(BlockHandle { offset: i as u64 * 7, size: 2 });
        }
        idx.handles = Handles::new(handles);
        idx.build_probes();
        idx
    }

    /// The plain binary search the probes narrow.
    fn find_by_comparing(idx: &Index, target: &[u8]) -> usize {
        (0..idx.len()).find(|&i| !idx.compare(i, target).is_lt()).unwrap_or(idx.len())
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
            separators in proptest::collection::vec((user_key(), 0u64..4), 1..400),
            targets in proptest::collection::vec((user_key(), 0u64..5), 1..40),
        ) {
            let idx = index(separators.clone());
            let expected = sorted(&separators);
            prop_assert_eq!(idx.len(), expected.len());
            for (i, separator) in expected.iter().enumerate() {
                let (user, trailer) = idx.separator(i);
                prop_assert_eq!(&[user, &trailer.to_le_bytes()].concat(), separator);
                prop_assert_eq!(idx.handle(i), BlockHandle { offset: i as u64 * 7, size: 2 });
            }
            for (user, seq) in targets {
                let target = ikey(&user, seq);
                prop_assert_eq!(idx.find(&target), find_by_comparing(&idx, &target), "target {:?}@{}", user, seq);
            }
        }
    }

    #[test]
    fn sampled_and_galloping_searches_match_a_scan() {
        // Runs of equal probes of every length, across and at the edges of the samples.
        let mut probes = Vec::new();
        let mut v = 10u64;
        for len in [1usize, 3, 64, 1, 65, 130, 2, 63, 7, 200, 1] {
            probes.extend(std::iter::repeat_n(v, len));
            v += 10;
        }
        let idx = Index { samples: probes.iter().step_by(SAMPLE).copied().collect(), probes, ..Index::default() };
        for p in 0..v + 10 {
            let lo = idx.probes.iter().position(|&q| q >= p).unwrap_or(idx.probes.len());
            assert_eq!(idx.first_probe_at_least(p), lo, "probe {p}");
            let hi = lo + idx.probes[lo..].iter().take_while(|&&q| q == p).count();
            assert_eq!(idx.end_of_equal_run(lo, p), hi, "probe {p}");
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

    #[test]
    fn shortened_separators_keep_only_their_user_keys() {
        let mut idx = Index::default();
        // Block `i` ends at "k" 2i 0x10; the next starts at "k" 2i+2 (shortened to "k" 2i+1),
        // or at "k" 2i+1 for every tenth (nothing fits between: the whole key is kept).
        for i in 0..100u8 {
            let last = key::make_internal_key(&[b'k', 2 * i, 0x10], 5, ValueKind::Put);
            let next = [b'k', 2 * i + if i % 10 == 0 { 1 } else { 2 }];
            idx.push(&key::shortest_separator(&last, &key::make_internal_key(&next, 9, ValueKind::Put))).unwrap();
        }
        let shortened = idx.ends.iter().filter(|e| *e & HAS_TRAILER == 0).count();
        assert_eq!(shortened, 90);
        let user_bytes: usize = (0..idx.len()).map(|i| idx.separator(i).0.len()).sum();
        assert_eq!(idx.keys.len(), user_bytes + (idx.len() - shortened) * key::TRAILER_LEN);
        assert!(idx.push(b"short").is_none(), "a separator without a trailer is refused");
    }

    #[test]
    fn handles_pack_when_blocks_lie_back_to_back_and_stay_whole_otherwise() {
        let t = BLOCK_TRAILER_LEN as u64;
        let back_to_back = vec![
            BlockHandle { offset: 0, size: 100 },
            BlockHandle { offset: 100 + t, size: 0 },
            BlockHandle { offset: 100 + 2 * t, size: 4000 },
        ];
        let packed = Handles::new(back_to_back.clone());
        assert!(matches!(packed, Handles::Packed(ref s) if s.len() == 4));
        assert_eq!((0..3).map(|i| packed.get(i)).collect::<Vec<_>>(), back_to_back);

        let gap = vec![BlockHandle { offset: 0, size: 100 }, BlockHandle { offset: 200, size: 50 }];
        let huge = vec![BlockHandle { offset: (1 << 32) - 10, size: 100 }];
        for handles in [gap, huge] {
            let h = Handles::new(handles.clone());
            assert!(matches!(h, Handles::Full(_)));
            assert_eq!((0..handles.len()).map(|i| h.get(i)).collect::<Vec<_>>(), handles);
        }
        assert_eq!(Handles::new(Vec::new()).memory(), 0);
    }
}
