//! Bitmaps: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP (BITFIELD is in `bitfield`). A bitmap is a
//! string (bit 0 is the most significant bit of byte 0); these commands read and write only
//! the bytes they address, so a sparse bitmap costs what it stores (see `storage::strings`).

use std::ops::ControlFlow;

use bytes::Bytes;

use super::strings::{done_event, string_at, string_edit, string_meta_at};
use super::{engine_error, parse_i64, spec, CommandSpec, Session, ONE_KEY};
use crate::resp::Reply;
use crate::services::notifications::{GENERIC, STRING};
use crate::storage::{Chunk, Meta};

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("setbit", 4, &["write", "denyoom"], ONE_KEY, setbit),
    spec("getbit", 3, &["readonly", "fast"], ONE_KEY, getbit),
    spec("bitcount", -2, &["readonly"], ONE_KEY, bitcount),
    spec("bitpos", -3, &["readonly"], ONE_KEY, bitpos),
    spec("bitop", -4, &["write", "denyoom"], (2, -1, 1), bitop),
];

const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const BAD_OFFSET: &str = "ERR bit offset is not an integer or out of range";
const SYNTAX: &str = "ERR syntax error";

/// A bit offset argument; with `hash_bits`, `#n` means `n * bits` (BITFIELD). Offsets whose
/// byte lies past `proto-max-bulk-len` are refused, as Redis does.
pub(super) fn bit_offset(s: &Session, arg: &[u8], hash_bits: Option<u32>) -> Result<u64, Reply> {
    let (digits, times) = match (arg.first(), hash_bits) {
        (Some(b'#'), Some(bits)) => (&arg[1..], i64::from(bits)),
        _ => (arg, 1),
    };
    let offset = parse_i64(digits).and_then(|n| n.checked_mul(times)).ok_or_else(|| Reply::error(BAD_OFFSET))?;
    if offset < 0 || (offset as u64 >> 3) >= s.state.config().proto_max_bulk_len {
        return Err(Reply::error(BAD_OFFSET));
    }
    Ok(offset as u64)
}

fn setbit(s: &mut Session, args: &[Bytes]) -> Reply {
    let offset = match bit_offset(s, &args[2], None) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let on = match parse_i64(&args[3]) {
        Some(v @ (0 | 1)) => v as u8,
        _ => return Reply::error("ERR bit is not an integer or out of range"),
    };
    let storage = &s.state.storage;
    let _guard = storage.lock(&s.exec, s.db, [&args[1][..]]);
    let mut edit = match string_edit(s, &args[1]) {
        Ok(e) => e,
        Err(e) => return e,
    };
    let created = edit.is_new();
    let (byte, shift) = (offset >> 3, 7 - (offset & 7) as u8);
    let mut cell = [0u8];
    let r = edit.read(byte, &mut cell).and_then(|_| {
        let grows = byte >= edit.len();
        let old = (cell[0] >> shift) & 1;
        if created || grows || old != on {
            edit.write(byte, &[(cell[0] & !(1 << shift)) | (on << shift)])?;
            Ok((old, true))
        } else {
            Ok((old, false))
        }
    });
    match r {
        Ok((old, true)) => {
            let mut b = lsm::WriteBatch::new();
            edit.finish(&mut b, &args[1]);
            done_event(s, storage.write(&s.exec, b), Reply::Integer(i64::from(old)), STRING, "setbit", &args[1])
        }
        Ok((old, false)) => Reply::Integer(i64::from(old)),
        Err(e) => engine_error(e),
    }
}

fn getbit(s: &mut Session, args: &[Bytes]) -> Reply {
    let offset = match bit_offset(s, &args[2], None) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let meta = match string_meta_at(s, &args[1]) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::Integer(0),
        Err(e) => return e,
    };
    match s.state.storage.view(&s.exec, s.db).string_range(&meta, offset >> 3, (offset >> 3) + 1) {
        Ok(b) => Reply::Integer(b.first().map_or(0, |&byte| i64::from((byte >> (7 - (offset & 7))) & 1))),
        Err(e) => engine_error(e),
    }
}

