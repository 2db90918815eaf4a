//! Sets: SADD, SREM, SCARD, SISMEMBER, SMISMEMBER, SMEMBERS, SMOVE, SPOP, SRANDMEMBER, SINTER,
//! SINTERCARD, SINTERSTORE, SUNION, SUNIONSTORE, SDIFF, SDIFFSTORE, SSCAN. Each member is one
//! record with an empty value: its pick record (`storage/picks/mod.rs`).

use std::collections::BTreeSet;
use std::ops::Bound;

use bytes::Bytes;

use super::collections::{
    commit_event, fetch, fetch_or_create, pop_count, random_reply, scan_command, store, NOT_INTEGER, SYNTAX,
};
use super::{engine_error, parse_i64, spec, CommandSpec, Session, ONE_KEY};
use crate::resp::{BulkArray, Reply};
use crate::services::notifications::{GENERIC, SET};
use crate::storage::{Header, KeyType, Meta, View};

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("sadd", -3, &["write", "denyoom", "fast"], ONE_KEY, sadd),
    spec("srem", -3, &["write", "fast"], ONE_KEY, srem),
    spec("scard", 2, &["readonly", "fast"], ONE_KEY, scard),
    spec("sismember", 3, &["readonly", "fast"], ONE_KEY, sismember),
    spec("smismember", -3, &["readonly", "fast"], ONE_KEY, smismember),
    spec("smembers", 2, &["readonly"], ONE_KEY, smembers),
    spec("smove", 4, &["write", "fast"], (1, 2, 1), smove),
    spec("spop", -2, &["write", "fast"], ONE_KEY, spop),
    spec("srandmember", -2, &["readonly"], ONE_KEY, srandmember),
    spec("sinter", -2, &["readonly"], (1, -1, 1), sinter),
    spec("sintercard", -3, &["readonly"], (0, 0, 0), sintercard),
    spec("sinterstore", -3, &["write", "denyoom"], (1, -1, 1), sinterstore),
    spec("sunion", -2, &["readonly"], (1, -1, 1), sunion),
    spec("sunionstore", -3, &["write", "denyoom"], (1, -1, 1), sunionstore),
    spec("sdiff", -2, &["readonly"], (1, -1, 1), sdiff),
    spec("sdiffstore", -3, &["write", "denyoom"], (1, -1, 1), sdiffstore),
    spec("sscan", -3, &["readonly"], ONE_KEY, sscan),
];

fn set_at(view: &View, key: &[u8]) -> Result<Option<Meta>, Reply> {
    fetch(view, key, KeyType::Set)
}

/// Every member of the set at `key` (empty if absent).
fn members(view: &View, key: &[u8]) -> Result<BTreeSet<Bytes>, Reply> {
    let Some(meta) = set_at(view, key)? else { return Ok(BTreeSet::new()) };
    view.members(meta.uid, Bound::Unbounded)
        .map(|kv| kv.map(|(m, _)| m))
        .collect::<lsm::Result<_>>()
        .map_err(engine_error)
}

fn sadd(s: &mut Session, args: &[Bytes]) -> Reply {
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let mut b = lsm::WriteBatch::new();
    let meta = match fetch_or_create(&view, &mut b, &args[1], KeyType::Set) {
        Ok(m) => m,
        Err(e) => return e,
    };
    let mut header = Header::of(&meta);
    let mut added = BTreeSet::new();
    for m in &args[2..] {
        if added.contains(m) {
            continue;
        }
        let exists = match header.count {
            0 => false,
            _ => match view.member(meta.uid, m) {
                Ok(v) => v.is_some(),
                Err(e) => return engine_error(e),
            },
        };
        if !exists {
            view.add_member(&mut b, meta.uid, m, b"");
            added.insert(m.clone());
        }
    }
    header.count += added.len() as u64;
    if added.is_empty() {
        return Reply::Integer(0);
    }
    store(&view, &mut b, &args[1], &meta, header);
    commit_event(s, b, Reply::Integer(added.len() as i64), (SET, "sadd"), &args[1], false)
}

