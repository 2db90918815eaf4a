//! Ranges of sorted sets: ZRANGE (BYSCORE BYLEX REV LIMIT WITHSCORES) and its older forms,
//! ZRANGESTORE, ZCOUNT, ZLEXCOUNT and the ZREMRANGEBY* commands.

use bytes::Bytes;

use super::{zset, ZWrite};
use crate::commands::collections::{commit_event, store, NOT_INTEGER, SYNTAX};
use crate::commands::{engine_error, parse_i64, Session};
use crate::resp::{BulkArray, Reply};
use crate::services::notifications::{GENERIC, ZSET};
use crate::storage::{Header, KeyType, Meta, View};

/// One end of a score range.
#[derive(Debug, Clone, Copy)]
struct ScoreBound {
    value: f64,
    exclusive: bool,
}

fn parse_score_bound(arg: &[u8]) -> Result<ScoreBound, Reply> {
    let bad = || Reply::error("ERR min or max is not a float");
    let (exclusive, text) = match arg.first() {
        Some(b'(') => (true, &arg[1..]),
        _ => (false, arg),
    };
    let value = crate::num::parse_float(text).ok_or_else(bad)?;
    Ok(ScoreBound { value, exclusive })
}

impl ScoreBound {
    fn above_min(&self, score: f64) -> bool {
        if self.exclusive {
            score > self.value
        } else {
            score >= self.value
        }
    }

    fn below_max(&self, score: f64) -> bool {
        if self.exclusive {
            score < self.value
        } else {
            score <= self.value
        }
    }
}

/// One end of a lexicographic range.
#[derive(Debug, Clone)]
enum LexBound {
    NegInf,
    PosInf,
    Inclusive(Bytes),
    Exclusive(Bytes),
}

fn parse_lex_bound(arg: &Bytes) -> Result<LexBound, Reply> {
    match arg.first() {
        Some(b'-') if arg.len() == 1 => Ok(LexBound::NegInf),
        Some(b'+') if arg.len() == 1 => Ok(LexBound::PosInf),
        Some(b'[') => Ok(LexBound::Inclusive(arg.slice(1..))),
        Some(b'(') => Ok(LexBound::Exclusive(arg.slice(1..))),
        _ => Err(Reply::error("ERR min or max not valid string range item")),
    }
}

impl LexBound {
    fn above_min(&self, m: &[u8]) -> bool {
        match self {
            LexBound::NegInf => true,
            LexBound::PosInf => false,
            LexBound::Inclusive(b) => m >= &b[..],
            LexBound::Exclusive(b) => m > &b[..],
        }
    }

