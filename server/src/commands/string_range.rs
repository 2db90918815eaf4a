//! Byte ranges of strings: GETRANGE, SUBSTR, SETRANGE, and LCS (LEN, IDX, MINMATCHLEN,
//! WITHMATCHLEN), with Redis's index rules and limits.

use bytes::Bytes;

use super::strings::{done_event, string_at, string_edit, string_meta_at, WRONGTYPE};
use super::{engine_error, parse_i64, spec, CommandSpec, Session, ONE_KEY};
use crate::resp::Reply;
use crate::services::notifications::STRING;

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("getrange", 4, &["readonly"], ONE_KEY, getrange),
    spec("substr", 4, &["readonly"], ONE_KEY, getrange),
    spec("setrange", 4, &["write", "denyoom"], ONE_KEY, setrange),
    spec("lcs", -3, &["readonly"], (1, 2, 1), lcs),
];

const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const TOO_BIG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

/// The byte range `start..=end` of a `len`-byte string under Redis's GETRANGE rules (negative
/// indexes count from the end; out-of-range ends are clamped); `None` for an empty range.
fn clamp_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    if (start < 0 && end < 0 && start > end) || len == 0 {
        return None;
    }
    let start = if start < 0 { (len + start).max(0) } else { start };
    let end = if end < 0 { (len + end).max(0) } else { end.min(len - 1) };
    (start <= end).then_some((start as usize, end as usize))
}

fn getrange(s: &mut Session, args: &[Bytes]) -> Reply {
    let (Some(start), Some(end)) = (parse_i64(&args[2]), parse_i64(&args[3])) else {
        return Reply::error(NOT_INTEGER);
    };
    match string_meta_at(s, &args[1]) {
        Ok(Some(m)) => match clamp_range(start, end, m.string_len() as usize) {
            Some((a, b)) => match s.state.storage.view(&s.exec, s.db).string_range(&m, a as u64, b as u64 + 1) {
                Ok(v) => Reply::Bulk(v),
                Err(e) => engine_error(e),
            },
            None => Reply::bulk(Bytes::new()),
        },
        Ok(None) => Reply::bulk(Bytes::new()),
        Err(e) => e,
    }
}

/// `SETRANGE key offset value`: overwrites from `offset`, zero-padding a shorter string.
fn setrange(s: &mut Session, args: &[Bytes]) -> Reply {
    let Some(offset) = parse_i64(&args[2]) else { return Reply::error(NOT_INTEGER) };
    if offset < 0 {
        return Reply::error("ERR offset is out of range");
    }
    let value = &args[3];
    let storage = &s.state.storage;
    let _guard = storage.lock(&s.exec, s.db, [&args[1][..]]);
    let mut edit = match string_edit(s, &args[1]) {
        Ok(e) => e,
        Err(e) => return e,
    };
    let current_len = edit.len() as i64;
    if value.is_empty() {
        // Nothing to write: no key is created, and an existing one is left alone.
        return Reply::Integer(current_len);
    }
    let max = s.state.config().proto_max_bulk_len;
    let offset = offset as u64;
    if offset.saturating_add(value.len() as u64) > max {
        return Reply::error(TOO_BIG);
    }
    if let Err(e) = edit.write(offset, value) {
        return engine_error(e);
    }
    let len = edit.len() as i64;
    let mut b = lsm::WriteBatch::new();
    edit.finish(&mut b, &args[1]);
    let r = storage.write(&s.exec, b);
    done_event(s, r, Reply::Integer(len), STRING, "setrange", &args[1])
}

