//! A cache-line-blocked bloom filter over user keys.
//!
//! Each key's probes all fall in one 64-byte line, so a lookup touches one cache line. The line
//! is chosen from the low 32 bits of the key's xxh3 hash; the probes walk the high 32 bits with a
//! multiplicative step (as RocksDB's FastLocalBloom does).
//!
//! ```text
//! filter = line[64 bytes] * num_lines | num_probes u8 | num_lines u32 LE
//! ```

use crate::coding::read_u32;

const LINE_BITS: u32 = 512;
const LINE_BYTES: usize = 64;

/// The hash a filter is built and probed with.
#[inline]
pub fn hash_key(user_key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(user_key)
}

/// Probes per key for a given budget of bits per key (about `ln 2 × bits`).
pub fn num_probes(bits_per_key: u32) -> u32 {
    ((bits_per_key * 69 + 50) / 100).clamp(1, 24)
}

/// Builds a filter for the given key hashes.
pub fn build(hashes: &[u64], bits_per_key: u32) -> Vec<u8> {
    build_from(hashes.iter().copied(), bits_per_key)
}

/// Builds a filter for the key hashes `hashes` yields.
pub fn build_from(hashes: impl ExactSizeIterator<Item = u64>, bits_per_key: u32) -> Vec<u8> {
    let num_lines = lines_for(hashes.len(), bits_per_key);
    build_with_lines(hashes, num_lines, bits_per_key)
}

/// A filter of `num_lines` lines holding `hashes`.
fn build_with_lines(hashes: impl Iterator<Item = u64>, num_lines: u32, bits_per_key: u32) -> Vec<u8> {
    let k = num_probes(bits_per_key);
    let mut out = empty_lines(num_lines);
    for h in hashes {
        set_bits(&mut out, num_lines, k, h);
    }
    with_trailer(out, k, num_lines)
}

/// `num_lines` zeroed lines, with room reserved for the trailer: pushing it onto a full vector
/// would reallocate the whole filter at twice its size.
fn empty_lines(num_lines: u32) -> Vec<u8> {
    let mut lines = Vec::with_capacity(num_lines as usize * LINE_BYTES + 5);
    lines.resize(num_lines as usize * LINE_BYTES, 0u8);
    lines
}

/// Appends the trailer (`probes u8 | num_lines u32 LE`) to a filter's lines.
fn with_trailer(mut lines: Vec<u8>, probes: u32, num_lines: u32) -> Vec<u8> {
    lines.push(probes as u8);
    lines.extend_from_slice(&num_lines.to_le_bytes());
    lines
}

/// Lines a filter of `keys` keys at `bits_per_key` has (at least one).
fn lines_for(keys: usize, bits_per_key: u32) -> u32 {
    let total_bits = (keys as u64).saturating_mul(u64::from(bits_per_key)).max(1);
    total_bits.div_ceil(u64::from(LINE_BITS)).min(u64::from(u32::MAX)) as u32
}

/// Sets the `k` bits of the key whose hash is `h` in a filter of `num_lines` lines.
#[inline]
fn set_bits(lines: &mut [u8], num_lines: u32, k: u32, h: u64) {
    let line = line_of(h, num_lines) * LINE_BYTES;
    let mut h2 = (h >> 32) as u32;
    for _ in 0..k {
        let bit = (h2 >> (32 - 9)) as usize;
        lines[line + bit / 8] |= 1 << (bit % 8);
        h2 = h2.wrapping_mul(0x9e37_79b9);
    }
}

/// A filter built as keys arrive, for a table that will hold at most a known number of keys
/// (a flush knows its memtable's entries; a compaction estimates each output's from its
/// inputs): it holds the filter's bits, about 1.25 bytes a key at 10 bits, where collecting
/// [`Hashes`] takes 8 bytes a key until the table is finished (9 MB for a 64 MiB table of
/// 120-byte entries, while a compaction runs).
///
/// It starts with the lines `capacity` keys need, rounded up to a multiple of
/// [`StreamingFilter::FOLD`]; a table that gets fewer keys is folded at the end. Folding is
/// exact: a key's line is `(h32 * L) >> 32`, so with `L/2` lines it is that line halved, and
/// OR-ing lines `2j` and `2j + 1` into line `j` gives the very filter `L/2` lines would have
/// built (each key's bits within its line depend only on the hash's high half). It folds while
/// the halved filter still has `bits_per_key` bits for each key: a table of fewer keys than
/// its capacity keeps between one and two times its budget of bits.
#[derive(Debug)]
pub struct StreamingFilter {
    lines: Vec<u8>,
    num_lines: u32,
    probes: u32,
    bits_per_key: u32,
    capacity: usize,
    keys: usize,
}

