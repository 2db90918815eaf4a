//! Numbers as Redis reads and prints them.
//!
//! `INCRBYFLOAT` and `HINCRBYFLOAT` compute in C `long double` and print with `%.17Lf`, trailing
//! zeros removed, so `10.5 + 0.1` answers `10.6` (an `f64` would print `10.59999999999999964`).
//! Rust has no 80-bit float; decimal arithmetic on `i128` reproduces those answers exactly for
//! every value that fits in 38 digits, and `f64` covers the rest.

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

/// A decimal `digits / 10^scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Decimal {
    digits: i128,
    scale: u32,
}

const MAX_SCALE: u32 = 36;

fn parse_decimal(s: &str) -> Option<Decimal> {
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i32>().ok()?),
        None => (s, 0),
    };
    let (neg, body) = match mantissa.as_bytes().first()? {
        b'-' => (true, &mantissa[1..]),
        b'+' => (false, &mantissa[1..]),
        _ => (false, mantissa),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if (int.is_empty() && frac.is_empty()) || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut digits: i128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        digits = digits.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
    }
    let mut scale = frac.len() as i64 - i64::from(exp);
    while scale < 0 {
        digits = digits.checked_mul(10)?;
        scale += 1;
    }
    while scale > i64::from(MAX_SCALE) {
        if digits % 10 != 0 {
            return None;
        }
        digits /= 10;
        scale -= 1;
    }
    Some(Decimal { digits: if neg { -digits } else { digits }, scale: scale as u32 })
}

fn add_decimal(a: Decimal, b: Decimal) -> Option<Decimal> {
    let scale = a.scale.max(b.scale);
    let up = |d: Decimal| d.digits.checked_mul(10i128.checked_pow(scale - d.scale)?);
    Some(Decimal { digits: up(a)?.checked_add(up(b)?)?, scale })
}

/// `%.17Lf` with trailing zeros (and a trailing point) removed.
fn format_decimal(d: Decimal) -> String {
    let mut digits = d.digits;
    let mut scale = d.scale;
    // Round half away from zero to 17 fractional digits, as printf does for exact halves closely enough.
    while scale > 17 {
        let rem = digits % 10;
        digits /= 10;
        if rem >= 5 {
            digits += 1;
        } else if rem <= -5 {
            digits -= 1;
        }
        scale -= 1;
    }
    let neg = digits < 0;
    let abs = digits.unsigned_abs().to_string();
    let scale = scale as usize;
    let (int, frac) = if abs.len() > scale {
        (abs[..abs.len() - scale].to_string(), abs[abs.len() - scale..].to_string())
    } else {
        ("0".to_string(), format!("{}{abs}", "0".repeat(scale - abs.len())))
    };
    let frac = frac.trim_end_matches('0');
    let sign = if neg { "-" } else { "" };
    if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    }
}

/// `%.17Lf`-style text of an `f64`, trailing zeros removed: Redis's "human" long double
/// (INCRBYFLOAT's fallback for huge magnitudes, GEOPOS coordinates).
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
    let (a, b) = (parse_float(current), parse_float(incr));
    let (Some(fa), Some(fb)) = (a, b) else { return Err(FloatError::NotAFloat) };
    let sum = fa + fb;
    if sum.is_nan() || sum.is_infinite() {
        return Err(FloatError::NanOrInfinity);
    }
    let exact = std::str::from_utf8(current)
        .ok()
        .and_then(parse_decimal)
        .zip(std::str::from_utf8(incr).ok().and_then(parse_decimal))
        .and_then(|(x, y)| add_decimal(x, y));
    Ok(exact.map_or_else(|| human_double(sum), format_decimal))
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

    #[test]
    fn incrbyfloat_prints_like_redis() {
        assert_eq!(incr("10.50", "0.1").unwrap(), "10.6");
        assert_eq!(incr("10.6", "-5").unwrap(), "5.6");
        assert_eq!(incr("5.0e3", "2.0e2").unwrap(), "5200");
        assert_eq!(incr("0.1", "0.2").unwrap(), "0.3");
        assert_eq!(incr("0", "0").unwrap(), "0");
        assert_eq!(incr("1", "-1.5").unwrap(), "-0.5");
        assert_eq!(incr("3", "1e-20").unwrap(), "3");
        assert_eq!(incr("0", "1.000000000000000005").unwrap(), "1.00000000000000001");
        assert_eq!(incr("1e300", "1").unwrap().len(), 301, "huge values fall back to f64");
        assert_eq!(incr("abc", "1"), Err(FloatError::NotAFloat));
        assert_eq!(incr("1", " 1"), Err(FloatError::NotAFloat));
        assert_eq!(incr("1", "nan"), Err(FloatError::NotAFloat));
        assert_eq!(incr("inf", "1"), Err(FloatError::NanOrInfinity));
        assert_eq!(incr("1.7e308", "1.7e308"), Err(FloatError::NanOrInfinity));
    }
}
