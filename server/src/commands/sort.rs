//! SORT and SORT_RO on lists, sets and sorted sets: numeric or ALPHA order, BY patterns
//! (`nosort`, `weight_*`, hash fields `*->field`), LIMIT, GET patterns (`#` for the element
//! itself), ASC/DESC and STORE, with Redis 7.0's rules and errors.

use std::cmp::Ordering;

use bytes::Bytes;

use super::collections::commit_event;
use super::lists::all as list_all;
use super::strings::string_at;
use super::{engine_error, parse_i64, spec, CommandSpec, Session, ONE_KEY};
use crate::resp::Reply;
use crate::services::notifications::{GENERIC, LIST};
use crate::storage::{KeyType, ListpackLimits, Meta, View};

pub(super) static COMMANDS: &[CommandSpec] =
    &[spec("sort", -2, &["write", "denyoom"], ONE_KEY, sort), spec("sort_ro", -2, &["readonly"], ONE_KEY, sort_ro)];

/// The parsed options.
#[derive(Debug, Default)]
struct Options {
    desc: bool,
    alpha: bool,
    limit: Option<(i64, i64)>,
    store: Option<Bytes>,
    by: Option<Bytes>,
    /// BY a pattern without `*`: keep the native order.
    dont_sort: bool,
    gets: Vec<Bytes>,
}

fn parse(args: &[Bytes], read_only: bool) -> Result<Options, Reply> {
    let mut o = Options::default();
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        match args[j].to_ascii_lowercase().as_slice() {
            b"asc" => o.desc = false,
            b"desc" => o.desc = true,
            b"alpha" => o.alpha = true,
            b"limit" if left >= 2 => {
                let (Some(a), Some(b)) = (parse_i64(&args[j + 1]), parse_i64(&args[j + 2])) else {
                    return Err(Reply::error("ERR value is not an integer or out of range"));
                };
                o.limit = Some((a, b));
                j += 2;
            }
            b"store" if left >= 1 && !read_only => {
                o.store = Some(args[j + 1].clone());
                j += 1;
            }
            b"by" if left >= 1 => {
                o.by = Some(args[j + 1].clone());
                o.dont_sort = !args[j + 1].contains(&b'*');
                j += 1;
            }
            b"get" if left >= 1 => {
                o.gets.push(args[j + 1].clone());
                j += 1;
            }
            _ => return Err(Reply::error("ERR syntax error")),
        }
        j += 1;
    }
    Ok(o)
}

/// What a pattern names for `element`: the element itself for `#`; the string at the key the
/// pattern makes by putting `element` in place of its first `*`; with `->field` after the `*`,
/// that field of the hash there. `None` for a missing key or field, a key of another type, or a
/// pattern without `*`.
fn lookup(s: &Session, view: &View, pattern: &[u8], element: &Bytes) -> Result<Option<Bytes>, Reply> {
    if pattern == b"#" {
        return Ok(Some(element.clone()));
    }
    let Some(star) = pattern.iter().position(|&b| b == b'*') else { return Ok(None) };
    let after = &pattern[star + 1..];
    let arrow = after.windows(2).position(|w| w == b"->").filter(|&i| i + 2 < after.len());
    let (postfix, field) = match arrow {
        Some(i) => (&after[..i], Some(&after[i + 2..])),
        None => (after, None),
    };
    let mut key = Vec::with_capacity(pattern.len() + element.len());
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(element);
    key.extend_from_slice(postfix);
    let Some(meta) = s.state.storage.get(&s.exec, s.db, &key).map_err(engine_error)? else { return Ok(None) };
    match (field, meta.kind) {
        (Some(f), KeyType::Hash) => view.field(meta.uid, f).map_err(engine_error),
        (None, KeyType::String) => Ok(string_at(s, &key)?.map(|m| m.body)),
        _ => Ok(None),
    }
}

