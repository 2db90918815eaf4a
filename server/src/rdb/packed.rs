//! The packed blobs Redis puts in RDB values: ziplists (RDB 7-9 lists, hashes and sorted
//! sets), listpacks (RDB 10) and intsets. Each is read into its entries, as text; anything
//! malformed (a length past the end, a header that disagrees with the blob, an unknown
//! encoding) is an error, never a short read.

use bytes::Bytes;

use super::codec::BadFormat;

fn le(bytes: &[u8]) -> u64 {
    bytes.iter().rev().fold(0, |acc, &b| (acc << 8) | u64::from(b))
}

/// A signed little-endian integer of `bytes.len()` bytes.
fn le_signed(bytes: &[u8]) -> i64 {
    let bits = 8 * bytes.len() as u32;
    let raw = le(bytes);
    if bits == 64 {
        raw as i64
    } else {
        ((raw << (64 - bits)) as i64) >> (64 - bits)
    }
}

fn slice(blob: &[u8], at: usize, n: usize) -> Result<&[u8], BadFormat> {
    blob.get(at..at.checked_add(n).ok_or(BadFormat)?).ok_or(BadFormat)
}

fn int(v: i64) -> Bytes {
    Bytes::from(v.to_string())
}

/// The entries of a ziplist.
pub fn ziplist(blob: &[u8]) -> Result<Vec<Bytes>, BadFormat> {
    if blob.len() < 11 || le(&blob[..4]) != blob.len() as u64 || blob[blob.len() - 1] != 0xff {
        return Err(BadFormat);
    }
    let mut out = Vec::new();
    let mut pos = 10;
    while blob[pos] != 0xff {
        pos += if blob[pos] < 254 { 1 } else { 5 };
        let enc = *blob.get(pos).ok_or(BadFormat)?;
        let (value, size) = match enc >> 6 {
            0 => {
                let n = usize::from(enc & 0x3f);
                (Bytes::copy_from_slice(slice(blob, pos + 1, n)?), 1 + n)
            }
            1 => {
                let n = (usize::from(enc & 0x3f) << 8) | usize::from(*blob.get(pos + 1).ok_or(BadFormat)?);
                (Bytes::copy_from_slice(slice(blob, pos + 2, n)?), 2 + n)
            }
            2 => {
                let n = u32::from_be_bytes(slice(blob, pos + 1, 4)?.try_into().map_err(|_| BadFormat)?) as usize;
                (Bytes::copy_from_slice(slice(blob, pos + 5, n)?), 5 + n)
            }
            _ => match enc {
                0xc0 => (int(le_signed(slice(blob, pos + 1, 2)?)), 3),
                0xd0 => (int(le_signed(slice(blob, pos + 1, 4)?)), 5),
                0xe0 => (int(le_signed(slice(blob, pos + 1, 8)?)), 9),
                0xf0 => (int(le_signed(slice(blob, pos + 1, 3)?)), 4),
                0xfe => (int(le_signed(slice(blob, pos + 1, 1)?)), 2),
                0xf1..=0xfd => (int(i64::from(enc & 0x0f) - 1), 1),
                _ => return Err(BadFormat),
            },
        };
        out.push(value);
        pos += size;
        if pos >= blob.len() {
            return Err(BadFormat);
        }
    }
    if pos != blob.len() - 1 {
        return Err(BadFormat);
    }
    Ok(out)
}

/// Bytes the back-length of a listpack entry of `len` bytes takes.
fn backlen_size(len: usize) -> usize {
    match len {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2097150 => 3,
        2097151..=268435454 => 4,
        _ => 5,
    }
}

/// The entries of a listpack.
pub fn listpack(blob: &[u8]) -> Result<Vec<Bytes>, BadFormat> {
    if blob.len() < 7 || le(&blob[..4]) != blob.len() as u64 || blob[blob.len() - 1] != 0xff {
        return Err(BadFormat);
    }
    let declared = le(&blob[4..6]) as usize;
    let mut out = Vec::with_capacity(declared.min(1 << 16));
    let mut pos = 6;
    while blob[pos] != 0xff {
        let b = blob[pos];
        let (value, size) = if b & 0x80 == 0 {
            (int(i64::from(b & 0x7f)), 1)
        } else if b & 0xc0 == 0x80 {
            let n = usize::from(b & 0x3f);
            (Bytes::copy_from_slice(slice(blob, pos + 1, n)?), 1 + n)
        } else if b & 0xe0 == 0xc0 {
            let v = (i64::from(b & 0x1f) << 8) | i64::from(*blob.get(pos + 1).ok_or(BadFormat)?);
            (int(if v >= 1 << 12 { v - (1 << 13) } else { v }), 2)
        } else if b & 0xf0 == 0xe0 {
            let n = (usize::from(b & 0x0f) << 8) | usize::from(*blob.get(pos + 1).ok_or(BadFormat)?);
            (Bytes::copy_from_slice(slice(blob, pos + 2, n)?), 2 + n)
        } else {
            match b {
                0xf0 => {
                    let n = le(slice(blob, pos + 1, 4)?) as usize;
                    (Bytes::copy_from_slice(slice(blob, pos + 5, n)?), 5 + n)
                }
                0xf1 => (int(le_signed(slice(blob, pos + 1, 2)?)), 3),
                0xf2 => (int(le_signed(slice(blob, pos + 1, 3)?)), 4),
                0xf3 => (int(le_signed(slice(blob, pos + 1, 4)?)), 5),
                0xf4 => (int(le_signed(slice(blob, pos + 1, 8)?)), 9),
                _ => return Err(BadFormat),
            }
        };
        out.push(value);
        pos += size + backlen_size(size);
        if pos >= blob.len() {
            return Err(BadFormat);
        }
    }
    // 65535 means "too many to count in the header".
    if pos != blob.len() - 1 || (declared != 65535 && declared != out.len()) {
        return Err(BadFormat);
    }
    Ok(out)
}

