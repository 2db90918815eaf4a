//! The C `long double` of x86-64 (the x87 80-bit extended format), as redis-server computes
//! `INCRBYFLOAT` and `HINCRBYFLOAT` with it: `strtold` to read, one addition, `%.17Lf` to
//! print. Rust has no such type, and an `f64` or decimal stand-in answers differently at the
//! edges (`0 + 1.000000000000000005` is `1` in Redis; `1.7e308 + 1.7e308` is finite there), so
//! this module reproduces the format exactly: a 64-bit significand with an explicit integer
//! bit, exponents down to the subnormal `2^-16445` and up to `~1.19e4932`, every operation
//! rounded to nearest, ties to even, from the exact value (big integers for the rare inputs
//! whose exact value is long).

use num_bigint::{BigInt, BigUint, Sign};
use num_traits::{ToPrimitive, Zero};

/// Smallest exponent `k` of a value `sig · 2^k` (subnormals have `sig < 2^63` there).
const MIN_EXP: i64 = -16382 - 63;
/// Largest exponent `k` of a finite value.
const MAX_EXP: i64 = 16383 - 63;

/// A finite or infinite `long double` (never NaN: what would produce one is an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongDouble {
    /// `(-1)^neg · sig · 2^exp`; `sig` has its top bit set unless the value is subnormal or 0.
    Finite { neg: bool, sig: u64, exp: i64 },
    /// An infinity.
    Inf { neg: bool },
}

/// Why a string is not a `long double` for Redis (its `string2ld` fails).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotANumber;

impl LongDouble {
    const ZERO: LongDouble = LongDouble::Finite { neg: false, sig: 0, exp: 0 };

    /// Reads `s` as Redis's `string2ld` does: all of it must be one `strtold` number (decimal,
    /// hexadecimal `0x…p…`, `inf`/`infinity`), with no leading space; NaN, overflow and
    /// underflow to zero are refused.
    pub fn parse(s: &[u8]) -> Result<LongDouble, NotANumber> {
        if s.is_empty() || s.len() >= 5 * 1024 {
            return Err(NotANumber);
        }
        let (neg, body) = match s[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let lower = body.to_ascii_lowercase();
        if lower == b"inf" || lower == b"infinity" {
            return Ok(LongDouble::Inf { neg });
        }
        let exact = if lower.starts_with(b"0x") { parse_hex(&lower[2..]) } else { parse_decimal(&lower) }?;
        let value = exact.round(neg);
        match value {
            // strtold reports ERANGE for these, and string2ld refuses them.
            LongDouble::Inf { .. } => Err(NotANumber),
            LongDouble::Finite { sig: 0, .. } if !exact.num.is_zero() => Err(NotANumber),
            v => Ok(v),
        }
    }

    /// `self + other`, rounded; `None` for infinity minus infinity (NaN).
    pub fn checked_add(self, other: LongDouble) -> Option<LongDouble> {
        let (LongDouble::Finite { neg: na, sig: sa, exp: ea }, LongDouble::Finite { neg: nb, sig: sb, exp: eb }) =
            (self, other)
        else {
            return match (self, other) {
                (LongDouble::Inf { neg: a }, LongDouble::Inf { neg: b }) if a != b => None,
                (inf @ LongDouble::Inf { .. }, _) | (_, inf @ LongDouble::Inf { .. }) => Some(inf),
                _ => unreachable!("both finite is handled above"),
            };
        };
        if sa == 0 && sb == 0 {
            // -0 + -0 is -0; any other sum of zeros is +0.
            return Some(LongDouble::Finite { neg: na && nb, sig: 0, exp: 0 });
        }
        let low = if sa == 0 {
            eb
        } else if sb == 0 {
            ea
        } else {
            ea.min(eb)
        };
        let signed = |neg: bool, sig: u64, exp: i64| {
            let magnitude = if sig == 0 { BigUint::zero() } else { BigUint::from(sig) << (exp - low) as usize };
            BigInt::from_biguint(if neg { Sign::Minus } else { Sign::Plus }, magnitude)
        };
        let sum = signed(na, sa, ea) + signed(nb, sb, eb);
        if sum.is_zero() {
            return Some(LongDouble::ZERO);
        }
        let neg = sum.sign() == Sign::Minus;
        Some(Exact { num: sum.magnitude().clone(), den: BigUint::from(1u8), exp2: low }.round(neg))
    }

    /// True for an infinity.
    pub fn is_infinite(self) -> bool {
        matches!(self, LongDouble::Inf { .. })
    }

    /// Redis's "human" text of a long double: `%.17Lf`, trailing zeros and a trailing point
    /// removed, `-0` printed as `0`.
    pub fn to_human(self) -> String {
        let LongDouble::Finite { neg, sig, exp } = self else {
            return if matches!(self, LongDouble::Inf { neg: true }) { "-inf" } else { "inf" }.to_string();
        };
        // The value in units of 1e-17, rounded to nearest, ties to even (as glibc's printf).
        let scaled = BigUint::from(sig) * BigUint::from(10u64.pow(17));
        let units = if exp >= 0 {
            scaled << exp as usize
        } else {
            let shift = (-exp) as usize;
            let q = &scaled >> shift;
            let r = &scaled - (&q << shift);
            let half = BigUint::from(1u8) << (shift - 1);
            if r > half || (r == half && q.bit(0)) {
                q + 1u8
            } else {
                q
            }
        };
        let digits = format!("{units:0>18}");
        let (int, frac) = digits.split_at(digits.len() - 17);
        let frac = frac.trim_end_matches('0');
        let text = if frac.is_empty() { int.to_string() } else { format!("{int}.{frac}") };
        if neg && text != "0" {
            format!("-{text}")
        } else {
            text
        }
    }
}

/// An exact non-negative value `num / den · 2^exp2`.
#[derive(Debug)]
struct Exact {
    num: BigUint,
    den: BigUint,
    exp2: i64,
}

impl Exact {
    /// The nearest long double (ties to even), subnormal or infinite as the format dictates.
    fn round(&self, neg: bool) -> LongDouble {
        if self.num.is_zero() {
            return LongDouble::Finite { neg, sig: 0, exp: 0 };
        }
        // Aim for a 64-bit quotient: num · 2^(exp2 - k) / den in [2^63, 2^64).
        let bits = |v: &BigUint| v.bits() as i64;
        let mut k = (bits(&self.num) - bits(&self.den) + self.exp2 - 64).max(MIN_EXP);
        loop {
            let (q, r, d) = self.divide(k);
            if q.bits() > 64 {
                k += 1;
                continue;
            }
            if q.bits() < 64 && k > MIN_EXP {
                k -= 1;
                continue;
            }
            let twice = r << 1usize;
            let up = twice > d || (twice == d && q.bit(0));
            let mut sig = q.to_u64().expect("at most 64 bits") as u128 + u128::from(up);
            let mut exp = k;
            if sig == 1 << 64 {
                sig >>= 1;
                exp += 1;
            }
            if exp > MAX_EXP {
                return LongDouble::Inf { neg };
            }
            return LongDouble::Finite { neg, sig: sig as u64, exp: if sig == 0 { 0 } else { exp } };
        }
    }

