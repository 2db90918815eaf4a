//! Redis memory units: `1k` = 1000, `1kb` = 1024, `1m`, `1mb`, `1g`, `1gb`, case-insensitive.

/// Parses a memory amount; `None` if malformed or overflowing.
pub fn parse_memory(v: &str) -> Option<u64> {
    let lower = v.trim().to_ascii_lowercase();
    let digits_end = lower.find(|c: char| !c.is_ascii_digit()).unwrap_or(lower.len());
    let (num, unit) = lower.split_at(digits_end);
    let n: u64 = num.parse().ok()?;
    let mul: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1_000_000,
        "mb" => 1 << 20,
        "g" => 1_000_000_000,
        "gb" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mul)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_as_redis_reads_them() {
        assert_eq!(parse_memory("100"), Some(100));
        assert_eq!(parse_memory("1k"), Some(1000));
        assert_eq!(parse_memory("1KB"), Some(1024));
        assert_eq!(parse_memory("512mb"), Some(512 << 20));
        assert_eq!(parse_memory("2g"), Some(2_000_000_000));
        assert_eq!(parse_memory("1gb"), Some(1 << 30));
        for bad in ["", "mb", "1.5mb", "-1", "1tb", "99999999999999999999"] {
            assert_eq!(parse_memory(bad), None, "{bad}");
        }
    }
}