/// The members of an intset.
pub fn intset(blob: &[u8]) -> Result<Vec<Bytes>, BadFormat> {
    if blob.len() < 8 {
        return Err(BadFormat);
    }
    let width = le(&blob[..4]) as usize;
    let n = le(&blob[4..8]) as usize;
    if !matches!(width, 2 | 4 | 8) || n.checked_mul(width) != Some(blob.len() - 8) {
        return Err(BadFormat);
    }
    Ok(blob[8..].chunks_exact(width).map(|c| int(le_signed(c))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(v: Vec<Bytes>) -> Vec<String> {
        v.into_iter().map(|b| String::from_utf8_lossy(&b).into_owned()).collect()
    }

    #[test]
    fn listpack_of_every_encoding() {
        // Built by hand from listpack.c's layout: 7-bit uint 5, 13-bit int -2, "ab",
        // int16 1000, int32 -70000, int64 2^32, 24-bit 100000.
        let mut body: Vec<u8> = Vec::new();
        let mut entry = |e: &[u8]| {
            body.extend_from_slice(e);
            body.push(e.len() as u8);
        };
        entry(&[5]);
        entry(&[0xc0 | 0x1f, 0xfe]);
        entry(&[0x82, b'a', b'b']);
        entry(&[0xf1, 0xe8, 0x03]);
        entry(&[0xf3, 0x90, 0xee, 0xfe, 0xff]);
        entry(&[0xf4, 0, 0, 0, 0, 1, 0, 0, 0]);
        entry(&[0xf2, 0xa0, 0x86, 0x01]);
        let total = 6 + body.len() + 1;
        let mut lp = (total as u32).to_le_bytes().to_vec();
        lp.extend_from_slice(&7u16.to_le_bytes());
        lp.extend_from_slice(&body);
        lp.push(0xff);
        assert_eq!(texts(listpack(&lp).unwrap()), ["5", "-2", "ab", "1000", "-70000", "4294967296", "100000"]);
        let mut bad = lp.clone();
        bad[4] = 8;
        assert_eq!(listpack(&bad), Err(BadFormat), "header count disagrees");
        assert_eq!(listpack(&lp[..lp.len() - 1]), Err(BadFormat));
    }

    #[test]
    fn ziplist_of_every_encoding() {
        let entries: [&[u8]; 8] = [
            &[0x02, b'h', b'i'],
            &[0xfe, 0x85],
            &[0xc0, 0xe8, 0x03],
            &[0xd0, 0x90, 0xee, 0xfe, 0xff],
            &[0xe0, 0, 0, 0, 0, 1, 0, 0, 0],
            &[0xf0, 0xa0, 0x86, 0x01],
            &[0xf1],
            &[0xfd],
        ];
        let mut body = Vec::new();
        let mut prev = 0u8;
        for e in entries {
            body.push(prev);
            body.extend_from_slice(e);
            prev = (e.len() + 1) as u8;
        }
        let total = 10 + body.len() + 1;
        let mut zl = (total as u32).to_le_bytes().to_vec();
        zl.extend_from_slice(&0u32.to_le_bytes());
        zl.extend_from_slice(&8u16.to_le_bytes());
        zl.extend_from_slice(&body);
        zl.push(0xff);
        assert_eq!(texts(ziplist(&zl).unwrap()), ["hi", "-123", "1000", "-70000", "4294967296", "100000", "0", "12"]);
        assert_eq!(ziplist(&zl[..zl.len() - 2]), Err(BadFormat));
    }

    #[test]
    fn intsets() {
        let mut s = 2u32.to_le_bytes().to_vec();
        s.extend_from_slice(&2u32.to_le_bytes());
        s.extend_from_slice(&(-5i16).to_le_bytes());
        s.extend_from_slice(&300i16.to_le_bytes());
        assert_eq!(texts(intset(&s).unwrap()), ["-5", "300"]);
        assert_eq!(intset(&s[..10]), Err(BadFormat));
    }
}