    /// Quotient, remainder and divisor of `num · 2^(exp2 - k) / den`.
    fn divide(&self, k: i64) -> (BigUint, BigUint, BigUint) {
        let shift = self.exp2 - k;
        let (n, d) = if shift >= 0 {
            (&self.num << shift as usize, self.den.clone())
        } else {
            (self.num.clone(), &self.den << (-shift) as usize)
        };
        let q = &n / &d;
        let r = n - &q * &d;
        (q, r, d)
    }
}

/// Decimal digits with an optional point and exponent (`12.5e-3`); `body` has no sign.
fn parse_decimal(body: &[u8]) -> Result<Exact, NotANumber> {
    let (mantissa, exp) = match body.iter().position(|&b| b == b'e') {
        Some(i) => (&body[..i], parse_exponent(&body[i + 1..])?),
        None => (body, 0),
    };
    let (digits, frac_len) = mantissa_digits(mantissa, |b| b.is_ascii_digit())?;
    // Past these the value is certainly out of range (or zero); the exponent is then only
    // compared, never raised to.
    let magnitude = digits.len() as i64 - frac_len + i64::from(exp);
    let digits = digits.iter().skip_while(|&&d| d == b'0').copied().collect::<Vec<u8>>();
    if digits.is_empty() {
        return Ok(Exact { num: BigUint::zero(), den: BigUint::from(1u8), exp2: 0 });
    }
    if magnitude > 5000 {
        return Ok(Exact { num: BigUint::from(1u8), den: BigUint::from(1u8), exp2: MAX_EXP + 128 });
    }
    if magnitude < -5000 {
        return Ok(Exact { num: BigUint::from(1u8), den: BigUint::from(1u8), exp2: MIN_EXP - 128 });
    }
    let num = BigUint::parse_bytes(&digits, 10).ok_or(NotANumber)?;
    let ten = i64::from(exp) - frac_len;
    let pow = BigUint::from(10u8).pow(ten.unsigned_abs() as u32);
    Ok(if ten >= 0 {
        Exact { num: num * pow, den: BigUint::from(1u8), exp2: 0 }
    } else {
        Exact { num, den: pow, exp2: 0 }
    })
}

/// Hexadecimal digits with an optional point and binary exponent (`1.8p1`), after `0x`.
fn parse_hex(body: &[u8]) -> Result<Exact, NotANumber> {
    let (mantissa, exp) = match body.iter().position(|&b| b == b'p') {
        Some(i) => (&body[..i], parse_exponent(&body[i + 1..])?),
        None => (body, 0),
    };
    let (digits, frac_len) = mantissa_digits(mantissa, |b| b.is_ascii_hexdigit())?;
    let num = BigUint::parse_bytes(&digits, 16).ok_or(NotANumber)?;
    let exp2 = (i64::from(exp) - 4 * frac_len).clamp(MIN_EXP - 100_000, MAX_EXP + 100_000);
    Ok(Exact { num, den: BigUint::from(1u8), exp2 })
}

/// The digits of `int[.frac]` (at least one digit) and how many of them follow the point.
fn mantissa_digits(mantissa: &[u8], digit: impl Fn(u8) -> bool) -> Result<(Vec<u8>, i64), NotANumber> {
    let (int, frac) = match mantissa.iter().position(|&b| b == b'.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, &[][..]),
    };
    if (int.is_empty() && frac.is_empty()) || !int.iter().chain(frac).all(|&b| digit(b)) {
        return Err(NotANumber);
    }
    Ok(([int, frac].concat(), frac.len() as i64))
}

/// An exponent: optional sign, at least one digit (huge ones saturate).
fn parse_exponent(s: &[u8]) -> Result<i32, NotANumber> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(NotANumber);
    }
    let value = digits.iter().fold(0i32, |v, &d| v.saturating_mul(10).saturating_add(i32::from(d - b'0')));
    Ok(if neg { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incr(a: &str, b: &str) -> Option<String> {
        let sum = LongDouble::parse(a.as_bytes()).ok()?.checked_add(LongDouble::parse(b.as_bytes()).ok()?)?;
        (!sum.is_infinite()).then(|| sum.to_human())
    }

    /// Answers of redis-server 7.0 on x86-64 (INCRBYFLOAT), checked side by side.
    #[test]
    fn sums_print_as_redis_prints_them() {
        assert_eq!(incr("10.50", "0.1").unwrap(), "10.6");
        assert_eq!(incr("10.6", "-5").unwrap(), "5.6");
        assert_eq!(incr("5.0e3", "2.0e2").unwrap(), "5200");
        assert_eq!(incr("0.1", "0.2").unwrap(), "0.3");
        assert_eq!(incr("0", "0").unwrap(), "0");
        assert_eq!(incr("1", "-1.5").unwrap(), "-0.5");
        assert_eq!(incr("3", "1e-20").unwrap(), "3");
        assert_eq!(incr("0", "1.000000000000000005").unwrap(), "1");
        assert_eq!(incr("0", "0.024390243902439025").unwrap(), "0.02439024390243902");
        assert_eq!(incr("0.02439024390243902", "-0.024390243902439025").unwrap(), "0", "no negative zero");
        assert!(incr("1.7e308", "1.7e308").unwrap().starts_with("3400000000000000000062735560503951935905"));
        assert!(incr("1e300", "1").unwrap().starts_with("1000000000000000000008997324079559193870"));
        assert!(incr("1e4000", "1").unwrap().starts_with("999999999999999999996546387309"));
        assert_eq!(incr("0", "1e-4940").unwrap(), "0");
        assert_eq!(incr("0x10", "1").unwrap(), "17");
        assert_eq!(incr("0x1.8p1", "0").unwrap(), "3");
        assert_eq!(incr("inf", "1"), None);
        assert_eq!(incr("inf", "-inf"), None);
    }

    #[test]
    fn strings_redis_refuses() {
        for bad in ["", " 1", "1 ", "abc", "nan", "1e", "1e+", ".", "-", "1\x002", "1e5000", "1e-5000", "0x", "1.2.3"] {
            assert_eq!(LongDouble::parse(bad.as_bytes()), Err(NotANumber), "{bad:?}");
        }
        for good in ["1.", ".5", "-0", "+7", "1E3", "INF", "-Infinity", "0X1P-2", "00012"] {
            assert!(LongDouble::parse(good.as_bytes()).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn rounding_is_to_nearest_even_at_64_bits() {
        // 2^64 + 1 is a tie between 2^64 and 2^64 + 2: the even significand wins.
        let v = LongDouble::parse(b"18446744073709551617").unwrap();
        assert_eq!(v, LongDouble::Finite { neg: false, sig: 1 << 63, exp: 1 });
        let v = LongDouble::parse(b"18446744073709551619").unwrap();
        assert_eq!(v, LongDouble::Finite { neg: false, sig: (1 << 63) + 2, exp: 1 });
        // The smallest subnormal and the largest finite value.
        assert_eq!(LongDouble::parse(b"0x1p-16445").unwrap(), LongDouble::Finite { neg: false, sig: 1, exp: MIN_EXP });
        assert!(LongDouble::parse(b"0x1p16384").is_err(), "overflows");
    }
}
