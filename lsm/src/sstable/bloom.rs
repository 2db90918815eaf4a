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
    let total_bits = (hashes.len() as u64 * u64::from(bits_per_key)).max(1);
    let num_lines = total_bits.div_ceil(u64::from(LINE_BITS)).min(u64::from(u32::MAX)) as u32;
    let k = num_probes(bits_per_key);
    let lines_len = num_lines as usize * LINE_BYTES;
    // The trailer's room is reserved up front: pushing it onto a full vector would reallocate
    // the whole filter at twice its size.
    let mut out = Vec::with_capacity(lines_len + 5);
    out.resize(lines_len, 0u8);
    for h in hashes {
        let line = line_of(h, num_lines) * LINE_BYTES;
        let mut h2 = (h >> 32) as u32;
        for _ in 0..k {
            let bit = (h2 >> (32 - 9)) as usize;
            out[line + bit / 8] |= 1 << (bit % 8);
            h2 = h2.wrapping_mul(0x9e37_79b9);
        }
    }
    out.push(k as u8);
    out.extend_from_slice(&num_lines.to_le_bytes());
    out
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
    words: Box<[std::sync::atomic::AtomicU64]>,
    num_lines: u32,
    probes: u32,
}

impl AtomicBloom {
    /// A filter for about `keys` keys at `bits_per_key`.
    pub fn new(keys: usize, bits_per_key: u32) -> Self {
        let num_lines = Self::lines_for(keys, bits_per_key);
        let words = (0..num_lines as usize * 8).map(|_| std::sync::atomic::AtomicU64::new(0)).collect();
        AtomicBloom { words, num_lines, probes: num_probes(bits_per_key) }
    }

    fn lines_for(keys: usize, bits_per_key: u32) -> u32 {
        let total_bits = (keys as u64 * u64::from(bits_per_key)).max(u64::from(LINE_BITS));
        total_bits.div_ceil(u64::from(LINE_BITS)).min(u64::from(u32::MAX)) as u32
    }

    /// Bytes a filter for `keys` keys at `bits_per_key` takes.
    pub fn memory_for(keys: usize, bits_per_key: u32) -> usize {
        Self::lines_for(keys, bits_per_key) as usize * LINE_BYTES
    }

    /// Bytes the filter takes.
    pub fn memory(&self) -> usize {
        self.words.len() * 8
    }

    /// Adds the key whose hash is `h`.
    #[inline]
    pub fn add(&self, h: u64) {
        let base = line_of(h, self.num_lines) * 8;
        let mut h2 = (h >> 32) as u32;
        for _ in 0..self.probes {
            let bit = (h2 >> (32 - 9)) as usize;
            self.words[base + bit / 64].fetch_or(1 << (bit % 64), std::sync::atomic::Ordering::Relaxed);
            h2 = h2.wrapping_mul(0x9e37_79b9);
        }
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
}
