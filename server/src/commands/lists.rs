//! Lists: LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP, LLEN, LINDEX, LSET, LRANGE, LINSERT, LREM,
//! LTRIM, LPOS, LMOVE, RPOPLPUSH, LMPOP (the blocking forms are in `list_blocking`).
//!
//! Elements are records keyed by a u64 index; the header keeps the index of the first element
//! and the one after the last, so pushes and pops at either end and LINDEX/LSET are O(1) engine
//! operations. LINSERT and LREM shift the shorter side.

use bytes::Bytes;

use super::collections::{commit_event, fetch, mpop_args, pop_count, store, NOT_INTEGER, SYNTAX};
use super::{engine_error, parse_i64, spec, CommandSpec, Session, ONE_KEY};
use crate::resp::{BulkArray, Reply};
use crate::services::notifications::{GENERIC, LIST};
use crate::state::ServerState;
use crate::storage::{ExecContext, Header, KeyType, Meta, View};

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("lpush", -3, &["write", "denyoom", "fast"], ONE_KEY, lpush),
    spec("rpush", -3, &["write", "denyoom", "fast"], ONE_KEY, rpush),
    spec("lpushx", -3, &["write", "denyoom", "fast"], ONE_KEY, lpushx),
    spec("rpushx", -3, &["write", "denyoom", "fast"], ONE_KEY, rpushx),
    spec("lpop", -2, &["write", "fast"], ONE_KEY, lpop),
    spec("rpop", -2, &["write", "fast"], ONE_KEY, rpop),
    spec("llen", 2, &["readonly", "fast"], ONE_KEY, llen),
    spec("lindex", 3, &["readonly"], ONE_KEY, lindex),
    spec("lset", 4, &["write", "denyoom"], ONE_KEY, lset),
    spec("lrange", 4, &["readonly"], ONE_KEY, lrange),
    spec("linsert", 5, &["write", "denyoom"], ONE_KEY, linsert),
    spec("lrem", 4, &["write"], ONE_KEY, lrem),
    spec("ltrim", 4, &["write"], ONE_KEY, ltrim),
    spec("lpos", -3, &["readonly"], ONE_KEY, lpos),
    spec("lmove", 5, &["write", "denyoom"], (1, 2, 1), lmove),
    spec("rpoplpush", 3, &["write", "denyoom"], (1, 2, 1), rpoplpush),
    spec("lmpop", -4, &["write"], (0, 0, 0), lmpop),
];

pub(super) fn list_at(view: &View, key: &[u8]) -> Result<Option<Meta>, Reply> {
    fetch(view, key, KeyType::List)
}

fn index_key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

/// Adds `values` at the head (`left`) or tail of the list at `key`; returns the new length.
/// With `only_existing` (LPUSHX/RPUSHX) a missing list stays missing (length 0).
pub(super) fn push(
    state: &ServerState,
    cx: &ExecContext,
    db: u32,
    key: &[u8],
    values: &[Bytes],
    left: bool,
    only_existing: bool,
) -> Result<i64, Reply> {
    let _guard = state.storage.lock(cx, db, [key]);
    let view = state.storage.view(cx, db);
    let mut b = lsm::WriteBatch::new();
    let meta = match list_at(&view, key)? {
        Some(m) => m,
        None if only_existing => return Ok(0),
        None => view.create(&mut b, key, KeyType::List),
    };
    let mut h = Header::of(&meta);
    for v in values {
        if left {
            h.head -= 1;
            view.put_element(&mut b, meta.uid, &index_key(h.head), v);
        } else {
            view.put_element(&mut b, meta.uid, &index_key(h.tail), v);
            h.tail += 1;
        }
    }
    h.count = h.tail - h.head;
    store(&view, &mut b, key, &meta, h);
    state.storage.write(cx, b).map_err(engine_error)?;
    if !values.is_empty() {
        cx.notify(LIST, if left { "lpush" } else { "rpush" }, db, key);
    }
    Ok(h.count as i64)
}

/// Removes up to `count` elements from the head (`left`) or tail of the list at `key`
/// (`None`: there is no list there).
pub(super) fn pop(
    state: &ServerState,
    cx: &ExecContext,
    db: u32,
    key: &[u8],
    left: bool,
    count: usize,
) -> Result<Option<Vec<Bytes>>, Reply> {
    let _guard = state.storage.lock(cx, db, [key]);
    let Some((items, emptied)) = pop_locked(state, cx, db, key, left, count)? else { return Ok(None) };
    if !items.is_empty() {
        notify_popped(cx, db, key, left, emptied);
    }
    Ok(Some(items))
}