/// Removes `targets` from the set at `key` in `batch`; returns how many were there.
fn remove_members(
    view: &View,
    b: &mut lsm::WriteBatch,
    key: &[u8],
    meta: &Meta,
    targets: &[Bytes],
) -> Result<usize, Reply> {
    let mut present = BTreeSet::new();
    for m in targets {
        if !present.contains(m) && view.member(meta.uid, m).map_err(engine_error)?.is_some() {
            present.insert(m.clone());
        }
    }
    remove_known(view, b, key, meta, present.iter());
    Ok(present.len())
}

/// Removes `members`, distinct members of the set at `key`, in `batch`.
fn remove_known<'m>(
    view: &View,
    b: &mut lsm::WriteBatch,
    key: &[u8],
    meta: &Meta,
    members: impl ExactSizeIterator<Item = &'m Bytes>,
) {
    let n = members.len() as u64;
    if n == 0 {
        return;
    }
    for m in members {
        view.remove_member(b, meta.uid, m);
    }
    let mut header = Header::of(meta);
    header.count -= n;
    header.removed += n;
    store(view, b, key, meta, header);
}

fn srem(s: &mut Session, args: &[Bytes]) -> Reply {
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match set_at(&view, &args[1]) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::Integer(0),
        Err(e) => return e,
    };
    let mut b = lsm::WriteBatch::new();
    match remove_members(&view, &mut b, &args[1], &meta, &args[2..]) {
        Ok(n) => {
            let emptied = Header::of(&meta).count == n as u64;
            commit_event(s, b, Reply::Integer(n as i64), (SET, "srem"), &args[1], emptied)
        }
        Err(e) => e,
    }
}

fn scard(s: &mut Session, args: &[Bytes]) -> Reply {
    match set_at(&s.state.storage.view(&s.exec, s.db), &args[1]) {
        Ok(m) => Reply::Integer(m.map_or(0, |m| Header::of(&m).count as i64)),
        Err(e) => e,
    }
}

fn is_member(view: &View, meta: &Option<Meta>, member: &[u8]) -> Result<bool, Reply> {
    match meta {
        Some(m) => Ok(view.member(m.uid, member).map_err(engine_error)?.is_some()),
        None => Ok(false),
    }
}

fn sismember(s: &mut Session, args: &[Bytes]) -> Reply {
    let view = s.state.storage.view(&s.exec, s.db);
    let result = set_at(&view, &args[1]).and_then(|m| is_member(&view, &m, &args[2]));
    result.map_or_else(|e| e, |b| Reply::Integer(i64::from(b)))
}

fn smismember(s: &mut Session, args: &[Bytes]) -> Reply {
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match set_at(&view, &args[1]) {
        Ok(m) => m,
        Err(e) => return e,
    };
    let mut out = Vec::new();
    for m in &args[2..] {
        match is_member(&view, &meta, m) {
            Ok(b) => out.push(Reply::Integer(i64::from(b))),
            Err(e) => return e,
        }
    }
    Reply::Array(out)
}

fn set_reply(members: impl IntoIterator<Item = Bytes>) -> Reply {
    Reply::Set(members.into_iter().map(Reply::Bulk).collect())
}

fn smembers(s: &mut Session, args: &[Bytes]) -> Reply {
    // Straight into the reply: the engine hands the members out sorted and once each.
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match set_at(&view, &args[1]) {
        Ok(Some(meta)) => meta,
        Ok(None) => return Reply::Set(Vec::new()),
        Err(e) => return e,
    };
    let mut out = BulkArray::set_with_capacity(1024);
    view.each_member(meta.uid, Header::of(&meta).count, |m, _| out.push(m))
        .map_or_else(engine_error, |()| Reply::Bulks(out))
}