    fn below_max(&self, m: &[u8]) -> bool {
        match self {
            LexBound::NegInf => false,
            LexBound::PosInf => true,
            LexBound::Inclusive(b) => m <= &b[..],
            LexBound::Exclusive(b) => m < &b[..],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    Rank,
    Score,
    Lex,
}

/// A parsed range request: what to select, in which direction, how many.
struct Query {
    by: By,
    rev: bool,
    start: Bytes,
    stop: Bytes,
    limit: Option<(i64, i64)>,
    withscores: bool,
}

/// Checks the range arguments before the key is even looked up (Redis answers a bad range with
/// its error whatever the key holds).
fn validate(q: &Query) -> Result<(), Reply> {
    match q.by {
        By::Rank => {
            parse_i64(&q.start).zip(parse_i64(&q.stop)).ok_or_else(|| Reply::error(NOT_INTEGER))?;
        }
        By::Score => {
            parse_score_bound(&q.start)?;
            parse_score_bound(&q.stop)?;
        }
        By::Lex => {
            parse_lex_bound(&q.start)?;
            parse_lex_bound(&q.stop)?;
        }
    }
    Ok(())
}

/// The (member, score) pairs `q` selects from the sorted set `meta`.
fn select(view: &View, meta: &Meta, q: &Query) -> Result<Vec<(Bytes, f64)>, Reply> {
    let mut out = Vec::new();
    select_each(view, meta, q, &mut |m, sc| out.push((Bytes::copy_from_slice(m), sc)))?;
    Ok(out)
}

/// Calls `each(member, score)` for the pairs `q` selects from the sorted set `meta`, in order.
fn select_each(view: &View, meta: &Meta, q: &Query, each: &mut dyn FnMut(&[u8], f64)) -> Result<(), Reply> {
    let len = Header::of(meta).count as i64;
    let (offset, count) = match q.limit {
        Some((o, _)) if o < 0 => return Ok(()),
        Some((o, c)) => (o as usize, if c < 0 { usize::MAX } else { c as usize }),
        None => (0, usize::MAX),
    };
    let mut taken = 0;
    match q.by {
        By::Rank => {
            let (Some(mut start), Some(mut end)) = (parse_i64(&q.start), parse_i64(&q.stop)) else {
                return Err(Reply::error(NOT_INTEGER));
            };
            if start < 0 {
                start += len;
            }
            if end < 0 {
                end += len;
            }
            start = start.max(0);
            if start > end || start >= len {
                return Ok(());
            }
            end = end.min(len - 1);
            let take = (end - start + 1) as usize;
            if q.rev {
                for item in view.scores(meta, None).rev().skip(start as usize).take(take) {
                    let (sc, m) = item.map_err(engine_error)?;
                    each(&m, sc);
                }
            } else {
                // The members borrowed from one engine cursor, straight into the reply.
                let (mut at, end) = (0, start as usize + take);
                view.each_score(meta, None, |sc, m| {
                    if at >= start as usize {
                        each(m, sc);
                    }
                    at += 1;
                    at < end
                })
                .map_err(engine_error)?;
            }
        }
        By::Score => {
            let (min, max) = if q.rev { (&q.stop, &q.start) } else { (&q.start, &q.stop) };
            let (min, max) = (parse_score_bound(min)?, parse_score_bound(max)?);
            let mut skipped = 0;
            let mut visit = |sc: f64, m: &[u8]| -> bool {
                if skipped < offset {
                    skipped += 1;
                    return true;
                }
                if taken >= count {
                    return false;
                }
                each(m, sc);
                taken += 1;
                true
            };
            if q.rev {
                for item in view.scores(meta, None).rev() {
                    let (sc, m) = item.map_err(engine_error)?;
                    if !max.below_max(sc) {
                        continue;
                    }
                    if !min.above_min(sc) || !visit(sc, &m) {
                        break;
                    }
                }
            } else {
                let from = (min.value > f64::NEG_INFINITY).then_some(min.value);
                view.each_score(meta, from, |sc, m| {
                    if !min.above_min(sc) {
                        return true; // at an excluded minimum: step past it
                    }
                    max.below_max(sc) && visit(sc, m)
                })
                .map_err(engine_error)?;
            }
        }
        By::Lex => {
            // Lex ranges assume equal scores (then score order is member order). Walking the
            // score index as Redis walks its compact encoding keeps the answers identical even
            // when the scores differ: skip to the first member inside the low bound, then take
            // members until one falls outside the high bound.
            let (min, max) = if q.rev { (&q.stop, &q.start) } else { (&q.start, &q.stop) };
            let (min, max) = (parse_lex_bound(min)?, parse_lex_bound(max)?);
            let (enter, stay): (&LexBound, &LexBound) = if q.rev { (&max, &min) } else { (&min, &max) };
            let inside_enter = |m: &[u8]| if q.rev { enter.below_max(m) } else { enter.above_min(m) };
            let inside_stay = |m: &[u8]| if q.rev { stay.above_min(m) } else { stay.below_max(m) };
            // Redis first checks that the range overlaps [first member, last member] at all.
            let first = view.scores(meta, None).next().transpose().map_err(engine_error)?;
            let last = view.scores(meta, None).next_back().transpose().map_err(engine_error)?;
            match (first, last) {
                (Some((_, f)), Some((_, l))) if max.below_max(&f) && min.above_min(&l) => {}
                _ => return Ok(()),
            }
            let scores = view.scores(meta, None);
            let iter: Box<dyn Iterator<Item = lsm::Result<(f64, Bytes)>>> =
                if q.rev { Box::new(scores.rev()) } else { Box::new(scores) };
            let (mut entered, mut skipped) = (false, 0);
            for item in iter {
                let (sc, m) = item.map_err(engine_error)?;
                if !entered {
                    if !inside_enter(&m) {
                        continue;
                    }
                    entered = true;
                }
                if !inside_stay(&m) {
                    break;
                }
                if skipped < offset {
                    skipped += 1;
                    continue;
                }
                if taken >= count {
                    break;
                }
                each(&m, sc);
                taken += 1;
            }
        }
    }
    Ok(())
}

/// Parses `[BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES]` after `start stop`.
fn parse_query(args: &[Bytes], allow_withscores: bool) -> Result<Query, Reply> {
    let mut q = Query {
        by: By::Rank,
        rev: false,
        start: args[0].clone(),
        stop: args[1].clone(),
        limit: None,
        withscores: false,
    };
    let mut i = 2;
    while i < args.len() {
        match String::from_utf8_lossy(&args[i]).to_ascii_lowercase().as_str() {
            "byscore" => q.by = By::Score,
            "bylex" => q.by = By::Lex,
            "rev" => q.rev = true,
            "withscores" if allow_withscores => q.withscores = true,
            "limit" if i + 2 < args.len() => {
                let (Some(o), Some(c)) = (parse_i64(&args[i + 1]), parse_i64(&args[i + 2])) else {
                    return Err(Reply::error(NOT_INTEGER));
                };
                q.limit = Some((o, c));
                i += 2;
            }
            _ => return Err(Reply::error(SYNTAX)),
        }
        i += 1;
    }
    if q.limit.is_some() && q.by == By::Rank {
        return Err(Reply::error(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if q.withscores && q.by == By::Lex {
        return Err(Reply::error("ERR syntax error, WITHSCORES not supported in combination with BYLEX"));
    }
    Ok(q)
}

/// The reply to a range query: the members framed as they are read, or (member, score) pairs.
fn reply(view: &View, meta: &Meta, q: &Query) -> Reply {
    let done = if q.withscores {
        let mut pairs = Vec::new();
        select_each(view, meta, q, &mut |m, sc| pairs.push((Reply::Bulk(Bytes::copy_from_slice(m)), Reply::Double(sc))))
            .map(|()| Reply::Pairs(pairs))
    } else {
        let mut out = BulkArray::with_capacity(1024);
        select_each(view, meta, q, &mut |m, _| out.push(m)).map(|()| Reply::Bulks(out))
    };
    done.unwrap_or_else(|e| e)
}

fn run(s: &Session, key: &[u8], q: Query) -> Reply {
    if let Err(e) = validate(&q) {
        return e;
    }
    let view = s.state.storage.view(&s.exec, s.db);
    // Bad ranges are errors even on a missing key.
    let empty = Meta { kind: KeyType::ZSet, expire_at_ms: 0, uid: 0, body: Header::default().body(KeyType::ZSet) };
    let meta = match zset(&view, key) {
        Ok(m) => m,
        Err(e) => return e,
    };
    reply(&view, meta.as_ref().unwrap_or(&empty), &q)
}

pub(super) fn zrange(s: &mut Session, args: &[Bytes]) -> Reply {
    match parse_query(&args[2..], true) {
        Ok(q) => run(s, &args[1], q),
        Err(e) => e,
    }
}

/// The old forms: a fixed `by` and direction, then `[WITHSCORES] [LIMIT offset count]`.
fn legacy(s: &Session, args: &[Bytes], by: By, rev: bool) -> Reply {
    let mut q = Query { by, rev, start: args[2].clone(), stop: args[3].clone(), limit: None, withscores: false };
    let mut i = 4;
    while i < args.len() {
        match String::from_utf8_lossy(&args[i]).to_ascii_lowercase().as_str() {
            "withscores" if by != By::Lex => q.withscores = true,
            "limit" if by != By::Rank && i + 2 < args.len() => {
                let (Some(o), Some(c)) = (parse_i64(&args[i + 1]), parse_i64(&args[i + 2])) else {
                    return Reply::error(NOT_INTEGER);
                };
                q.limit = Some((o, c));
                i += 2;
            }
            _ => return Reply::error(SYNTAX),
        }
        i += 1;
    }
    run(s, &args[1], q)
}

pub(super) fn zrevrange(s: &mut Session, args: &[Bytes]) -> Reply {
    legacy(s, args, By::Rank, true)
}

pub(super) fn zrangebyscore(s: &mut Session, args: &[Bytes]) -> Reply {
    legacy(s, args, By::Score, false)
}

pub(super) fn zrevrangebyscore(s: &mut Session, args: &[Bytes]) -> Reply {
    legacy(s, args, By::Score, true)
}

pub(super) fn zrangebylex(s: &mut Session, args: &[Bytes]) -> Reply {
    legacy(s, args, By::Lex, false)
}

pub(super) fn zrevrangebylex(s: &mut Session, args: &[Bytes]) -> Reply {
    legacy(s, args, By::Lex, true)
}

/// Replaces whatever `dest` holds with a sorted set of `items` (deleting it if empty);
/// keyspace event `event` for it, or `del` if it existed and is now gone.
pub(super) fn store_zset(s: &Session, dest: &[u8], items: &[(Bytes, f64)], event: &'static str) -> Reply {
    let view = s.state.storage.view(&s.exec, s.db);
    let mut b = lsm::WriteBatch::new();
    if items.is_empty() {
        match s.state.storage.get(&s.exec, s.db, dest) {
            Ok(Some(_)) => view.delete_meta(&mut b, dest),
            Ok(None) => return Reply::Integer(0),
            Err(e) => return crate::commands::engine_error(e),
        }
        return commit_event(s, b, Reply::Integer(0), (GENERIC, "del"), dest, false);
    } else {
        let meta = view.create(&mut b, dest, KeyType::ZSet);
        for (m, sc) in items {
            view.add_member(&mut b, meta.uid, m, &crate::storage::encode_score(*sc));
            view.put_score(&mut b, meta.uid, *sc, m);
        }
        store(&view, &mut b, dest, &meta, Header { count: items.len() as u64, ..Header::default() });
    }
    commit_event(s, b, Reply::Integer(items.len() as i64), (ZSET, event), dest, false)
}

pub(super) fn zrangestore(s: &mut Session, args: &[Bytes]) -> Reply {
    let q = match parse_query(&args[3..], false).and_then(|q| validate(&q).map(|_| q)) {
        Ok(q) => q,
        Err(e) => return e,
    };
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..], &args[2][..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let source = s.exec.as_read(|| match zset(&view, &args[2])? {
        Some(meta) => select(&view, &meta, &q),
        None => Ok(Vec::new()),
    });
    let items = match source {
        Ok(i) => i,
        Err(e) => return e,
    };
    let reply = store_zset(s, &args[1], &items, "zrangestore");
    drop(_guard);
    s.signal(&args[1]);
    reply
}

fn count_generic(s: &Session, args: &[Bytes], by: By) -> Reply {
    let q = Query { by, rev: false, start: args[2].clone(), stop: args[3].clone(), limit: None, withscores: false };
    if let Err(e) = validate(&q) {
        return e;
    }
    let view = s.state.storage.view(&s.exec, s.db);
    let empty = Meta { kind: KeyType::ZSet, expire_at_ms: 0, uid: 0, body: Header::default().body(KeyType::ZSet) };
    let meta = match zset(&view, &args[1]) {
        Ok(m) => m,
        Err(e) => return e,
    };
    let mut n = 0;
    match select_each(&view, meta.as_ref().unwrap_or(&empty), &q, &mut |_, _| n += 1) {
        Ok(()) => Reply::Integer(n),
        Err(e) => e,
    }
}

pub(super) fn zcount(s: &mut Session, args: &[Bytes]) -> Reply {
    count_generic(s, args, By::Score)
}

pub(super) fn zlexcount(s: &mut Session, args: &[Bytes]) -> Reply {
    count_generic(s, args, By::Lex)
}

fn remove_range(s: &Session, args: &[Bytes], by: By) -> Reply {
    let q = Query { by, rev: false, start: args[2].clone(), stop: args[3].clone(), limit: None, withscores: false };
    if let Err(e) = validate(&q) {
        return e;
    }
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match zset(&view, &args[1]) {
        Ok(Some(m)) => m,
        Ok(None) => {
            // Still validate the range, as Redis does.
            let empty =
                Meta { kind: KeyType::ZSet, expire_at_ms: 0, uid: 0, body: Header::default().body(KeyType::ZSet) };
            return select(&view, &empty, &q).map_or_else(|e| e, |_| Reply::Integer(0));
        }
        Err(e) => return e,
    };
    let items = match select(&view, &meta, &q) {
        Ok(i) => i,
        Err(e) => return e,
    };
    let mut w = match ZWrite::open(view, &args[1]) {
        Ok(w) => w,
        Err(e) => return e,
    };
    for (m, sc) in &items {
        w.remove(m, *sc);
    }
    let event = match by {
        By::Rank => "zremrangebyrank",
        By::Score => "zremrangebyscore",
        By::Lex => "zremrangebylex",
    };
    w.commit(s, (!items.is_empty()).then_some(event), Reply::Integer(items.len() as i64))
}

pub(super) fn zremrangebyrank(s: &mut Session, args: &[Bytes]) -> Reply {
    remove_range(s, args, By::Rank)
}

pub(super) fn zremrangebyscore(s: &mut Session, args: &[Bytes]) -> Reply {
    remove_range(s, args, By::Score)
}

pub(super) fn zremrangebylex(s: &mut Session, args: &[Bytes]) -> Reply {
    remove_range(s, args, By::Lex)
}