/// Records a pop's keyspace events: `lpop`/`rpop`, then `del` if the list is now gone.
fn notify_popped(cx: &ExecContext, db: u32, key: &[u8], left: bool, emptied: bool) {
    cx.notify(LIST, if left { "lpop" } else { "rpop" }, db, key);
    if emptied {
        cx.notify(GENERIC, "del", db, key);
    }
}

/// Pops without recording events; also returns whether the list is now empty (gone).
/// `None`: there is no list at `key`.
fn pop_locked(
    state: &ServerState,
    cx: &ExecContext,
    db: u32,
    key: &[u8],
    left: bool,
    count: usize,
) -> Result<Option<(Vec<Bytes>, bool)>, Reply> {
    let view = state.storage.view(cx, db);
    let Some(meta) = list_at(&view, key)? else { return Ok(None) };
    let mut h = Header::of(&meta);
    let n = count.min(h.count as usize);
    let mut b = lsm::WriteBatch::new();
    let mut out = Vec::with_capacity(n.min(1 << 16));
    // The `n` elements from the end, in one read (a run of pops goes on from the last one).
    let (first, then) =
        if left { (h.head, h.head.wrapping_add(n as u64)) } else { (h.tail - 1, (h.tail - 1).wrapping_sub(n as u64)) };
    let read = view.end_elements(meta.uid, &index_key(first), &index_key(then), left, n).map_err(engine_error)?;
    let mut read = read.into_iter().peekable();
    for _ in 0..n {
        let i = if left { h.head } else { h.tail - 1 };
        // (Each index from head to tail holds an element; one found missing reads as empty.)
        let v = match read.next_if(|(field, _)| field[..] == index_key(i)) {
            Some((_, v)) => v,
            None => view.element(meta.uid, &index_key(i)).map_err(engine_error)?.unwrap_or_default(),
        };
        view.delete_element(&mut b, meta.uid, &index_key(i));
        if left {
            h.head += 1;
        } else {
            h.tail -= 1;
        }
        out.push(v);
    }
    h.count = h.tail - h.head;
    if n > 0 {
        store(&view, &mut b, key, &meta, h);
        state.storage.write(cx, b).map_err(engine_error)?;
    }
    Ok(Some((out, h.count == 0)))
}

/// Moves one element from `src` (its head if `from_left`) to `dst` (its head if `to_left`).
pub(super) fn move_one(
    state: &ServerState,
    cx: &ExecContext,
    db: u32,
    src: &[u8],
    dst: &[u8],
    from_left: bool,
    to_left: bool,
) -> Result<Option<Bytes>, Reply> {
    let _guard = state.storage.lock(cx, db, [src, dst]);
    let view = state.storage.view(cx, db);
    // Both types are checked before anything moves.
    let Some(_) = list_at(&view, src)? else { return Ok(None) };
    list_at(&view, dst)?;
    let Some((popped, emptied)) = pop_locked(state, cx, db, src, from_left, 1)? else { return Ok(None) };
    let Some(v) = popped.into_iter().next() else { return Ok(None) };
    drop(_guard);
    push(state, cx, db, dst, std::slice::from_ref(&v), to_left, false)?;
    // Redis's order: the destination's push, then the source's pop.
    notify_popped(cx, db, src, from_left, emptied);
    Ok(Some(v))
}

fn push_cmd(s: &mut Session, args: &[Bytes], left: bool, only_existing: bool) -> Reply {
    match push(&s.state, &s.exec, s.db, &args[1], &args[2..], left, only_existing) {
        Ok(n) => {
            if n > 0 {
                s.signal(&args[1]);
            }
            Reply::Integer(n)
        }
        Err(e) => e,
    }
}

fn lpush(s: &mut Session, args: &[Bytes]) -> Reply {
    push_cmd(s, args, true, false)
}

fn rpush(s: &mut Session, args: &[Bytes]) -> Reply {
    push_cmd(s, args, false, false)
}

fn lpushx(s: &mut Session, args: &[Bytes]) -> Reply {
    push_cmd(s, args, true, true)
}

fn rpushx(s: &mut Session, args: &[Bytes]) -> Reply {
    push_cmd(s, args, false, true)
}

