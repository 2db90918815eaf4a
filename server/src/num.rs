//! Numbers as Redis reads and prints them.
//!
//! `INCRBYFLOAT` and `HINCRBYFLOAT` compute in C `long double` and print with `%.17Lf`, trailing
//! zeros removed, so `10.5 + 0.1` answers `10.6` (an `f64` would print `10.59999999999999964`):
//! [`crate::long_double`] reproduces that arithmetic exactly.

use crate::long_double::LongDouble;

/// Appends the decimal digits of `v` (what `v.to_string()` gives, without `fmt`'s
/// machinery: IDs and counters formatted on hot reply paths).
pub fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[at..]);
}

/// Parses a float the way Redis's `string2ld` does: no surrounding spaces, decimal or exponent
/// notation, `inf`; NaN is rejected.
pub fn parse_float(arg: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(arg).ok()?;
    if s.is_empty() || s.len() > 5 * 1024 || s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    if s.ends_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    (!v.is_nan()).then_some(v)
}

/// `%.17Lf`-style text of an `f64`, trailing zeros removed: Redis's "human" long double
/// printing of values that are `f64` to begin with (GEOPOS coordinates).
pub fn human_double(v: f64) -> String {
    let s = format!("{v:.17}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// Why an increment failed, with Redis's error text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatError {
    /// The stored value or the increment is not a float.
    NotAFloat,
    /// The result would be NaN or infinite.
    NanOrInfinity,
}

impl FloatError {
    /// The error reply text.
    pub fn message(self) -> &'static str {
        match self {
            FloatError::NotAFloat => "ERR value is not a valid float",
            FloatError::NanOrInfinity => "ERR increment would produce NaN or Infinity",
        }
    }
}

/// `current + incr` as INCRBYFLOAT computes and prints it.
pub fn incr_by_float(current: &[u8], incr: &[u8]) -> Result<String, FloatError> {
    let (Ok(a), Ok(b)) = (LongDouble::parse(current), LongDouble::parse(incr)) else {
        return Err(FloatError::NotAFloat);
    };
    match a.checked_add(b) {
        Some(sum) if !sum.is_infinite() => Ok(sum.to_human()),
        _ => Err(FloatError::NanOrInfinity),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incr(a: &str, b: &str) -> Result<String, FloatError> {
        incr_by_float(a.as_bytes(), b.as_bytes())
    }

    #[test]
    fn push_u64_writes_what_to_string_writes() {
        for v in [0, 7, 10, 99, 1_000_000, u64::MAX - 1, u64::MAX] {
            let mut out = b"x".to_vec();
            push_u64(&mut out, v);
            assert_eq!(out, format!("x{v}").into_bytes());
        }
    }

    /// The sums themselves are `long_double`'s tests; here, which failure is which error.
    #[test]
    fn incrbyfloat_answers_and_errors_like_redis() {
        assert_eq!(incr("10.50", "0.1").unwrap(), "10.6");
        assert_eq!(incr("abc", "1"), Err(FloatError::NotAFloat));
        assert_eq!(incr("1", " 1"), Err(FloatError::NotAFloat));
        assert_eq!(incr("1", "nan"), Err(FloatError::NotAFloat));
        assert_eq!(incr("inf", "1"), Err(FloatError::NanOrInfinity));
        assert_eq!(incr("1e4932", "1e4932"), Err(FloatError::NanOrInfinity));
    }
}
