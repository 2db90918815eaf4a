//! Redis's serialization of values (RDB version 10, Redis 7.0): what DUMP produces and
//! RESTORE reads, and what an `.rdb` file holds per key.
//!
//! ```text
//! DUMP payload   type u8 | value | RDB version u16 LE | CRC-64 u64 LE (of everything before)
//! value by type  0 STRING         string
//!                1 LIST           count, strings
//!                2 SET            count, strings
//!                3 ZSET           count, (string, text score)*
//!                4 HASH           count, (string, string)*
//!                5 ZSET_2         count, (string, f64 LE)*
//!               10 LIST_ZIPLIST   string holding a ziplist
//!               11 SET_INTSET     string holding an intset
//!               12 ZSET_ZIPLIST   ziplist of member, score, …
//!               13 HASH_ZIPLIST   ziplist of field, value, …
//!               14 LIST_QUICKLIST count, ziplist strings
//!               16 HASH_LISTPACK  listpack of field, value, …
//!               17 ZSET_LISTPACK  listpack of member, score, …
//!               18 LIST_QUICKLIST_2 count, (container 1 plain | 2 packed, string)*
//! ```
//! (strings, lengths and scores: see `codec`; packed blobs: see `packed`). Shale reads every
//! type above, so payloads from Redis 7.0 (and the older encodings it still loads) restore
//! here; it writes the plain types (0, 1, 2, 4, 5) and streams as type 19, which Redis 7.0 loads too.
//! Modules and zipmaps are refused as bad data.

pub mod codec;
pub mod crc64;
pub mod file;
pub mod lzf;
pub mod packed;
pub mod stream;

use bytes::Bytes;

use codec::{put_len, put_string, BadFormat, Reader};

/// The RDB version Shale writes and the newest it reads (Redis 7.0's).
pub const RDB_VERSION: u16 = 10;

/// A value as RDB carries it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    String(Bytes),
    List(Vec<Bytes>),
    Set(Vec<Bytes>),
    /// Members with their scores.
    ZSet(Vec<(Bytes, f64)>),
    /// Fields with their values.
    Hash(Vec<(Bytes, Bytes)>),
    /// A stream with its consumer groups.
    Stream(Box<stream::StreamValue>),
}

/// Pairs up a flat list of field, value, … (a packed hash or sorted set).
fn pairs(items: Vec<Bytes>) -> Result<Vec<(Bytes, Bytes)>, BadFormat> {
    if !items.len().is_multiple_of(2) {
        return Err(BadFormat);
    }
    let mut it = items.into_iter();
    let mut out = Vec::new();
    while let (Some(a), Some(b)) = (it.next(), it.next()) {
        out.push((a, b));
    }
    Ok(out)
}

fn score(text: &[u8]) -> Result<f64, BadFormat> {
    let v = crate::num::parse_float(text).ok_or(BadFormat)?;
    if v.is_nan() {
        return Err(BadFormat);
    }
    Ok(v)
}

fn scored(items: Vec<Bytes>) -> Result<Vec<(Bytes, f64)>, BadFormat> {
    pairs(items)?.into_iter().map(|(m, s)| Ok((m, score(&s)?))).collect()
}

/// Reads a value of RDB type `kind`. Empty collections and duplicate set members, hash fields
/// or sorted-set members are bad data, as in Redis's sanitizing load.
pub fn load_value(kind: u8, r: &mut Reader<'_>) -> Result<Value, BadFormat> {
    let value = match kind {
        0 => Value::String(r.string()?),
        1 | 2 => {
            let n = r.count()?;
            let items = (0..n).map(|_| r.string()).collect::<Result<Vec<_>, _>>()?;
            if kind == 1 {
                Value::List(items)
            } else {
                Value::Set(items)
            }
        }
        3 | 5 => {
            let n = r.count()?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                let m = r.string()?;
                let s = if kind == 3 { r.text_double()? } else { r.binary_double()? };
                if s.is_nan() {
                    return Err(BadFormat);
                }
                items.push((m, s));
            }
            Value::ZSet(items)
        }
        4 => {
            let n = r.count()?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push((r.string()?, r.string()?));
            }
            Value::Hash(items)
        }
        10 => Value::List(packed::ziplist(&r.string()?)?),
        11 => Value::Set(packed::intset(&r.string()?)?),
        12 => Value::ZSet(scored(packed::ziplist(&r.string()?)?)?),
        13 => Value::Hash(pairs(packed::ziplist(&r.string()?)?)?),
        14 => {
            let n = r.count()?;
            let mut items = Vec::new();
            for _ in 0..n {
                items.extend(packed::ziplist(&r.string()?)?);
            }
            Value::List(items)
        }
        16 => Value::Hash(pairs(packed::listpack(&r.string()?)?)?),
        17 => Value::ZSet(scored(packed::listpack(&r.string()?)?)?),
        18 => {
            let n = r.count()?;
            let mut items = Vec::new();
            for _ in 0..n {
                match r.length()? {
                    1 => items.push(r.string()?),
                    2 => items.extend(packed::listpack(&r.string()?)?),
                    _ => return Err(BadFormat),
                }
            }
            Value::List(items)
        }
        15 | 19 => Value::Stream(Box::new(stream::load(kind, r)?)),
        _ => return Err(BadFormat),
    };
    check(&value)?;
    Ok(value)
}

