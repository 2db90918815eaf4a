//! LZF, as Redis compresses long strings in RDB files and DUMP payloads (`lzf_d.c`'s format:
//! literal runs of up to 32 bytes, back references of 3 to 264 bytes within 8 KiB).

/// Decompresses `input` into exactly `len` bytes; `None` if it is not valid LZF for that length.
pub fn decompress(input: &[u8], len: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(len);
    let mut ip = 0;
    while ip < input.len() {
        let ctrl = usize::from(input[ip]);
        ip += 1;
        if ctrl < 32 {
            let run = ctrl + 1;
            let lit = input.get(ip..ip + run)?;
            if out.len() + run > len {
                return None;
            }
            out.extend_from_slice(lit);
            ip += run;
        } else {
            let mut n = ctrl >> 5;
            if n == 7 {
                n += usize::from(*input.get(ip)?);
                ip += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + usize::from(*input.get(ip)?) + 1;
            ip += 1;
            let n = n + 2;
            if back > out.len() || out.len() + n > len {
                return None;
            }
            let start = out.len() - back;
            for i in 0..n {
                out.push(out[start + i]);
            }
        }
    }
    (out.len() == len).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_back_references() {
        assert_eq!(decompress(&[0x02, b'a', b'b', b'c'], 3).unwrap(), b"abc");
        // A literal "a", then 7 bytes copied from one back (overlapping).
        assert_eq!(decompress(&[0x00, b'a', 0xa0, 0x00], 8).unwrap(), b"aaaaaaaa");
        // The long form: length 7 + 3 + 2.
        assert_eq!(decompress(&[0x00, b'a', 0xe0, 0x03, 0x00], 13).unwrap(), vec![b'a'; 13]);
        assert_eq!(decompress(&[0x00, b'a', 0xa0, 0x00], 9), None, "wrong length");
        assert_eq!(decompress(&[0x02, b'a', b'b'], 3), None, "truncated literal");
        assert_eq!(decompress(&[0x20, 0x05], 3), None, "reference before the start");
    }
}