/// `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]`, a port of Redis's dynamic
/// programme so ranges come out in the same order.
fn lcs(s: &mut Session, args: &[Bytes]) -> Reply {
    let (mut getlen, mut getidx, mut withmatchlen, mut minmatchlen) = (false, false, false, 0i64);
    let mut i = 3;
    while i < args.len() {
        match String::from_utf8_lossy(&args[i]).to_ascii_lowercase().as_str() {
            "idx" => getidx = true,
            "len" => getlen = true,
            "withmatchlen" => withmatchlen = true,
            "minmatchlen" if i + 1 < args.len() => {
                let Some(n) = parse_i64(&args[i + 1]) else { return Reply::error(NOT_INTEGER) };
                minmatchlen = n.max(0);
                i += 1;
            }
            _ => return Reply::error("ERR syntax error"),
        }
        i += 1;
    }
    let fetch = |key: &[u8]| match string_at(s, key) {
        Ok(m) => Ok(m.map(|m| m.body).unwrap_or_default()),
        Err(e) if e == Reply::error(WRONGTYPE) => {
            Err(Reply::error("ERR The specified keys must contain string values"))
        }
        Err(e) => Err(e),
    };
    let (a, b) = match (fetch(&args[1]), fetch(&args[2])) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    if getidx && getlen {
        return Reply::error("ERR If you want both the length and indexes, please just use IDX.");
    }
    let (alen, blen) = (a.len(), b.len());
    let cells = (alen as u64 + 1).saturating_mul(blen as u64 + 1);
    if cells.saturating_mul(4) > s.state.config().proto_max_bulk_len {
        return Reply::error("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len");
    }
    let w = blen + 1;
    let mut table = vec![0u32; cells as usize];
    for i in 1..=alen {
        for j in 1..=blen {
            table[i * w + j] = if a[i - 1] == b[j - 1] {
                table[(i - 1) * w + j - 1] + 1
            } else {
                table[(i - 1) * w + j].max(table[i * w + j - 1])
            };
        }
    }
    let total = table[alen * w + blen] as usize;
    if getlen {
        return Reply::Integer(total as i64);
    }
    let mut result = vec![0u8; total];
    let mut idx = total;
    let mut matches = Vec::new();
    // `alen` as the start means "no range open".
    let (mut a_start, mut a_end, mut b_start, mut b_end) = (alen, 0, 0, 0);
    let (mut i, mut j) = (alen, blen);
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            result[idx - 1] = a[i - 1];
            if a_start == alen {
                (a_start, a_end, b_start, b_end) = (i - 1, i - 1, j - 1, j - 1);
            } else if a_start == i && b_start == j {
                a_start -= 1;
                b_start -= 1;
            } else {
                emit = true;
            }
            if a_start == 0 || b_start == 0 {
                emit = true;
            }
            idx -= 1;
            i -= 1;
            j -= 1;
        } else {
            if table[(i - 1) * w + j] > table[i * w + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            if a_start != alen {
                emit = true;
            }
        }
        if emit {
            let len = a_end - a_start + 1;
            if getidx && (minmatchlen == 0 || len as i64 >= minmatchlen) {
                let range = |x: usize, y: usize| Reply::Array(vec![Reply::Integer(x as i64), Reply::Integer(y as i64)]);
                let mut entry = vec![range(a_start, a_end), range(b_start, b_end)];
                if withmatchlen {
                    entry.push(Reply::Integer(len as i64));
                }
                matches.push(Reply::Array(entry));
            }
            a_start = alen;
        }
    }
    if getidx {
        Reply::Map(vec![
            (Reply::bulk(&b"matches"[..]), Reply::Array(matches)),
            (Reply::bulk(&b"len"[..]), Reply::Integer(total as i64)),
        ])
    } else {
        Reply::Bulk(Bytes::from(result))
    }
}

#[cfg(test)]
mod tests {
    use super::clamp_range;

    #[test]
    fn getrange_index_rules() {
        assert_eq!(clamp_range(0, 3, 10), Some((0, 3)));
        assert_eq!(clamp_range(-3, -1, 10), Some((7, 9)));
        assert_eq!(clamp_range(0, -1, 10), Some((0, 9)));
        assert_eq!(clamp_range(10, 100, 10), None);
        assert_eq!(clamp_range(5, 100, 10), Some((5, 9)));
        assert_eq!(clamp_range(-100, 2, 10), Some((0, 2)));
        assert_eq!(clamp_range(-1, -5, 10), None);
        assert_eq!(clamp_range(0, -100, 10), Some((0, 0)));
        assert_eq!(clamp_range(0, 0, 0), None);
    }
}
