//! The CRC-64 Redis puts after DUMP payloads and RDB files: the "Jones" polynomial, reflected,
//! initial value 0, no final XOR (`crc64("123456789") = 0xe9c6d914c4b8d9ca`).

const POLY: u64 = 0x95ac9329ac4bc9b5; // 0xad93d23594c935a9, bit-reversed

static TABLE: std::sync::LazyLock<[u64; 256]> = std::sync::LazyLock::new(|| {
    let mut t = [0u64; 256];
    for (i, slot) in t.iter_mut().enumerate() {
        let mut c = i as u64;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
        }
        *slot = c;
    }
    t
});

/// Continues a CRC over `data`.
pub fn update(mut crc: u64, data: &[u8]) -> u64 {
    let t = &*TABLE;
    for &b in data {
        crc = t[((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

/// The CRC of `data`.
pub fn crc64(data: &[u8]) -> u64 {
    update(0, data)
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_redis_check_value() {
        assert_eq!(super::crc64(b"123456789"), 0xe9c6d914c4b8d9ca);
        assert_eq!(super::update(super::crc64(b"1234"), b"56789"), 0xe9c6d914c4b8d9ca);
    }
}
