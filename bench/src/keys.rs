//! Keys and values generated the way RocksDB's db_bench generates them, so the two tools write
//! the same bytes.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A key of `key_size` bytes: the number's 8 bytes big-endian (or fewer, for short keys), then
/// '0' padding — db_bench's `GenerateKeyFromInt`.
pub fn make_key(n: u64, key_size: usize, out: &mut Vec<u8>) {
    out.clear();
    let bytes = key_size.min(8);
    for i in 0..bytes {
        out.push((n >> ((bytes - i - 1) * 8)) as u8);
    }
    out.resize(key_size, b'0');
}

/// Values that compress to about `ratio` of their size: db_bench's `RandomGenerator`, a 1 MiB
/// pool of 100-byte pieces, each `ratio × 100` random printable bytes repeated.
#[derive(Debug)]
pub struct ValueGenerator {
    data: Vec<u8>,
    pos: usize,
}

impl ValueGenerator {
    /// A pool for values of up to `max_len` bytes.
    pub fn new(ratio: f64, max_len: usize, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut data = Vec::with_capacity((1 << 20).max(max_len));
        while data.len() < (1 << 20).max(max_len) {
            let raw_len = ((100.0 * ratio) as usize).max(1);
            let raw: Vec<u8> = (0..raw_len).map(|_| b' ' + rng.random_range(0..95u8)).collect();
            let mut piece = Vec::with_capacity(100);
            while piece.len() < 100 {
                let take = raw.len().min(100 - piece.len());
                piece.extend_from_slice(&raw[..take]);
            }
            data.extend_from_slice(&piece);
        }
        ValueGenerator { data, pos: 0 }
    }

    /// The value number `i` of `len` bytes: the same bytes every time (for checking reads).
    pub fn at(&self, i: u64, len: usize) -> &[u8] {
        let span = (self.data.len() - len).max(1) as u64;
        let start = ((i * 7919) % span) as usize;
        &self.data[start..start + len]
    }

    /// The next value of `len` bytes.
    pub fn generate(&mut self, len: usize) -> &[u8] {
        if self.pos + len > self.data.len() {
            self.pos = 0;
        }
        self.pos += len;
        &self.data[self.pos - len..self.pos]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_numerically_and_pad() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        make_key(255, 16, &mut a);
        make_key(256, 16, &mut b);
        assert_eq!(a.len(), 16);
        assert_eq!(&a[..8], &[0, 0, 0, 0, 0, 0, 0, 255]);
        assert_eq!(&a[8..], b"00000000");
        assert!(a < b);
        make_key(0x0102, 4, &mut a);
        assert_eq!(a, [0, 0, 1, 2]);
    }

    #[test]
    fn values_compress_about_as_asked() {
        let mut g = ValueGenerator::new(0.5, 100, 1);
        let v = g.generate(100).to_vec();
        assert_eq!(v.len(), 100);
        // Each piece repeats 50 random bytes.
        assert_eq!(v[..50], v[50..]);
        let next = g.generate(100).to_vec();
        assert_ne!(v, next);
    }
}