/// A range of bits of a string, inclusive at both ends.
#[derive(Debug, Clone, Copy)]
struct BitRange {
    first: u64,
    last: u64,
}

/// The `start end [BYTE|BIT]` range of BITCOUNT / BITPOS over a string of `len` bytes, with
/// Redis's rules (negative indexes from the end, clamped); `Ok(None)` when empty.
/// `end` is `None` when not given (BITPOS: up to the end of the string).
fn bit_range(len: u64, start: &[u8], end: Option<&[u8]>, unit: Option<&[u8]>) -> Result<Option<BitRange>, Reply> {
    let start = parse_i64(start).ok_or_else(|| Reply::error(NOT_INTEGER))?;
    let is_bit = match unit {
        None => false,
        Some(u) if u.eq_ignore_ascii_case(b"bit") => true,
        Some(u) if u.eq_ignore_ascii_case(b"byte") => false,
        Some(_) => return Err(Reply::error(SYNTAX)),
    };
    let total = if is_bit { (len as i64).saturating_mul(8) } else { len as i64 };
    let end = match end {
        Some(e) => parse_i64(e).ok_or_else(|| Reply::error(NOT_INTEGER))?,
        None => total - 1,
    };
    let clamp = |i: i64| if i < 0 { (total + i).max(0) } else { i };
    let (start, end) = (clamp(start), clamp(end).min(total - 1));
    if start > end {
        return Ok(None);
    }
    let (start, end) = (start as u64, end as u64);
    Ok(Some(if is_bit {
        BitRange { first: start, last: end }
    } else {
        BitRange { first: start * 8, last: end * 8 + 7 }
    }))
}

/// The bits of byte `at` (of a string) that lie inside `range`, as a mask.
fn in_range_mask(range: BitRange, at: u64) -> u8 {
    let mut mask = 0xffu8;
    if at == range.first / 8 {
        mask &= 0xff >> (range.first % 8);
    }
    if at == range.last / 8 {
        mask &= 0xff << (7 - range.last % 8);
    }
    mask
}

fn bitcount(s: &mut Session, args: &[Bytes]) -> Reply {
    let meta = match string_meta_at(s, &args[1]) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::Integer(0),
        Err(e) => return e,
    };
    let len = meta.string_len();
    let range = match args.len() {
        2 if len == 0 => None,
        2 => Some(BitRange { first: 0, last: len * 8 - 1 }),
        4 | 5 => {
            // Both negative and in the wrong order: empty, whatever the length.
            if let (Some(a), Some(b)) = (parse_i64(&args[2]), parse_i64(&args[3])) {
                if a < 0 && b < 0 && a > b {
                    return Reply::Integer(0);
                }
            }
            match bit_range(len, &args[2], Some(&args[3]), args.get(4).map(|u| &u[..])) {
                Ok(r) => r,
                Err(e) => return e,
            }
        }
        _ => return Reply::error(SYNTAX),
    };
    let Some(range) = range else { return Reply::Integer(0) };
    let mut count = 0u64;
    let mut at = range.first / 8;
    let walk = s.state.storage.view(&s.exec, s.db).string_chunks(&meta, at, range.last / 8 + 1, |chunk| {
        match chunk {
            Chunk::Bytes(bytes) => {
                let (from, to) = (at, at + bytes.len() as u64);
                let (first_edge, last_edge) = (range.first / 8, range.last / 8);
                // The edge bytes count only their bits inside the range; the rest count whole.
                for edge in [first_edge, last_edge].into_iter().take(if first_edge == last_edge { 1 } else { 2 }) {
                    if (from..to).contains(&edge) {
                        count += u64::from((bytes[(edge - from) as usize] & in_range_mask(range, edge)).count_ones());
                    }
                }
                let (lo, hi) = (from.max(first_edge + 1), to.min(last_edge));
                if lo < hi {
                    count += popcount(&bytes[(lo - from) as usize..(hi - from) as usize]);
                }
                at = to;
            }
            Chunk::Zeros(n) => at += n,
        }
        ControlFlow::Continue(())
    });
    match walk {
        Ok(()) => Reply::Integer(count as i64),
        Err(e) => engine_error(e),
    }
}