/// Refuses empty collections and duplicates.
fn check(v: &Value) -> Result<(), BadFormat> {
    fn distinct<'a>(keys: impl Iterator<Item = &'a Bytes>) -> bool {
        let mut seen = std::collections::HashSet::new();
        keys.into_iter().all(|k| seen.insert(k))
    }
    let ok = match v {
        Value::String(_) => true,
        Value::List(items) => !items.is_empty(),
        Value::Set(items) => !items.is_empty() && distinct(items.iter()),
        Value::ZSet(items) => !items.is_empty() && distinct(items.iter().map(|(m, _)| m)),
        Value::Hash(items) => !items.is_empty() && distinct(items.iter().map(|(f, _)| f)),
        Value::Stream(v) => distinct(v.groups.iter().map(|g| &g.name)),
    };
    ok.then_some(()).ok_or(BadFormat)
}

/// Appends `v` as its RDB type byte and value.
pub fn save_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::String(s) => {
            out.push(0);
            put_string(out, s);
        }
        Value::List(items) | Value::Set(items) => {
            out.push(if matches!(v, Value::List(_)) { 1 } else { 2 });
            put_len(out, items.len() as u64);
            items.iter().for_each(|s| put_string(out, s));
        }
        Value::ZSet(items) => {
            out.push(5);
            put_len(out, items.len() as u64);
            for (m, s) in items {
                put_string(out, m);
                out.extend_from_slice(&s.to_le_bytes());
            }
        }
        Value::Hash(items) => {
            out.push(4);
            put_len(out, items.len() as u64);
            for (f, val) in items {
                put_string(out, f);
                put_string(out, val);
            }
        }
        Value::Stream(v) => stream::save(out, v),
    }
}

/// The DUMP payload of `v`.
pub fn dump(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    save_value(&mut out, v);
    seal_payload(&mut out);
    out
}

/// Ends a DUMP-style payload (DUMP, FUNCTION DUMP): the RDB version (u16 LE), then the
/// CRC-64 (LE) of everything before it.
pub fn seal_payload(out: &mut Vec<u8>) {
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64::crc64(out);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Why RESTORE refuses a payload (Redis's two errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreError {
    /// `ERR DUMP payload version or checksum are wrong`.
    VersionOrChecksum,
    /// `ERR Bad data format`.
    BadData,
}

impl RestoreError {
    /// The error reply text.
    pub fn message(self) -> &'static str {
        match self {
            RestoreError::VersionOrChecksum => "ERR DUMP payload version or checksum are wrong",
            RestoreError::BadData => "ERR Bad data format",
        }
    }
}

/// Reads a DUMP payload: footer (version, CRC — a CRC of zero is not checked, as in Redis),
/// then exactly one value.
pub fn restore(payload: &[u8]) -> Result<Value, RestoreError> {
    if payload.len() < 10 {
        return Err(RestoreError::VersionOrChecksum);
    }
    let (body, footer) = payload.split_at(payload.len() - 10);
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    let crc = u64::from_le_bytes(footer[2..10].try_into().unwrap_or_default());
    if version > RDB_VERSION || (crc != 0 && crc != crc64::crc64(&payload[..payload.len() - 8])) {
        return Err(RestoreError::VersionOrChecksum);
    }
    let mut r = Reader::new(body);
    let kind = r.u8().map_err(|_| RestoreError::BadData)?;
    let v = load_value(kind, &mut r).map_err(|_| RestoreError::BadData)?;
    if r.remaining() != 0 {
        return Err(RestoreError::BadData);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn every_type_round_trips() {
        let values = [
            Value::String(b("hello")),
            Value::String(b("12345")),
            Value::List(vec![b("a"), b("-7"), b(&"x".repeat(20_000))]),
            Value::Set(vec![b("1"), b("two")]),
            Value::ZSet(vec![(b("m"), 1.5), (b("n"), f64::NEG_INFINITY)]),
            Value::Hash(vec![(b("f"), b("v")), (b("g"), b("100000"))]),
        ];
        for v in values {
            assert_eq!(restore(&dump(&v)).unwrap(), v);
        }
    }

    #[test]
    fn a_payload_from_redis_restores() {
        // redis-server 7.0: SET k hello; DUMP k.
        let payload = b"\x00\x05hello\n\x00cr\xdfve4 \n";
        assert_eq!(restore(payload).unwrap(), Value::String(b("hello")));
        let mut bad = payload.to_vec();
        bad[3] ^= 1;
        assert_eq!(restore(&bad), Err(RestoreError::VersionOrChecksum));
        let mut newer = payload.to_vec();
        newer[7] = 11;
        assert_eq!(restore(&newer), Err(RestoreError::VersionOrChecksum));
    }

    #[test]
    fn bad_data_is_refused() {
        let with_crc = |body: &[u8]| {
            let mut p = body.to_vec();
            p.extend_from_slice(&RDB_VERSION.to_le_bytes());
            let crc = crc64::crc64(&p);
            p.extend_from_slice(&crc.to_le_bytes());
            restore(&p)
        };
        assert_eq!(with_crc(&[1, 0]), Err(RestoreError::BadData), "an empty list");
        assert_eq!(with_crc(&[2, 2, 1, b'a', 1, b'a']), Err(RestoreError::BadData), "a duplicate member");
        assert_eq!(with_crc(&[15, 0]), Err(RestoreError::BadData), "a truncated stream");
        assert_eq!(with_crc(&[0, 1, b'a', b'b']), Err(RestoreError::BadData), "trailing bytes");
        assert_eq!(with_crc(&[1, 0x80, 0xff, 0xff, 0xff, 0xff]), Err(RestoreError::BadData), "a count past the end");
    }
}
