//! BITFIELD and BITFIELD_RO: integers of 1 to 64 bits (unsigned up to 63) at any bit offset
//! of a string, with Redis's overflow rules (WRAP, SAT, FAIL).

use bytes::Bytes;

use super::bitmaps::bit_offset;
use super::strings::{done_event, string_edit};
use super::{engine_error, parse_i64, spec, CommandSpec, Session, ONE_KEY};
use crate::resp::Reply;
use crate::services::notifications::STRING;

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("bitfield", -2, &["write", "denyoom"], ONE_KEY, bitfield),
    spec("bitfield_ro", -2, &["readonly", "fast"], ONE_KEY, bitfield_ro),
];

const BAD_TYPE: &str =
    "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Get,
    Set,
    IncrBy,
}

/// One subcommand: what, where, how wide, and the argument of SET / INCRBY.
#[derive(Debug, Clone, Copy)]
struct Op {
    kind: OpKind,
    offset: u64,
    bits: u32,
    signed: bool,
    value: i64,
    overflow: Overflow,
}

/// `i<bits>` (1..=64) or `u<bits>` (1..=63).
fn field_type(arg: &[u8]) -> Result<(bool, u32), Reply> {
    let signed = match arg.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(Reply::error(BAD_TYPE)),
    };
    match parse_i64(&arg[1..]) {
        Some(bits) if bits >= 1 && bits <= if signed { 64 } else { 63 } => Ok((signed, bits as u32)),
        _ => Err(Reply::error(BAD_TYPE)),
    }
}

fn parse_ops(s: &Session, args: &[Bytes]) -> Result<Vec<Op>, Reply> {
    let mut ops = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < args.len() {
        let remaining = args.len() - j - 1;
        let kind = match args[j].to_ascii_lowercase().as_slice() {
            b"get" if remaining >= 2 => OpKind::Get,
            b"set" if remaining >= 3 => OpKind::Set,
            b"incrby" if remaining >= 3 => OpKind::IncrBy,
            b"overflow" if remaining >= 1 => {
                overflow = match args[j + 1].to_ascii_lowercase().as_slice() {
                    b"wrap" => Overflow::Wrap,
                    b"sat" => Overflow::Sat,
                    b"fail" => Overflow::Fail,
                    _ => return Err(Reply::error("ERR Invalid OVERFLOW type specified")),
                };
                j += 2;
                continue;
            }
            _ => return Err(Reply::error("ERR syntax error")),
        };
        let (signed, bits) = field_type(&args[j + 1])?;
        let offset = bit_offset(s, &args[j + 2], Some(bits))?;
        let value = if kind == OpKind::Get {
            0
        } else {
            parse_i64(&args[j + 3]).ok_or_else(|| Reply::error("ERR value is not an integer or out of range"))?
        };
        ops.push(Op { kind, offset, bits, signed, value, overflow });
        j += if kind == OpKind::Get { 3 } else { 4 };
    }
    Ok(ops)
}

/// The field at bit `within` (0..8) of a 9-byte window, as raw bits.
fn get_bits(window: &[u8; 9], within: u32, bits: u32) -> u64 {
    let mut w = [0u8; 16];
    w[7..].copy_from_slice(window);
    let x = u128::from_be_bytes(w);
    ((x >> (72 - within - bits)) & ((1u128 << bits) - 1)) as u64
}

/// Writes the low `bits` bits of `value` at bit `within` of a 9-byte window.
fn set_bits(window: &mut [u8; 9], within: u32, bits: u32, value: u64) {
    let mut w = [0u8; 16];
    w[7..].copy_from_slice(window);
    let mut x = u128::from_be_bytes(w);
    let shift = 72 - within - bits;
    let mask = ((1u128 << bits) - 1) << shift;
    x = (x & !mask) | ((u128::from(value) << shift) & mask);
    window.copy_from_slice(&x.to_be_bytes()[7..]);
}

fn sign_extend(raw: u64, bits: u32) -> i64 {
    if bits == 64 {
        raw as i64
    } else if raw & (1 << (bits - 1)) != 0 {
        (raw | (u64::MAX << bits)) as i64
    } else {
        raw as i64
    }
}