impl StreamingFilter {
    /// Lines are allocated in multiples of this, so a filter folds at least `log2(FOLD)` times.
    pub const FOLD: u32 = 64;

    /// An empty filter for up to `capacity` keys at `bits_per_key`.
    pub fn new(capacity: usize, bits_per_key: u32) -> Self {
        let mut num_lines = lines_for(capacity, bits_per_key);
        if num_lines > Self::FOLD {
            num_lines = num_lines.div_ceil(Self::FOLD).saturating_mul(Self::FOLD);
        }
        StreamingFilter {
            lines: empty_lines(num_lines),
            num_lines,
            probes: num_probes(bits_per_key),
            bits_per_key,
            capacity,
            keys: 0,
        }
    }

    /// Adds the key whose hash is `h` (keys past the capacity raise the false-positive rate).
    #[inline]
    pub fn add(&mut self, h: u64) {
        set_bits(&mut self.lines, self.num_lines, self.probes, h);
        self.keys += 1;
    }

    /// True once `capacity` keys were added.
    pub fn is_full(&self) -> bool {
        self.keys >= self.capacity
    }

    /// Bytes the bits take.
    pub fn memory(&self) -> usize {
        self.lines.capacity()
    }

    /// The filter, folded down to the fewest lines that keep `bits_per_key` bits a key.
    pub fn finish(mut self) -> Vec<u8> {
        let needed = self.keys as u64 * u64::from(self.bits_per_key);
        while self.num_lines.is_multiple_of(2) && needed <= u64::from(self.num_lines / 2) * u64::from(LINE_BITS) {
            let half = self.num_lines as usize / 2;
            for j in 0..half {
                for b in 0..LINE_BYTES {
                    self.lines[j * LINE_BYTES + b] =
                        self.lines[2 * j * LINE_BYTES + b] | self.lines[(2 * j + 1) * LINE_BYTES + b];
                }
            }
            self.num_lines /= 2;
            self.lines.truncate(half * LINE_BYTES);
        }
        with_trailer(self.lines, self.probes, self.num_lines)
    }
}

/// Key hashes collected for a table's filter, in fixed chunks of [`Hashes::CHUNK`]: a table of
/// a million keys grows by 64 KiB at a time, where one doubling vector held up to twice its
/// hashes (three times while it was copied into a larger allocation).
#[derive(Debug, Default)]
pub struct Hashes {
    chunks: Vec<Vec<u64>>,
    len: usize,
}

impl Hashes {
    /// Hashes per chunk.
    pub const CHUNK: usize = 8192;

    /// Appends one hash.
    pub fn push(&mut self, hash: u64) {
        match self.chunks.last_mut() {
            Some(c) if c.len() < Self::CHUNK => c.push(hash),
            _ => {
                let mut c = Vec::with_capacity(Self::CHUNK);
                c.push(hash);
                self.chunks.push(c);
            }
        }
        self.len += 1;
    }

    /// The hashes, in the order pushed.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        HashesIter { inner: self.chunks.iter().flatten().copied(), left: self.len }
    }
}

/// [`Hashes::iter`]: a flattened iterator that knows its length.
struct HashesIter<I> {
    inner: I,
    left: usize,
}

impl<I: Iterator<Item = u64>> Iterator for HashesIter<I> {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        let h = self.inner.next()?;
        self.left -= 1;
        Some(h)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<I: Iterator<Item = u64>> ExactSizeIterator for HashesIter<I> {}

/// A bloom filter that many threads add to at once (the memtable's): the same probe layout as
/// the table filter, with bits in atomic words.
#[derive(Debug)]
pub struct AtomicBloom {
    words: crate::pages::Pages<std::sync::atomic::AtomicU64>,
    num_lines: u32,
    probes: u32,
}

impl AtomicBloom {
    /// A filter for about `keys` keys at `bits_per_key`.
    pub fn new(keys: usize, bits_per_key: u32) -> Self {
        let num_lines = lines_for(keys, bits_per_key);
        let words = crate::pages::Pages::zeroed(num_lines as usize * 8, false);
        AtomicBloom { words, num_lines, probes: num_probes(bits_per_key) }
    }