/// `strtod` over the whole text, as SORT reads weights: leading blanks allowed, nothing
/// after the number, no NaN, no overflow or underflow; the empty string is 0.
fn weight(text: &[u8]) -> Option<f64> {
    if text.is_empty() {
        return Some(0.0);
    }
    let t = std::str::from_utf8(text).ok()?.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let v: f64 = t.parse().ok()?;
    let lower = t.to_ascii_lowercase();
    let infinite_text = lower.contains("inf");
    let nonzero_digits = t.bytes().take_while(|b| !matches!(b, b'e' | b'E')).any(|b| (b'1'..=b'9').contains(&b));
    if v.is_nan() || (v.is_infinite() && !infinite_text) || (v == 0.0 && nonzero_digits) {
        return None;
    }
    Some(v)
}

/// The elements of the value to sort, in its native order (a sorted set's by score).
fn elements(view: &View, meta: &Meta) -> Result<Vec<Bytes>, Reply> {
    match meta.kind {
        KeyType::List => list_all(view, meta),
        KeyType::Set => view
            .members(meta.uid, std::ops::Bound::Unbounded)
            .map(|kv| kv.map(|(m, _)| m).map_err(engine_error))
            .collect(),
        KeyType::ZSet => view.scores(meta, None).map(|kv| kv.map(|(_, m)| m).map_err(engine_error)).collect(),
        _ => Err(Reply::error("WRONGTYPE Operation against a key holding the wrong kind of value")),
    }
}

/// The inclusive output range of `len` elements under `LIMIT start count`, as Redis computes
/// it (`end < start`: nothing).
fn output_range(limit: Option<(i64, i64)>, len: i64) -> (i64, i64) {
    let (limit_start, limit_count) = limit.unwrap_or((0, -1));
    let mut start = limit_start.max(0).min(len);
    let limit_count = limit_count.max(-1).min(len);
    let mut end = if limit_count < 0 { len - 1 } else { start + limit_count - 1 };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    if end >= len {
        end = len - 1;
    }
    (start, end)
}

fn sort(s: &mut Session, args: &[Bytes]) -> Reply {
    run(s, args, false)
}

fn sort_ro(s: &mut Session, args: &[Bytes]) -> Reply {
    run(s, args, true)
}

