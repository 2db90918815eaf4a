//! RDB's primitive encodings: lengths, strings (raw, small integers, LZF), scores.
//!
//! ```text
//! length   00xxxxxx                  6 bits
//!          01xxxxxx xxxxxxxx         14 bits
//!          10000000 + u32 BE         32 bits
//!          10000001 + u64 BE         64 bits
//!          11xxxxxx                  a special string encoding (below)
//! string   length + bytes
//!          11000000 i8 | 11000001 i16 LE | 11000010 i32 LE    an integer, as text
//!          11000011 + compressed length + length + LZF bytes
//! score    (ZSET)   u8 length + ASCII, or 253 NaN, 254 +inf, 255 -inf
//!          (ZSET_2) f64 LE
//! ```

use bytes::Bytes;

use super::lzf;

/// Why a payload could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadFormat;

/// A cursor over RDB bytes.
#[derive(Debug)]
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

/// A length, or the special string encoding that stands in its place.
enum Len {
    Plain(u64),
    Encoded(u8),
}

impl<'a> Reader<'a> {
    /// A reader at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], BadFormat> {
        let end = self.pos.checked_add(n).ok_or(BadFormat)?;
        let out = self.data.get(self.pos..end).ok_or(BadFormat)?;
        self.pos = end;
        Ok(out)
    }

    /// One byte.
    pub fn u8(&mut self) -> Result<u8, BadFormat> {
        Ok(self.take(1)?[0])
    }

    fn len_or_encoding(&mut self) -> Result<Len, BadFormat> {
        let b = self.u8()?;
        Ok(match b >> 6 {
            0 => Len::Plain(u64::from(b & 0x3f)),
            1 => Len::Plain((u64::from(b & 0x3f) << 8) | u64::from(self.u8()?)),
            3 => Len::Encoded(b & 0x3f),
            _ => match b {
                0x80 => Len::Plain(u64::from(u32::from_be_bytes(self.take(4)?.try_into().map_err(|_| BadFormat)?))),
                0x81 => Len::Plain(u64::from_be_bytes(self.take(8)?.try_into().map_err(|_| BadFormat)?)),
                _ => return Err(BadFormat),
            },
        })
    }

    /// A length.
    pub fn length(&mut self) -> Result<u64, BadFormat> {
        match self.len_or_encoding()? {
            Len::Plain(n) => Ok(n),
            Len::Encoded(_) => Err(BadFormat),
        }
    }

    /// A count of things that each take at least one byte: no larger than what is left.
    pub fn count(&mut self) -> Result<usize, BadFormat> {
        let n = self.length()?;
        if n > self.remaining() as u64 {
            return Err(BadFormat);
        }
        Ok(n as usize)
    }

    /// A string in any of its encodings.
    pub fn string(&mut self) -> Result<Bytes, BadFormat> {
        match self.len_or_encoding()? {
            Len::Plain(n) => Ok(Bytes::copy_from_slice(self.take(usize::try_from(n).map_err(|_| BadFormat)?)?)),
            Len::Encoded(0) => Ok(Bytes::from((self.u8()? as i8).to_string())),
            Len::Encoded(1) => {
                Ok(Bytes::from(i16::from_le_bytes(self.take(2)?.try_into().map_err(|_| BadFormat)?).to_string()))
            }
            Len::Encoded(2) => {
                Ok(Bytes::from(i32::from_le_bytes(self.take(4)?.try_into().map_err(|_| BadFormat)?).to_string()))
            }
            Len::Encoded(3) => {
                let clen = usize::try_from(self.length()?).map_err(|_| BadFormat)?;
                let len = usize::try_from(self.length()?).map_err(|_| BadFormat)?;
                // Two input bytes expand to at most 264: a larger claim is a lie (and would
                // reserve memory for it).
                if len > clen.saturating_mul(133) {
                    return Err(BadFormat);
                }
                let packed = self.take(clen)?;
                lzf::decompress(packed, len).map(Bytes::from).ok_or(BadFormat)
            }
            Len::Encoded(_) => Err(BadFormat),
        }
    }

    /// A score in the old text form (RDB_TYPE_ZSET).
    pub fn text_double(&mut self) -> Result<f64, BadFormat> {
        match self.u8()? {
            253 => Ok(f64::NAN),
            254 => Ok(f64::INFINITY),
            255 => Ok(f64::NEG_INFINITY),
            n => {
                let text = std::str::from_utf8(self.take(usize::from(n))?).map_err(|_| BadFormat)?;
                text.trim().parse().map_err(|_| BadFormat)
            }
        }
    }

    /// A score in binary form (RDB_TYPE_ZSET_2).
    pub fn binary_double(&mut self) -> Result<f64, BadFormat> {
        Ok(f64::from_le_bytes(self.take(8)?.try_into().map_err(|_| BadFormat)?))
    }
}

/// Appends a length.
pub fn put_len(out: &mut Vec<u8>, n: u64) {
    if n < 64 {
        out.push(n as u8);
    } else if n < 16384 {
        out.push(0x40 | (n >> 8) as u8);
        out.push((n & 0xff) as u8);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// Appends a string, as a small integer when it is the canonical text of one (as Redis does).
pub fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() <= 11 {
        if let Some(v) = crate::resp::parse_int(s).filter(|v| v.to_string().as_bytes() == s) {
            if let Ok(v) = i8::try_from(v) {
                out.extend_from_slice(&[0xc0, v as u8]);
                return;
            }
            if let Ok(v) = i16::try_from(v) {
                out.push(0xc1);
                out.extend_from_slice(&v.to_le_bytes());
                return;
            }
            if let Ok(v) = i32::try_from(v) {
                out.push(0xc2);
                out.extend_from_slice(&v.to_le_bytes());
                return;
            }
        }
    }
    put_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_and_strings_round_trip() {
        for n in [0u64, 63, 64, 16383, 16384, u64::from(u32::MAX), u64::from(u32::MAX) + 1] {
            let mut out = Vec::new();
            put_len(&mut out, n);
            assert_eq!(Reader::new(&out).length().unwrap(), n);
        }
        for s in [&b""[..], b"0", b"-128", b"127", b"300", b"-40000", b"2147483647", b"2147483648", b"007", b"abc"] {
            let mut out = Vec::new();
            put_string(&mut out, s);
            assert_eq!(&Reader::new(&out).string().unwrap()[..], s);
        }
        let mut out = Vec::new();
        put_string(&mut out, b"-128");
        assert_eq!(out, [0xc0, 0x80], "small integers take their compact form");
        assert_eq!(&Reader::new(&[0xc3, 4, 3, 0x02, b'a', b'b', b'c']).string().unwrap()[..], b"abc");
        assert_eq!(Reader::new(&[0xc3, 4, 4, 0x02, b'a', b'b', b'c']).string(), Err(BadFormat), "lengths disagree");
        assert_eq!(Reader::new(&[0x05, b'a']).string(), Err(BadFormat), "truncated");
    }
}
