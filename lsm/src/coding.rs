//! Little-endian fixed-width integers, LEB128 varints and checksums.
//!
//! Decoders return `None` on short or malformed input; callers turn that into a
//! [`crate::Error::Corruption`] carrying the file and offset, so no bad byte ever panics.

/// The longest LEB128 varint of a `u64`.
pub const MAX_VARINT_LEN: usize = 10;

/// Appends `v` as a LEB128 varint.
#[inline]
pub fn put_varint(dst: &mut Vec<u8>, v: u64) {
    let mut buf = [0u8; MAX_VARINT_LEN];
    let n = encode_varint(&mut buf, v);
    dst.extend_from_slice(&buf[..n]);
}

/// Writes `v` as a LEB128 varint (7 bits a byte, low first, high bit: more follow) at the front
/// of `dst`: the bytes written.
#[inline]
pub fn encode_varint(dst: &mut [u8; MAX_VARINT_LEN], mut v: u64) -> usize {
    let mut i = 0;
    while v >= 0x80 {
        dst[i] = (v as u8) | 0x80;
        v >>= 7;
        i += 1;
    }
    dst[i] = v as u8;
    i + 1
}

/// Decodes a varint from the front of `src`, returning the value and the bytes consumed.
#[inline]
pub fn get_varint(src: &[u8]) -> Option<(u64, usize)> {
    // Lengths in blocks are nearly always below 128: one byte.
    match src.first() {
        Some(&b) if b < 0x80 => return Some((u64::from(b), 1)),
        None => return None,
        _ => {}
    }
    let mut v: u64 = 0;
    for (i, &b) in src.iter().enumerate().take(10) {
        let part = u64::from(b & 0x7f);
        if i == 9 && b > 1 {
            return None; // would overflow 64 bits
        }
        v |= part << (7 * i);
        if b < 0x80 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Decodes a varint that must fit in `u32`.
#[inline]
pub fn get_varint32(src: &[u8]) -> Option<(u32, usize)> {
    let (v, n) = get_varint(src)?;
    Some((u32::try_from(v).ok()?, n))
}

/// Reads a little-endian `u32` at `at`.
#[inline]
pub fn read_u32(src: &[u8], at: usize) -> Option<u32> {
    let b = src.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

/// Reads a little-endian `u64` at `at`.
#[inline]
pub fn read_u64(src: &[u8], at: usize) -> Option<u64> {
    let b = src.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// A cursor that decodes fields one after another from a byte slice.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Starts reading at the front of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }
    /// True when every byte has been consumed.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }
    /// Next varint.
    pub fn varint(&mut self) -> Option<u64> {
        let (v, n) = get_varint(self.buf.get(self.pos..)?)?;
        self.pos += n;
        Some(v)
    }
    /// Next single byte.
    pub fn u8(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }
    /// Next `n` raw bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    /// A varint length followed by that many bytes.
    pub fn length_prefixed(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.varint()?).ok()?;
        self.bytes(n)
    }
}

/// Appends a varint length and then `bytes`.
pub fn put_length_prefixed(dst: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(dst, bytes.len() as u64);
    dst.extend_from_slice(bytes);
}

/// The checksum used by every on-disk structure: the low 32 bits of xxh3-64 of `data`, seeded
/// with the record or block type (one-shot hashing; the streaming hasher cost 8 % of a read).
#[inline]
pub fn checksum(kind: u8, data: &[u8]) -> u32 {
    xxhash_rust::xxh3::xxh3_64_with_seed(data, u64::from(kind)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip_at_boundaries() {
        let values = [0u64, 1, 127, 128, 255, 300, 16_383, 16_384, u32::MAX as u64, u64::MAX - 1, u64::MAX];
        for &v in &values {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            assert!(buf.len() <= 10, "len of {v}");
            assert_eq!(get_varint(&buf), Some((v, buf.len())), "value {v}");
            // Every strict prefix is incomplete, never a wrong value.
            for cut in 0..buf.len() {
                assert_eq!(get_varint(&buf[..cut]), None);
            }
        }
    }

    #[test]
    fn varint_rejects_overflow_and_overlong() {
        assert_eq!(get_varint(&[0xff; 10]), None);
        assert_eq!(get_varint(&[0x80; 11]), None);
        assert_eq!(get_varint32(&[0xff, 0xff, 0xff, 0xff, 0x10]), None);
        assert_eq!(get_varint32(&[0xff, 0xff, 0xff, 0xff, 0x0f]), Some((u32::MAX, 5)));
    }

    #[test]
    fn reader_stops_at_end_without_panicking() {
        let mut buf = Vec::new();
        put_length_prefixed(&mut buf, b"hello");
        buf.push(7);
        let mut r = Reader::new(&buf);
        assert_eq!(r.length_prefixed(), Some(&b"hello"[..]));
        assert_eq!(r.u8(), Some(7));
        assert!(r.is_empty());
        assert_eq!(r.u8(), None);
        assert_eq!(r.varint(), None);
        assert_eq!(read_u32(&buf, 4), None);
        assert_eq!(read_u64(&[1, 0, 0, 0, 0, 0, 0, 0], 0), Some(1));
        let mut bad = Reader::new(&[10, b'a']);
        assert_eq!(bad.length_prefixed(), None);
    }

    #[test]
    fn checksum_covers_type_and_data() {
        assert_ne!(checksum(1, b"abc"), checksum(2, b"abc"));
        assert_ne!(checksum(1, b"abc"), checksum(1, b"abd"));
        assert_eq!(checksum(1, b"abc"), checksum(1, b"abc"));
    }
}