/// Set bits in `bytes`, eight at a time: with the CPU's `popcnt` instruction where it has one
/// (a build for baseline x86-64 otherwise counts with shifts and masks, several times slower
/// on a BITCOUNT of a long bitmap).
fn popcount(bytes: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the CPU has the instruction the function is compiled to use (checked above).
        return unsafe { popcount_with_popcnt(bytes) };
    }
    popcount_words(bytes)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
fn popcount_with_popcnt(bytes: &[u8]) -> u64 {
    popcount_words(bytes)
}

#[inline(always)]
fn popcount_words(bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(8);
    let mut n: u64 =
        words.by_ref().map(|w| u64::from(u64::from_ne_bytes(w.try_into().unwrap_or_default()).count_ones())).sum();
    n += words.remainder().iter().map(|b| u64::from(b.count_ones())).sum::<u64>();
    n
}

fn bitpos(s: &mut Session, args: &[Bytes]) -> Reply {
    let bit = match parse_i64(&args[2]) {
        Some(b @ (0 | 1)) => b as u8,
        Some(_) => return Reply::error("ERR The bit argument must be 1 or 0."),
        None => return Reply::error(NOT_INTEGER),
    };
    let meta = match string_meta_at(s, &args[1]) {
        Ok(Some(m)) => m,
        // A missing key is an endless run of zero bits.
        Ok(None) => return Reply::Integer(if bit == 1 { -1 } else { 0 }),
        Err(e) => return e,
    };
    let len = meta.string_len();
    let end_given = args.len() >= 5;
    let range = match args.len() {
        3 if len == 0 => None,
        3 => Some(BitRange { first: 0, last: len * 8 - 1 }),
        4..=6 => match bit_range(len, &args[3], args.get(4).map(|e| &e[..]), args.get(5).map(|u| &u[..])) {
            Ok(r) => r,
            Err(e) => return e,
        },
        _ => return Reply::error(SYNTAX),
    };
    let Some(range) = range else { return Reply::Integer(-1) };
    let mut found = None;
    let mut at = range.first / 8;
    let walk = s.state.storage.view(&s.exec, s.db).string_chunks(&meta, at, range.last / 8 + 1, |chunk| {
        match chunk {
            Chunk::Bytes(bytes) => {
                for (i, &b) in bytes.iter().enumerate() {
                    let pos = at + i as u64;
                    let mask = in_range_mask(range, pos);
                    // Bits outside the range are made the opposite of the one looked for.
                    let v = if bit == 1 { b & mask } else { b | !mask };
                    let hit = if bit == 1 { v.leading_zeros() } else { v.leading_ones() };
                    if hit < 8 {
                        found = Some(pos * 8 + u64::from(hit));
                        return ControlFlow::Break(());
                    }
                }
                at += bytes.len() as u64;
            }
            Chunk::Zeros(n) => {
                if bit == 0 {
                    found = Some((at * 8).max(range.first));
                    return ControlFlow::Break(());
                }
                at += n;
            }
        }
        ControlFlow::Continue(())
    });
    if let Err(e) = walk {
        return engine_error(e);
    }
    Reply::Integer(match found {
        Some(p) => p as i64,
        // No clear bit in the string: the zero padding after it has one, unless the caller
        // bounded the range.
        None if bit == 0 && !end_given => range.last as i64 + 1,
        None => -1,
    })
}