/// `value + incr` for an unsigned field of `bits`: `Ok` if it fits, else `Err` with what
/// WRAP or SAT make of it (Redis's `checkUnsignedBitfieldOverflow`).
fn unsigned_add(value: u64, incr: i64, bits: u32, overflow: Overflow) -> Result<u64, u64> {
    let max = (1u64 << bits) - 1;
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = (value as i64).wrapping_neg();
    let wrapped = || value.wrapping_add(incr as u64) & max;
    if value > max || (incr > 0 && incr > max_incr) {
        Err(if overflow == Overflow::Sat { max } else { wrapped() })
    } else if incr < 0 && incr < min_incr {
        Err(if overflow == Overflow::Sat { 0 } else { wrapped() })
    } else {
        Ok(value.wrapping_add(incr as u64))
    }
}

/// `value + incr` for a signed field of `bits` (Redis's `checkSignedBitfieldOverflow`).
fn signed_add(value: i64, incr: i64, bits: u32, overflow: Overflow) -> Result<i64, i64> {
    let max = if bits == 64 { i64::MAX } else { (1i64 << (bits - 1)) - 1 };
    let min = -max - 1;
    let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
    let min_incr = min.wrapping_sub(value);
    let wrapped = || {
        let c = (value as u64).wrapping_add(incr as u64);
        sign_extend(if bits == 64 { c } else { c & ((1u64 << bits) - 1) }, bits)
    };
    if value > max || (bits != 64 && incr > max_incr) || (value >= 0 && incr > 0 && incr > max_incr) {
        Err(if overflow == Overflow::Sat { max } else { wrapped() })
    } else if value < min || (bits != 64 && incr < min_incr) || (value < 0 && incr < 0 && incr < min_incr) {
        Err(if overflow == Overflow::Sat { min } else { wrapped() })
    } else {
        Ok(value.wrapping_add(incr))
    }
}

/// The raw bits of the field of `op` in the 9 bytes from its byte offset.
fn read_field(op: &Op, window: &[u8; 9]) -> u64 {
    get_bits(window, (op.offset & 7) as u32, op.bits)
}

/// Runs one SET / INCRBY on `window`: the reply (`None`: FAIL overflow) and whether the field
/// changed.
fn apply(op: &Op, window: &mut [u8; 9]) -> (Option<i64>, bool) {
    let within = (op.offset & 7) as u32;
    let raw = get_bits(window, within, op.bits);
    let (result, reply, new) = if op.signed {
        let old = sign_extend(raw, op.bits);
        let (base, incr) = if op.kind == OpKind::IncrBy { (old, op.value) } else { (op.value, 0) };
        let r = signed_add(base, incr, op.bits, op.overflow);
        let new = r.unwrap_or_else(|v| v);
        (r.is_ok(), if op.kind == OpKind::IncrBy { new } else { old }, new as u64)
    } else {
        let old = raw;
        let (base, incr) = if op.kind == OpKind::IncrBy { (old, op.value) } else { (op.value as u64, 0) };
        let r = unsigned_add(base, incr, op.bits, op.overflow);
        let new = r.unwrap_or_else(|v| v);
        (r.is_ok(), if op.kind == OpKind::IncrBy { new as i64 } else { old as i64 }, new)
    };
    if !result && op.overflow == Overflow::Fail {
        return (None, false);
    }
    set_bits(window, within, op.bits, new);
    (Some(reply), get_bits(window, within, op.bits) != raw)
}

fn bitfield(s: &mut Session, args: &[Bytes]) -> Reply {
    run(s, args, false)
}

fn bitfield_ro(s: &mut Session, args: &[Bytes]) -> Reply {
    run(s, args, true)
}