    /// Bytes a filter for `keys` keys at `bits_per_key` takes.
    pub fn memory_for(keys: usize, bits_per_key: u32) -> usize {
        lines_for(keys, bits_per_key) as usize * LINE_BYTES
    }

    /// Bytes the filter takes.
    pub fn memory(&self) -> usize {
        self.words.len() * 8
    }

    /// Makes the filter's pages resident now (see [`crate::pages::Pages::populate`]).
    pub(crate) fn populate(&self) -> bool {
        self.words.populate()
    }

    /// Adds the key whose hash is `h`. Adds must not run concurrently with each other (the
    /// memtable's only writer is its write leader); lookups may. Each word of the key's line is
    /// written at most once, with a plain store rather than a locked read-modify-write.
    #[inline]
    pub fn add(&self, h: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let base = line_of(h, self.num_lines) * 8;
        let mut masks = [0u64; 8];
        let mut h2 = (h >> 32) as u32;
        for _ in 0..self.probes {
            let bit = (h2 >> (32 - 9)) as usize;
            masks[bit / 64] |= 1 << (bit % 64);
            h2 = h2.wrapping_mul(0x9e37_79b9);
        }
        for (word, mask) in self.words[base..base + 8].iter().zip(masks) {
            let old = word.load(Relaxed);
            if old | mask != old {
                word.store(old | mask, Relaxed);
            }
        }
    }

    /// Starts loading the line of the key whose hash is `h` into the CPU's cache, for an
    /// [`AtomicBloom::add`] or a lookup soon after.
    #[inline]
    pub fn prefetch(&self, h: u64) {
        crate::prefetch(self.words[line_of(h, self.num_lines) * 8].as_ptr());
    }