fn bitop(s: &mut Session, args: &[Bytes]) -> Reply {
    #[derive(PartialEq)]
    enum Op {
        And,
        Or,
        Xor,
        Not,
    }
    let op = match args[1].to_ascii_lowercase().as_slice() {
        b"and" => Op::And,
        b"or" => Op::Or,
        b"xor" => Op::Xor,
        b"not" => Op::Not,
        _ => return Reply::error(SYNTAX),
    };
    if op == Op::Not && args.len() != 4 {
        return Reply::error("ERR BITOP NOT must be called with a single source key.");
    }
    let storage = &s.state.storage;
    let _guard = storage.lock(&s.exec, s.db, args[2..].iter().map(|k| &k[..]));
    let mut sources = Vec::with_capacity(args.len() - 3);
    for key in &args[3..] {
        match s.exec.as_read(|| string_at(s, key)) {
            Ok(m) => sources.push(m.map(|m| m.body).unwrap_or_default()),
            Err(e) => return e,
        }
    }
    let max = sources.iter().map(Bytes::len).max().unwrap_or(0);
    let mut b = lsm::WriteBatch::new();
    if max == 0 {
        return match storage.get(&s.exec, s.db, &args[2]) {
            Ok(Some(_)) => {
                storage.delete_into(&mut b, s.db, &args[2]);
                done_event(s, storage.write(&s.exec, b), Reply::Integer(0), GENERIC, "del", &args[2])
            }
            Ok(None) => Reply::Integer(0),
            Err(e) => engine_error(e),
        };
    }
    let mut out = vec![0u8; max];
    let byte = |src: &Bytes, i: usize| src.get(i).copied().unwrap_or(0);
    match op {
        Op::Not => out.iter_mut().zip(sources[0].iter()).for_each(|(o, &v)| *o = !v),
        _ => {
            out[..sources[0].len()].copy_from_slice(&sources[0]);
            for src in &sources[1..] {
                for (i, o) in out.iter_mut().enumerate() {
                    let v = byte(src, i);
                    match op {
                        Op::And => *o &= v,
                        Op::Or => *o |= v,
                        _ => *o ^= v,
                    }
                }
            }
        }
    }
    storage.put_into(&mut b, s.db, &args[2], &Meta::string(Bytes::from(out), 0));
    done_event(s, storage.write(&s.exec, b), Reply::Integer(max as i64), STRING, "set", &args[2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_select_the_bits_in_range() {
        let r = BitRange { first: 3, last: 12 };
        assert_eq!(in_range_mask(r, 0), 0b0001_1111);
        assert_eq!(in_range_mask(r, 1), 0b1111_1000);
        let one = BitRange { first: 9, last: 10 };
        assert_eq!(in_range_mask(one, 1), 0b0110_0000);
        assert_eq!(in_range_mask(BitRange { first: 0, last: 23 }, 1), 0xff);
    }

    #[test]
    fn ranges_follow_redis_rules() {
        let r = |len, a: &str, b: Option<&str>, u: Option<&str>| {
            bit_range(len, a.as_bytes(), b.map(str::as_bytes), u.map(str::as_bytes)).unwrap().map(|r| (r.first, r.last))
        };
        assert_eq!(r(4, "0", Some("-1"), None), Some((0, 31)));
        assert_eq!(r(4, "1", Some("1"), None), Some((8, 15)));
        assert_eq!(r(4, "5", Some("30"), Some("BIT")), Some((5, 30)));
        assert_eq!(r(4, "-100", Some("100"), Some("bit")), Some((0, 31)));
        assert_eq!(r(4, "3", Some("1"), None), None);
        assert_eq!(r(0, "0", Some("-1"), None), None);
        assert_eq!(r(2, "1", None, None), Some((8, 15)));
        assert!(bit_range(2, b"x", None, None).is_err());
        assert!(bit_range(2, b"0", Some(b"1"), Some(b"nibble")).is_err());
    }

    #[test]
    fn popcount_counts_every_byte() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(popcount(&bytes), 1024);
        assert_eq!(popcount(&bytes[..13]), bytes[..13].iter().map(|b| u64::from(b.count_ones())).sum::<u64>());
        assert_eq!(popcount_words(&bytes), 1024);
        assert_eq!(popcount_words(&bytes[3..200]), popcount(&bytes[3..200]));
    }
}