fn pop_cmd(s: &mut Session, args: &[Bytes], left: bool) -> Reply {
    if args.len() > 3 {
        // LPOP/RPOP count their arguments (SPOP and ZPOPMIN call extra ones a syntax error).
        let name = if left { "lpop" } else { "rpop" };
        return Reply::error(format!("ERR wrong number of arguments for '{name}' command"));
    }
    let count = match pop_count(args) {
        Ok(c) => c,
        Err(e) => return e,
    };
    match pop(&s.state, &s.exec, s.db, &args[1], left, count.unwrap_or(1)) {
        Ok(None) if count.is_some() => Reply::NullArray,
        Ok(Some(items)) if count.is_some() => Reply::Array(items.into_iter().map(Reply::Bulk).collect()),
        Ok(items) => items.and_then(|i| i.into_iter().next()).map_or(Reply::Null, Reply::Bulk),
        Err(e) => e,
    }
}

fn lpop(s: &mut Session, args: &[Bytes]) -> Reply {
    pop_cmd(s, args, true)
}

fn rpop(s: &mut Session, args: &[Bytes]) -> Reply {
    pop_cmd(s, args, false)
}

fn llen(s: &mut Session, args: &[Bytes]) -> Reply {
    match list_at(&s.state.storage.view(&s.exec, s.db), &args[1]) {
        Ok(m) => Reply::Integer(m.map_or(0, |m| Header::of(&m).count as i64)),
        Err(e) => e,
    }
}

/// The element index of list position `i` (negative from the end), if in range.
fn position(h: &Header, i: i64) -> Option<u64> {
    let len = h.count as i64;
    let i = if i < 0 { i + len } else { i };
    (0..len).contains(&i).then(|| h.head + i as u64)
}

fn lindex(s: &mut Session, args: &[Bytes]) -> Reply {
    let Some(i) = parse_i64(&args[2]) else { return Reply::error(NOT_INTEGER) };
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match list_at(&view, &args[1]) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::Null,
        Err(e) => return e,
    };
    match position(&Header::of(&meta), i) {
        Some(at) => match view.element(meta.uid, &index_key(at)) {
            Ok(v) => v.map_or(Reply::Null, Reply::Bulk),
            Err(e) => engine_error(e),
        },
        None => Reply::Null,
    }
}

fn lset(s: &mut Session, args: &[Bytes]) -> Reply {
    let Some(i) = parse_i64(&args[2]) else { return Reply::error(NOT_INTEGER) };
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match list_at(&view, &args[1]) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::error("ERR no such key"),
        Err(e) => return e,
    };
    let Some(at) = position(&Header::of(&meta), i) else { return Reply::error("ERR index out of range") };
    let mut b = lsm::WriteBatch::new();
    view.put_element(&mut b, meta.uid, &index_key(at), &args[3]);
    commit_event(s, b, Reply::ok(), (LIST, "lset"), &args[1], false)
}

/// Elements at positions `start..=end` (already clamped) of the list.
fn slice(view: &View, meta: &Meta, start: u64, end: u64, each: impl FnMut(&[u8])) -> Result<(), Reply> {
    let h = Header::of(meta);
    let from = index_key(h.head + start);
    let to = h.head.checked_add(end + 1).map(index_key);
    view.values_from(meta.uid, (&from, to.as_ref().map(|t| &t[..])), (end - start + 1) as usize, each)
        .map_err(engine_error)
}

/// Clamps Redis `start stop` indexes to `0..len`; `None` for an empty range.
fn clamp(start: i64, end: i64, len: i64) -> Option<(u64, u64)> {
    let start = if start < 0 { (start + len).max(0) } else { start };
    let end = if end < 0 { end + len } else { end.min(len - 1) };
    (start <= end && start < len).then_some((start as u64, end as u64))
}

fn lrange(s: &mut Session, args: &[Bytes]) -> Reply {
    let (Some(start), Some(end)) = (parse_i64(&args[2]), parse_i64(&args[3])) else {
        return Reply::error(NOT_INTEGER);
    };
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match list_at(&view, &args[1]) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::Array(Vec::new()),
        Err(e) => return e,
    };
    match clamp(start, end, Header::of(&meta).count as i64) {
        Some((a, b)) => {
            // Room for the elements of a typical short-valued list; the buffer grows as needed.
            let mut out = BulkArray::with_capacity(((b - a + 1) as usize * 16).min(1 << 16));
            slice(&view, &meta, a, b, |v| out.push(v)).map_or_else(|e| e, |()| Reply::Bulks(out))
        }
        None => Reply::Array(Vec::new()),
    }
}

/// Every element of the list, in order.
pub(super) fn all(view: &View, meta: &Meta) -> Result<Vec<Bytes>, Reply> {
    let n = Header::of(meta).count;
    let mut out = Vec::with_capacity(n.min(1 << 16) as usize);
    if n > 0 {
        slice(view, meta, 0, n - 1, |v| out.push(Bytes::copy_from_slice(v)))?;
    }
    Ok(out)
}