fn run(s: &mut Session, args: &[Bytes], read_only: bool) -> Reply {
    let ops = match parse_ops(s, args) {
        Ok(ops) => ops,
        Err(e) => return e,
    };
    let writes = ops.iter().any(|op| op.kind != OpKind::Get);
    if writes && read_only {
        return Reply::error("ERR BITFIELD_RO only supports the GET subcommand");
    }
    let storage = &s.state.storage;
    let _guard = writes.then(|| storage.lock(&s.exec, s.db, [&args[1][..]]));
    let mut edit = match string_edit(s, &args[1]) {
        Ok(e) => e,
        Err(e) => return e,
    };
    let created = edit.is_new();
    let before = edit.len();
    let mut replies = Vec::with_capacity(ops.len());
    let mut changes = 0;
    let result: lsm::Result<()> = (|| {
        if writes {
            // Like Redis, the string grows to the farthest bit any write addresses first.
            let last =
                ops.iter().filter(|op| op.kind != OpKind::Get).map(|op| op.offset + u64::from(op.bits) - 1).max();
            if let Some(last) = last {
                edit.extend_to((last >> 3) + 1)?;
            }
        }
        for op in &ops {
            let mut window = [0u8; 9];
            edit.read(op.offset >> 3, &mut window)?;
            if op.kind == OpKind::Get {
                let raw = read_field(op, &window);
                replies.push(Reply::Integer(if op.signed { sign_extend(raw, op.bits) } else { raw as i64 }));
                continue;
            }
            let (reply, changed) = apply(op, &mut window);
            match reply {
                Some(v) => {
                    let used = (((op.offset & 7) + u64::from(op.bits)).div_ceil(8)) as usize;
                    edit.write(op.offset >> 3, &window[..used])?;
                    if changed || created || before != edit.len() {
                        changes += 1;
                    }
                    replies.push(Reply::Integer(v));
                }
                None => replies.push(Reply::Null),
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        return engine_error(e);
    }
    if !writes || (changes == 0 && edit.len() == before && !created) {
        return Reply::Array(replies);
    }
    let mut b = lsm::WriteBatch::new();
    edit.finish(&mut b, &args[1]);
    let r = storage.write(&s.exec, b);
    if changes == 0 {
        // The string only grew: Redis sends no event for that.
        return r.map_or_else(engine_error, |_| Reply::Array(replies));
    }
    done_event(s, r, Reply::Array(replies), STRING, "setbit", &args[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip_at_every_alignment() {
        for within in 0..8 {
            for bits in [1, 5, 8, 13, 63, 64] {
                let mut w = [0xa5u8; 9];
                let value = 0x0123_4567_89ab_cdefu64 & if bits == 64 { u64::MAX } else { (1 << bits) - 1 };
                set_bits(&mut w, within, bits, value);
                assert_eq!(get_bits(&w, within, bits), value, "within {within} bits {bits}");
            }
        }
        let mut w = [0u8; 9];
        set_bits(&mut w, 0, 8, 0xff);
        assert_eq!(w[0], 0xff);
        assert_eq!(sign_extend(0xff, 8), -1);
        assert_eq!(sign_extend(0x7f, 8), 127);
    }

    #[test]
    fn overflow_rules_match_redis() {
        // u8: 250 + 10.
        assert_eq!(unsigned_add(250, 10, 8, Overflow::Wrap), Err(4));
        assert_eq!(unsigned_add(250, 10, 8, Overflow::Sat), Err(255));
        assert_eq!(unsigned_add(5, -10, 8, Overflow::Sat), Err(0));
        assert_eq!(unsigned_add(5, -10, 8, Overflow::Wrap), Err(251));
        assert_eq!(unsigned_add(5, 10, 8, Overflow::Wrap), Ok(15));
        // i8: 120 + 10, -120 - 10.
        assert_eq!(signed_add(120, 10, 8, Overflow::Wrap), Err(-126));
        assert_eq!(signed_add(120, 10, 8, Overflow::Sat), Err(127));
        assert_eq!(signed_add(-120, -10, 8, Overflow::Sat), Err(-128));
        assert_eq!(signed_add(-120, -10, 8, Overflow::Wrap), Err(126));
        assert_eq!(signed_add(i64::MAX, 1, 64, Overflow::Wrap), Err(i64::MIN));
        assert_eq!(signed_add(-5, 3, 64, Overflow::Fail), Ok(-2));
    }
}