fn smove(s: &mut Session, args: &[Bytes]) -> Reply {
    let (src, dst, member) = (&args[1], &args[2], &args[3]);
    let _guard = s.state.storage.lock(&s.exec, s.db, [&src[..], &dst[..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let (src_meta, dst_meta) = match (set_at(&view, src), set_at(&view, dst)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let Some(src_meta) = src_meta else { return Reply::Integer(0) };
    match is_member(&view, &Some(src_meta.clone()), member) {
        Ok(false) => return Reply::Integer(0),
        Ok(true) => {}
        Err(e) => return e,
    }
    if src == dst {
        return Reply::Integer(1);
    }
    let mut b = lsm::WriteBatch::new();
    if let Err(e) = remove_members(&view, &mut b, src, &src_meta, std::slice::from_ref(member)) {
        return e;
    }
    let dst_meta = dst_meta.unwrap_or_else(|| view.create(&mut b, dst, KeyType::Set));
    let mut header = Header::of(&dst_meta);
    let added = match is_member(&view, &Some(dst_meta.clone()), member) {
        Ok(true) => false,
        Ok(false) => {
            view.add_member(&mut b, dst_meta.uid, member, b"");
            header.count += 1;
            store(&view, &mut b, dst, &dst_meta, header);
            true
        }
        Err(e) => return e,
    };
    let mark = s.exec.event_mark();
    if let Err(e) = s.state.storage.write(&s.exec, b) {
        return engine_error(e);
    }
    // Redis's order: the source's events, then the destination's creation and `sadd`.
    let created = s.exec.events_since(mark);
    s.notify(SET, "srem", src);
    if Header::of(&src_meta).count == 1 {
        s.notify(GENERIC, "del", src);
    }
    s.exec.restore_events(created);
    if added {
        s.notify(SET, "sadd", dst);
    }
    Reply::Integer(1)
}

fn spop(s: &mut Session, args: &[Bytes]) -> Reply {
    let count = match pop_count(args) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match set_at(&view, &args[1]) {
        Ok(Some(m)) => m,
        Ok(None) => return if count.is_some() { Reply::Set(Vec::new()) } else { Reply::Null },
        Err(e) => return e,
    };
    let picked = match view.pop_random(&args[1], &meta, count) {
        Ok(p) => p,
        Err(e) => return engine_error(e),
    };
    // Picked members are members (and distinct): no need to look them up again.
    let mut b = lsm::WriteBatch::new();
    remove_known(&view, &mut b, &args[1], &meta, picked.iter());
    let emptied = Header::of(&meta).count == picked.len() as u64;
    let reply = match count {
        Some(_) => set_reply(picked),
        None => picked.into_iter().next().map_or(Reply::Null, Reply::Bulk),
    };
    commit_event(s, b, reply, (SET, "spop"), &args[1], emptied)
}

fn srandmember(s: &mut Session, args: &[Bytes]) -> Reply {
    let count = match args.len() {
        2 => None,
        3 => match parse_i64(&args[2]) {
            Some(n) if n >= -(i64::MAX / 2) => Some(n),
            Some(_) => return Reply::error("ERR value is out of range"),
            None => return Reply::error(NOT_INTEGER),
        },
        _ => return Reply::error(SYNTAX),
    };
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match set_at(&view, &args[1]) {
        Ok(m) => m,
        Err(e) => return e,
    };
    random_reply(&view, &args[1], meta.as_ref(), count, false, Reply::Bulk)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Inter,
    Union,
    Diff,
}

/// The result of `op` over the sets at `keys` (missing keys are empty sets).
fn combine(view: &View, keys: &[Bytes], op: Op) -> Result<BTreeSet<Bytes>, Reply> {
    // Check every type first: WRONGTYPE wins over an empty intersection.
    let mut sets = Vec::with_capacity(keys.len());
    for k in keys {
        sets.push(set_at(view, k)?);
    }
    let mut acc: Option<BTreeSet<Bytes>> = None;
    for (k, meta) in keys.iter().zip(&sets) {
        if op == Op::Inter && meta.is_none() {
            return Ok(BTreeSet::new());
        }
        let these = if meta.is_some() { members(view, k)? } else { BTreeSet::new() };
        acc = Some(match (acc, op) {
            (None, _) => these,
            (Some(a), Op::Inter) => a.intersection(&these).cloned().collect(),
            (Some(mut a), Op::Union) => {
                a.extend(these);
                a
            }
            (Some(a), Op::Diff) => a.difference(&these).cloned().collect(),
        });
    }
    Ok(acc.unwrap_or_default())
}

fn read_op(s: &Session, keys: &[Bytes], op: Op) -> Reply {
    combine(&s.state.storage.view(&s.exec, s.db), keys, op).map_or_else(|e| e, set_reply)
}

/// Replaces whatever `dest` holds with a set of `members` (deleting it if there are none);
/// keyspace event `event` for it, or `del` if it existed and is now gone.
fn store_set(s: &Session, dest: &[u8], members: &BTreeSet<Bytes>, event: &'static str) -> Reply {
    let view = s.state.storage.view(&s.exec, s.db);
    let mut b = lsm::WriteBatch::new();
    if members.is_empty() {
        match s.state.storage.get(&s.exec, s.db, dest) {
            Ok(Some(_)) => view.delete_meta(&mut b, dest),
            Ok(None) => return Reply::Integer(0),
            Err(e) => return engine_error(e),
        }
        return commit_event(s, b, Reply::Integer(0), (GENERIC, "del"), dest, false);
    }
    let meta = view.create(&mut b, dest, KeyType::Set);
    for m in members {
        view.add_member(&mut b, meta.uid, m, b"");
    }
    store(&view, &mut b, dest, &meta, Header { count: members.len() as u64, ..Header::default() });
    commit_event(s, b, Reply::Integer(members.len() as i64), (SET, event), dest, false)
}

fn store_op(s: &Session, args: &[Bytes], op: Op) -> Reply {
    let _guard = s.state.storage.lock(&s.exec, s.db, args[1..].iter().map(|k| &k[..]));
    let event = match op {
        Op::Inter => "sinterstore",
        Op::Union => "sunionstore",
        Op::Diff => "sdiffstore",
    };
    match s.exec.as_read(|| combine(&s.state.storage.view(&s.exec, s.db), &args[2..], op)) {
        Ok(result) => store_set(s, &args[1], &result, event),
        Err(e) => e,
    }
}

fn sinter(s: &mut Session, args: &[Bytes]) -> Reply {
    read_op(s, &args[1..], Op::Inter)
}

fn sunion(s: &mut Session, args: &[Bytes]) -> Reply {
    read_op(s, &args[1..], Op::Union)
}

fn sdiff(s: &mut Session, args: &[Bytes]) -> Reply {
    read_op(s, &args[1..], Op::Diff)
}

fn sinterstore(s: &mut Session, args: &[Bytes]) -> Reply {
    store_op(s, args, Op::Inter)
}

fn sunionstore(s: &mut Session, args: &[Bytes]) -> Reply {
    store_op(s, args, Op::Union)
}

fn sdiffstore(s: &mut Session, args: &[Bytes]) -> Reply {
    store_op(s, args, Op::Diff)
}

/// `numkeys key … [LIMIT n]` of SINTERCARD / ZINTERCARD: the keys and the limit (0 = none).
pub(super) fn numkeys_and_limit(args: &[Bytes]) -> Result<(&[Bytes], usize), Reply> {
    let n = parse_i64(&args[1]).unwrap_or(0);
    if n <= 0 {
        return Err(Reply::error("ERR numkeys should be greater than 0"));
    }
    let n = n as usize;
    if n > args.len() - 2 {
        return Err(Reply::error("ERR Number of keys can't be greater than number of args"));
    }
    let keys = &args[2..2 + n];
    let mut limit = 0;
    let mut rest = &args[2 + n..];
    while let [opt, tail @ ..] = rest {
        match (String::from_utf8_lossy(opt).to_ascii_lowercase().as_str(), tail) {
            ("limit", [value, more @ ..]) => {
                // Redis answers a limit that is not a number like a negative one.
                let l = parse_i64(value).filter(|&l| l >= 0);
                let Some(l) = l else { return Err(Reply::error("ERR LIMIT can't be negative")) };
                limit = l as usize;
                rest = more;
            }
            _ => return Err(Reply::error(SYNTAX)),
        }
    }
    Ok((keys, limit))
}

fn sintercard(s: &mut Session, args: &[Bytes]) -> Reply {
    let (keys, limit) = match numkeys_and_limit(args) {
        Ok(k) => k,
        Err(e) => return e,
    };
    match combine(&s.state.storage.view(&s.exec, s.db), keys, Op::Inter) {
        Ok(r) => Reply::Integer(if limit > 0 { r.len().min(limit) } else { r.len() } as i64),
        Err(e) => e,
    }
}

fn sscan(s: &mut Session, args: &[Bytes]) -> Reply {
    scan_command(s, args, KeyType::Set, false, |member, _, _, out| out.push(Reply::Bulk(member)))
}