/// Replaces the list at `key` with `items` in place (same incarnation, indexes from `head`).
fn rewrite(view: &View, b: &mut lsm::WriteBatch, key: &[u8], meta: &Meta, old: &Header, items: &[Bytes]) {
    for i in old.head..old.tail {
        view.delete_element(b, meta.uid, &index_key(i));
    }
    let mut h = Header { count: items.len() as u64, head: old.head, tail: old.head + items.len() as u64, removed: 0 };
    for (i, v) in items.iter().enumerate() {
        view.put_element(b, meta.uid, &index_key(old.head + i as u64), v);
    }
    if items.is_empty() {
        h.count = 0;
    }
    store(view, b, key, meta, h);
}

fn linsert(s: &mut Session, args: &[Bytes]) -> Reply {
    let before = match String::from_utf8_lossy(&args[2]).to_ascii_lowercase().as_str() {
        "before" => true,
        "after" => false,
        _ => return Reply::error(SYNTAX),
    };
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match list_at(&view, &args[1]) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::Integer(0),
        Err(e) => return e,
    };
    let mut items = match all(&view, &meta) {
        Ok(i) => i,
        Err(e) => return e,
    };
    let Some(pivot) = items.iter().position(|v| v == &args[3]) else { return Reply::Integer(-1) };
    items.insert(if before { pivot } else { pivot + 1 }, args[4].clone());
    let mut b = lsm::WriteBatch::new();
    rewrite(&view, &mut b, &args[1], &meta, &Header::of(&meta), &items);
    commit_event(s, b, Reply::Integer(items.len() as i64), (LIST, "linsert"), &args[1], false)
}

fn lrem(s: &mut Session, args: &[Bytes]) -> Reply {
    let Some(count) = parse_i64(&args[2]) else { return Reply::error(NOT_INTEGER) };
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match list_at(&view, &args[1]) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::Integer(0),
        Err(e) => return e,
    };
    let items = match all(&view, &meta) {
        Ok(i) => i,
        Err(e) => return e,
    };
    let limit = if count == 0 { usize::MAX } else { count.unsigned_abs() as usize };
    let mut removed = 0;
    let mut keep = vec![true; items.len()];
    let order: Box<dyn Iterator<Item = usize>> =
        if count < 0 { Box::new((0..items.len()).rev()) } else { Box::new(0..items.len()) };
    for i in order {
        if removed == limit {
            break;
        }
        if items[i] == args[3] {
            keep[i] = false;
            removed += 1;
        }
    }
    if removed == 0 {
        return Reply::Integer(0);
    }
    let kept: Vec<Bytes> = items.into_iter().zip(keep).filter_map(|(v, k)| k.then_some(v)).collect();
    let mut b = lsm::WriteBatch::new();
    rewrite(&view, &mut b, &args[1], &meta, &Header::of(&meta), &kept);
    commit_event(s, b, Reply::Integer(removed as i64), (LIST, "lrem"), &args[1], kept.is_empty())
}

fn ltrim(s: &mut Session, args: &[Bytes]) -> Reply {
    let (Some(start), Some(end)) = (parse_i64(&args[2]), parse_i64(&args[3])) else {
        return Reply::error(NOT_INTEGER);
    };
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match list_at(&view, &args[1]) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::ok(),
        Err(e) => return e,
    };
    let h = Header::of(&meta);
    let mut b = lsm::WriteBatch::new();
    let keep = clamp(start, end, h.count as i64);
    let (new_head, new_tail) = match keep {
        Some((a, z)) => (h.head + a, h.head + z + 1),
        None => (h.head, h.head),
    };
    for i in (h.head..new_head).chain(new_tail..h.tail) {
        view.delete_element(&mut b, meta.uid, &index_key(i));
    }
    let nh = Header { count: new_tail - new_head, head: new_head, tail: new_tail, removed: 0 };
    store(&view, &mut b, &args[1], &meta, nh);
    commit_event(s, b, Reply::ok(), (LIST, "ltrim"), &args[1], nh.count == 0)
}