    /// False only if the key whose hash is `h` was certainly never added.
    #[inline]
    pub fn may_contain(&self, h: u64) -> bool {
        let base = line_of(h, self.num_lines) * 8;
        let mut h2 = (h >> 32) as u32;
        for _ in 0..self.probes {
            let bit = (h2 >> (32 - 9)) as usize;
            if self.words[base + bit / 64].load(std::sync::atomic::Ordering::Relaxed) & (1 << (bit % 64)) == 0 {
                return false;
            }
            h2 = h2.wrapping_mul(0x9e37_79b9);
        }
        true
    }
}

#[inline]
fn line_of(h: u64, num_lines: u32) -> usize {
    ((u64::from(h as u32) * u64::from(num_lines)) >> 32) as usize
}

/// Starts loading the line of `filter` that [`may_contain`] reads for the hash `h` into the
/// CPU's cache (a hint: nothing for a malformed filter).
#[inline]
pub fn prefetch(filter: &[u8], h: u64) {
    let n = filter.len();
    if n < 5 {
        return;
    }
    let num_lines = read_u32(filter, n - 4).unwrap_or(0);
    if num_lines == 0 || (num_lines as usize) * LINE_BYTES != n - 5 {
        return;
    }
    crate::prefetch(filter[line_of(h, num_lines) * LINE_BYTES..].as_ptr());
}

/// False only if the key whose hash is `h` was certainly not added. A malformed filter answers
/// `true` (it can only cost a read, never hide a key).
#[inline]
pub fn may_contain(filter: &[u8], h: u64) -> bool {
    let n = filter.len();
    if n < 5 {
        return true;
    }
    let k = u32::from(filter[n - 5]);
    let num_lines = read_u32(filter, n - 4).unwrap_or(0);
    if num_lines == 0 || (num_lines as usize) * LINE_BYTES != n - 5 {
        return true;
    }
    let line = line_of(h, num_lines) * LINE_BYTES;
    let mut h2 = (h >> 32) as u32;
    for _ in 0..k {
        let bit = (h2 >> (32 - 9)) as usize;
        if filter[line + bit / 8] & (1 << (bit % 8)) == 0 {
            return false;
        }
        h2 = h2.wrapping_mul(0x9e37_79b9);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(range: std::ops::Range<u64>) -> Vec<u64> {
        range.map(|i| hash_key(format!("key-{i}").as_bytes())).collect()
    }

    #[test]
    fn no_false_negatives() {
        let hs = keys(0..10_000);
        let f = build(&hs, 10);
        assert!(hs.iter().all(|&h| may_contain(&f, h)));
    }

    #[test]
    fn false_positive_rate_within_twice_theory() {
        let n = 100_000u64;
        let f = build(&keys(0..n), 10);
        let probes = keys(n..n + 200_000);
        let fp = probes.iter().filter(|&&h| may_contain(&f, h)).count() as f64 / probes.len() as f64;
        // Standard bloom filter theory: (1 - e^(-k n / m))^k.
        let k = f64::from(num_probes(10));
        let theory = (1.0 - (-k / 10.0).exp()).powf(k);
        assert!(fp < 2.0 * theory, "fp rate {fp:.5} vs theory {theory:.5}");
        assert!(fp > 0.0, "a filter that never says maybe is not a bloom filter");
    }

    #[test]
    fn atomic_filter_has_no_false_negatives_and_few_positives() {
        let f = AtomicBloom::new(10_000, 10);
        let hs = keys(0..10_000);
        for &h in &hs {
            f.add(h);
        }
        assert!(hs.iter().all(|&h| f.may_contain(h)));
        let fp = keys(10_000..60_000).iter().filter(|&&h| f.may_contain(h)).count();
        assert!(fp > 0 && fp < 50_000 / 50, "{fp} false positives of 50000");
    }

    #[test]
    fn malformed_filters_never_hide_keys() {
        for f in [vec![], vec![1, 2, 3], vec![0; 5], vec![7, 1, 0, 0, 0]] {
            assert!(may_contain(&f, 12345));
        }
        let empty = build(&[], 10);
        assert!(!may_contain(&empty, hash_key(b"x")), "an empty filter holds no key");
        assert_eq!(empty.len(), LINE_BYTES + 5);
    }

    #[test]
    fn chunked_hashes_build_the_filter_a_slice_builds() {
        let hs = keys(0..(3 * Hashes::CHUNK as u64 + 17));
        let mut chunked = Hashes::default();
        for &h in &hs {
            chunked.push(h);
        }
        assert_eq!(chunked.iter().len(), hs.len());
        assert!(chunked.iter().eq(hs.iter().copied()));
        let f = build_from(chunked.iter(), 10);
        assert_eq!(f, build(&hs, 10));
        assert_eq!(f.capacity(), f.len(), "the trailer fits the first allocation");
    }

    #[test]
    fn a_streaming_filter_folds_into_the_filter_its_final_lines_would_build() {
        for (capacity, n) in [
            (0, 0),
            (10, 3),
            (1000, 1000),
            (1000, 999),
            (1000, 10),
            (100_000, 100_000),
            (100_000, 30_001),
            (100_000, 1),
            (100_000, 0),
        ] {
            let hs = keys(0..n);
            let mut f = StreamingFilter::new(capacity, 10);
            assert!(
                f.memory()
                    <= (capacity * 10 / 8).next_multiple_of(StreamingFilter::FOLD as usize * LINE_BYTES)
                        + LINE_BYTES
                        + 5
            );
            for &h in &hs {
                assert!(!f.is_full());
                f.add(h);
            }
            assert_eq!(f.is_full(), n as usize >= capacity);
            let built = f.finish();
            let lines = read_u32(&built, built.len() - 4).unwrap();
            assert_eq!(built, build_with_lines(hs.iter().copied(), lines, 10), "capacity {capacity}, {n} keys");
            let (bits, needed) = (u64::from(lines) * u64::from(LINE_BITS), n * 10);
            assert!(bits >= needed, "kept the budget: {lines} lines for {n} keys");
            assert!(lines % 2 == 1 || bits / 2 < needed, "folded as far as the budget allows: {lines} lines, {n} keys");
            assert!(hs.iter().all(|&h| may_contain(&built, h)));
        }
    }

    #[test]
    fn a_full_streaming_filter_has_the_false_positive_rate_of_a_built_one() {
        let n = 100_000u64;
        let mut f = StreamingFilter::new(n as usize, 10);
        keys(0..n).into_iter().for_each(|h| f.add(h));
        let f = f.finish();
        let fp = |f: &[u8]| keys(n..n + 200_000).iter().filter(|&&h| may_contain(f, h)).count() as f64 / 200_000.0;
        let built = build(&keys(0..n), 10);
        assert!(fp(&f) <= fp(&built) * 1.1, "{} vs {}", fp(&f), fp(&built));
        assert!(f.len() <= built.len() + StreamingFilter::FOLD as usize * LINE_BYTES);
    }
}