fn run(s: &mut Session, args: &[Bytes], read_only: bool) -> Reply {
    let mut o = match parse(args, read_only) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let state = std::sync::Arc::clone(&s.state);
    let dest = o.store.clone();
    let mut keys: Vec<&[u8]> = vec![&args[1][..]];
    if let Some(dest) = &dest {
        keys.push(&dest[..]);
    }
    let _guard = state.storage.lock(&s.exec, s.db, keys);
    let view = state.storage.view(&s.exec, s.db);
    let meta = match s.exec.as_read(|| s.state.storage.get(&s.exec, s.db, &args[1])) {
        Ok(m) => m,
        Err(e) => return engine_error(e),
    };
    if meta.as_ref().is_some_and(|m| !matches!(m.kind, KeyType::List | KeyType::Set | KeyType::ZSet)) {
        return Reply::error("WRONGTYPE Operation against a key holding the wrong kind of value");
    }
    let kind = meta.as_ref().map_or(KeyType::List, |m| m.kind);
    // A set has no order of its own to keep: stored (or scripted) output is sorted instead.
    if o.dont_sort && kind == KeyType::Set && (o.store.is_some() || s.in_script) {
        (o.dont_sort, o.alpha, o.by) = (false, true, None);
    }
    let mut items = match &meta {
        Some(m) => match elements(&view, m) {
            Ok(v) => v,
            Err(e) => return e,
        },
        None => Vec::new(),
    };
    let (start, end) = output_range(o.limit, items.len() as i64);
    let mut conversion_error = false;
    if o.dont_sort {
        if o.desc && kind != KeyType::Set {
            items.reverse();
        }
    } else {
        // The sort key of each element: its weight, or the text it is compared by.
        let mut keyed: Vec<(f64, Option<Bytes>, Bytes)> = Vec::with_capacity(items.len());
        for item in items {
            let by = match &o.by {
                Some(pattern) => match lookup(s, &view, pattern, &item) {
                    Ok(v) => v,
                    Err(e) => return e,
                },
                None => Some(item.clone()),
            };
            let (mut score, mut text) = (0.0, None);
            match by {
                Some(v) if o.alpha => text = o.by.is_some().then_some(v),
                Some(v) => match weight(&v) {
                    Some(w) => score = w,
                    None => conversion_error = true,
                },
                None => {}
            }
            keyed.push((score, text, item));
        }
        let (alpha, by_pattern, desc) = (o.alpha, o.by.is_some(), o.desc);
        keyed.sort_by(|a, b| {
            let c = if !alpha {
                a.0.partial_cmp(&b.0).unwrap_or(Ordering::Equal).then_with(|| a.2.cmp(&b.2))
            } else if by_pattern {
                a.1.cmp(&b.1)
            } else {
                a.2.cmp(&b.2)
            };
            if desc {
                c.reverse()
            } else {
                c
            }
        });
        items = keyed.into_iter().map(|(_, _, item)| item).collect();
    }
    if conversion_error {
        return Reply::error("ERR One or more scores can't be converted into double");
    }
    let chosen: &[Bytes] = if end >= start { &items[start as usize..=end as usize] } else { &[] };
    let mut out: Vec<Option<Bytes>> = Vec::with_capacity(chosen.len() * o.gets.len().max(1));
    for item in chosen {
        if o.gets.is_empty() {
            out.push(Some(item.clone()));
        }
        for pattern in &o.gets {
            match lookup(s, &view, pattern, item) {
                Ok(v) => out.push(v),
                Err(e) => return e,
            }
        }
    }
    let Some(dest) = dest.clone() else {
        return Reply::Array(out.into_iter().map(|v| v.map_or(Reply::Null, Reply::Bulk)).collect());
    };
    let stored: Vec<Bytes> = out.into_iter().map(Option::unwrap_or_default).collect();
    let mut b = lsm::WriteBatch::new();
    let n = Reply::Integer(stored.len() as i64);
    if stored.is_empty() {
        match s.state.storage.get(&s.exec, s.db, &dest) {
            Ok(Some(_)) => view.delete_meta(&mut b, &dest),
            Ok(None) => return n,
            Err(e) => return engine_error(e),
        }
        return commit_event(s, b, n, (GENERIC, "del"), &dest, false);
    }
    view.write_value(&mut b, &dest, crate::rdb::Value::List(stored), 0, ListpackLimits::of(&s.state.config()));
    let reply = commit_event(s, b, n, (LIST, "sortstore"), &dest, false);
    drop(_guard);
    // Clients blocked on the destination (BLPOP…) get their chance.
    s.signal(&dest);
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_clamp_like_redis() {
        assert_eq!(output_range(None, 5), (0, 4));
        assert_eq!(output_range(Some((1, 2)), 5), (1, 2));
        assert_eq!(output_range(Some((-3, 2)), 5), (0, 1));
        assert_eq!(output_range(Some((10, 2)), 5), (4, 3));
        assert_eq!(output_range(Some((2, 100)), 5), (2, 4));
        assert_eq!(output_range(Some((0, 0)), 5), (0, -1));
        assert_eq!(output_range(None, 0), (-1, -2));
    }

    #[test]
    fn weights_parse_like_strtod() {
        assert_eq!(weight(b"1.5"), Some(1.5));
        assert_eq!(weight(b"  -2"), Some(-2.0));
        assert_eq!(weight(b""), Some(0.0));
        assert_eq!(weight(b"inf"), Some(f64::INFINITY));
        assert_eq!(weight(b"1 "), None);
        assert_eq!(weight(b"abc"), None);
        assert_eq!(weight(b"nan"), None);
        assert_eq!(weight(b"1e400"), None);
        assert_eq!(weight(b"1e-400"), None);
        assert_eq!(weight(b"0e10"), Some(0.0));
    }
}