/// `LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]`.
fn lpos(s: &mut Session, args: &[Bytes]) -> Reply {
    let (mut rank, mut count, mut maxlen) = (1i64, None, 0i64);
    let mut i = 3;
    while i < args.len() {
        let Some(value) = args.get(i + 1) else { return Reply::error(SYNTAX) };
        let Some(n) = parse_i64(value) else { return Reply::error(NOT_INTEGER) };
        match String::from_utf8_lossy(&args[i]).to_ascii_lowercase().as_str() {
            "rank" => {
                if n == 0 {
                    return Reply::error("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list");
                }
                if n == i64::MIN {
                    return Reply::error("ERR value is out of range");
                }
                rank = n;
            }
            "count" if n < 0 => return Reply::error("ERR COUNT can't be negative"),
            "count" => count = Some(n),
            "maxlen" if n < 0 => return Reply::error("ERR MAXLEN can't be negative"),
            "maxlen" => maxlen = n,
            _ => return Reply::error(SYNTAX),
        }
        i += 2;
    }
    let view = s.state.storage.view(&s.exec, s.db);
    let items = match list_at(&view, &args[1]) {
        Ok(Some(m)) => match all(&view, &m) {
            Ok(i) => i,
            Err(e) => return e,
        },
        Ok(None) => Vec::new(),
        Err(e) => return e,
    };
    let len = items.len();
    let order: Box<dyn Iterator<Item = usize>> = if rank < 0 { Box::new((0..len).rev()) } else { Box::new(0..len) };
    let limit = if maxlen == 0 { usize::MAX } else { maxlen as usize };
    let want = match count {
        Some(0) => usize::MAX,
        Some(c) => c as usize,
        None => 1,
    };
    let mut skip = rank.unsigned_abs() - 1;
    let mut found = Vec::new();
    for idx in order.take(limit) {
        if items[idx] == args[2] {
            if skip > 0 {
                skip -= 1;
                continue;
            }
            found.push(idx as i64);
            if found.len() == want {
                break;
            }
        }
    }
    match count {
        Some(_) => Reply::Array(found.into_iter().map(Reply::Integer).collect()),
        None => found.first().map_or(Reply::Null, |&i| Reply::Integer(i)),
    }
}

pub(super) fn side(arg: &[u8]) -> Option<bool> {
    match String::from_utf8_lossy(arg).to_ascii_lowercase().as_str() {
        "left" => Some(true),
        "right" => Some(false),
        _ => None,
    }
}

fn lmove_generic(s: &mut Session, src: &Bytes, dst: &Bytes, from_left: bool, to_left: bool) -> Reply {
    match move_one(&s.state, &s.exec, s.db, src, dst, from_left, to_left) {
        Ok(Some(v)) => {
            s.signal(dst);
            Reply::Bulk(v)
        }
        Ok(None) => Reply::Null,
        Err(e) => e,
    }
}

fn lmove(s: &mut Session, args: &[Bytes]) -> Reply {
    let (Some(from), Some(to)) = (side(&args[3]), side(&args[4])) else { return Reply::error(SYNTAX) };
    lmove_generic(s, &args[1], &args[2], from, to)
}

fn rpoplpush(s: &mut Session, args: &[Bytes]) -> Reply {
    lmove_generic(s, &args[1], &args[2], false, true)
}

/// Pops from `key` for LMPOP-style replies: `[key, [elements…]]`, or `None` if it is empty.
pub(super) fn mpop_key(
    state: &ServerState,
    cx: &ExecContext,
    db: u32,
    key: &Bytes,
    left: bool,
    count: usize,
) -> Result<Option<Reply>, Reply> {
    let items = pop(state, cx, db, key, left, count)?.unwrap_or_default();
    Ok((!items.is_empty()).then(|| {
        Reply::Array(vec![Reply::Bulk(key.clone()), Reply::Array(items.into_iter().map(Reply::Bulk).collect())])
    }))
}

fn lmpop(s: &mut Session, args: &[Bytes]) -> Reply {
    let (keys, left, count) = match mpop_args(&args[1..], ["left", "right"]) {
        Ok(a) => a,
        Err(e) => return e,
    };
    let view = s.state.storage.view(&s.exec, s.db);
    for key in keys {
        if let Err(e) = list_at(&view, key) {
            return e;
        }
    }
    for key in keys {
        match mpop_key(&s.state, &s.exec, s.db, key, left, count) {
            Ok(Some(r)) => return r,
            Ok(None) => {}
            Err(e) => return e,
        }
    }
    Reply::NullArray
}

#[cfg(test)]
mod tests {
    use super::clamp;

    #[test]
    fn ranges_clamp_like_redis() {
        assert_eq!(clamp(0, -1, 5), Some((0, 4)));
        assert_eq!(clamp(-2, -1, 5), Some((3, 4)));
        assert_eq!(clamp(-100, 100, 5), Some((0, 4)));
        assert_eq!(clamp(3, 1, 5), None);
        assert_eq!(clamp(5, 10, 5), None);
        assert_eq!(clamp(0, -6, 5), None);
        assert_eq!(clamp(0, 0, 0), None);
    }
}
