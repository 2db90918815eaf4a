//! Sorted sets. Each member is a record holding its order-preserving score (its pick record,
//! `storage/picks/mod.rs`, which ZSCORE and ZADD read), plus a score-index record `(score, member)`,
//! so ranges by score, rank and (among equal scores) member walk the index in order. Ranges and
//! parsing are in `range`, the multi-key algebra (ZUNION, ZINTER, ZDIFF and their STORE forms)
//! in `algebra`.

mod algebra;
pub(super) mod geo;
mod range;

use bytes::Bytes;

use super::collections::{commit_event, fetch, pop_count, store, SYNTAX};
use super::{engine_error, spec, CommandSpec, Session, ONE_KEY};
use crate::resp::Reply;
use crate::services::notifications::{GENERIC, ZSET};
use crate::storage::{decode_score, encode_score, Header, KeyType, Meta, ScoreBounds, View};

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("zadd", -4, &["write", "denyoom", "fast"], ONE_KEY, zadd),
    spec("zincrby", 4, &["write", "denyoom", "fast"], ONE_KEY, zincrby),
    spec("zrem", -3, &["write", "fast"], ONE_KEY, zrem),
    spec("zcard", 2, &["readonly", "fast"], ONE_KEY, zcard),
    spec("zscore", 3, &["readonly", "fast"], ONE_KEY, zscore),
    spec("zmscore", -3, &["readonly", "fast"], ONE_KEY, zmscore),
    spec("zrank", -3, &["readonly", "fast"], ONE_KEY, zrank),
    spec("zrevrank", -3, &["readonly", "fast"], ONE_KEY, zrevrank),
    spec("zpopmin", -2, &["write", "fast"], ONE_KEY, zpopmin),
    spec("zpopmax", -2, &["write", "fast"], ONE_KEY, zpopmax),
    spec("zmpop", -4, &["write"], (0, 0, 0), zmpop),
    spec("zrandmember", -2, &["readonly"], ONE_KEY, zrandmember),
    spec("bzpopmin", -3, &["write", "noscript", "blocking", "fast"], (1, -2, 1), bzpopmin),
    spec("bzpopmax", -3, &["write", "noscript", "blocking", "fast"], (1, -2, 1), bzpopmax),
    spec("bzmpop", -5, &["write", "blocking"], (0, 0, 0), bzmpop),
    spec("zscan", -3, &["readonly"], ONE_KEY, zscan),
    spec("zrange", -4, &["readonly"], ONE_KEY, range::zrange),
    spec("zrangestore", -5, &["write", "denyoom"], (1, 2, 1), range::zrangestore),
    spec("zrevrange", -4, &["readonly"], ONE_KEY, range::zrevrange),
    spec("zrangebyscore", -4, &["readonly"], ONE_KEY, range::zrangebyscore),
    spec("zrevrangebyscore", -4, &["readonly"], ONE_KEY, range::zrevrangebyscore),
    spec("zrangebylex", -4, &["readonly"], ONE_KEY, range::zrangebylex),
    spec("zrevrangebylex", -4, &["readonly"], ONE_KEY, range::zrevrangebylex),
    spec("zcount", 4, &["readonly", "fast"], ONE_KEY, range::zcount),
    spec("zlexcount", 4, &["readonly", "fast"], ONE_KEY, range::zlexcount),
    spec("zremrangebyrank", 4, &["write"], ONE_KEY, range::zremrangebyrank),
    spec("zremrangebyscore", 4, &["write"], ONE_KEY, range::zremrangebyscore),
    spec("zremrangebylex", 4, &["write"], ONE_KEY, range::zremrangebylex),
    spec("zunion", -3, &["readonly"], (0, 0, 0), algebra::zunion),
    spec("zinter", -3, &["readonly"], (0, 0, 0), algebra::zinter),
    spec("zdiff", -3, &["readonly"], (0, 0, 0), algebra::zdiff),
    spec("zunionstore", -4, &["write", "denyoom"], (1, 1, 1), algebra::zunionstore),
    spec("zinterstore", -4, &["write", "denyoom"], (1, 1, 1), algebra::zinterstore),
    spec("zdiffstore", -4, &["write", "denyoom"], (1, 1, 1), algebra::zdiffstore),
    spec("zintercard", -3, &["readonly"], (0, 0, 0), algebra::zintercard),
];

const NOT_FLOAT: &str = "ERR value is not a valid float";

/// A score argument (`inf`, `-inf`, `+inf` allowed; NaN is not).
fn parse_score(arg: &[u8]) -> Option<f64> {
    crate::num::parse_float(arg)
}

fn zset(view: &View, key: &[u8]) -> Result<Option<Meta>, Reply> {
    fetch(view, key, KeyType::ZSet)
}

/// A sorted set being changed by one command: its metadata, header, score bounds and pending
/// batch.
pub(super) struct ZWrite<'a> {
    pub view: View<'a>,
    pub key: &'a [u8],
    pub meta: Meta,
    pub header: Header,
    pub bounds: ScoreBounds,
    pub batch: lsm::WriteBatch,
}

impl<'a> ZWrite<'a> {
    /// Opens the sorted set at `key` for writing (a new incarnation if absent).
    pub fn open(view: View<'a>, key: &'a [u8]) -> Result<ZWrite<'a>, Reply> {
        if let Some(meta) = zset(&view, key)? {
            return Ok(ZWrite::of(view, key, meta));
        }
        let mut batch = lsm::WriteBatch::new();
        let meta = view.create(&mut batch, key, KeyType::ZSet);
        Ok(ZWrite { batch, ..ZWrite::of(view, key, meta) })
    }

    /// Opens the sorted set at `key` whose metadata was just read as `meta`.
    pub fn of(view: View<'a>, key: &'a [u8], meta: Meta) -> ZWrite<'a> {
        let (header, bounds) = (Header::of(&meta), ScoreBounds::of(&meta));
        ZWrite { view, key, meta, header, bounds, batch: lsm::WriteBatch::new() }
    }

    /// The current score of `member`.
    pub fn score(&self, member: &[u8]) -> Result<Option<f64>, Reply> {
        if self.header.count == 0 {
            return Ok(None);
        }
        Ok(self.view.member(self.meta.uid, member).map_err(engine_error)?.map(|v| decode_score(&v)))
    }

    /// Sets `member` to `score` (`old` is its current score, if any).
    pub fn set(&mut self, member: &[u8], score: f64, old: Option<f64>) {
        match old {
            Some(o) => self.view.delete_score(&mut self.batch, self.meta.uid, o, member),
            None => self.header.count += 1,
        }
        self.view.add_member(&mut self.batch, self.meta.uid, member, &encode_score(score));
        self.view.put_score(&mut self.batch, self.meta.uid, score, member);
        self.bounds.include(score, member);
    }

    /// Removes `member`, whose score is `score`.
    pub fn remove(&mut self, member: &[u8], score: f64) {
        self.view.remove_member(&mut self.batch, self.meta.uid, member);
        self.view.delete_score(&mut self.batch, self.meta.uid, score, member);
        self.header.count -= 1;
        self.header.removed += 1;
    }

    /// Adds the metadata (or the key's deletion if it became empty) to the batch.
    fn store(&mut self) {
        let meta = Meta { body: self.bounds.body(&self.header), ..self.meta.clone() };
        store(&self.view, &mut self.batch, self.key, &meta, self.header);
    }

    /// Commits the changes, if there are any (`event`: the keyspace event they are), deleting
    /// the key if it became empty, and answers `reply`.
    pub fn commit(mut self, s: &Session, event: Option<&'static str>, reply: Reply) -> Reply {
        match event {
            Some(event) => {
                self.store();
                commit_event(s, self.batch, reply, (ZSET, event), self.key, self.header.count == 0)
            }
            None => reply,
        }
    }
}

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member …]`.
fn zadd(s: &mut Session, args: &[Bytes]) -> Reply {
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) = (false, false, false, false, false, false);
    let mut i = 2;
    while i < args.len() {
        match String::from_utf8_lossy(&args[i]).to_ascii_lowercase().as_str() {
            "nx" => nx = true,
            "xx" => xx = true,
            "gt" => gt = true,
            "lt" => lt = true,
            "ch" => ch = true,
            "incr" => incr = true,
            _ => break,
        }
        i += 1;
    }
    let pairs = &args[i..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Reply::error(SYNTAX);
    }
    if nx && xx {
        return Reply::error("ERR XX and NX options at the same time are not compatible");
    }
    if (nx && (gt || lt)) || (gt && lt) {
        return Reply::error("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if incr && pairs.len() > 2 {
        return Reply::error("ERR INCR option supports a single increment-element pair");
    }
    let mut parsed = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks_exact(2) {
        match parse_score(&pair[0]) {
            Some(score) => parsed.push((score, &pair[1])),
            None => return Reply::error(NOT_FLOAT),
        }
    }
    let state = std::sync::Arc::clone(&s.state);
    let _guard = state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    let mut w = match ZWrite::open(state.storage.view(&s.exec, s.db), &args[1]) {
        Ok(w) => w,
        Err(e) => return e,
    };
    let (mut added, mut updated) = (0, 0);
    let mut incr_result = None;
    // A member named twice in one call sees its own earlier score (only then is it recorded:
    // a map's first insert allocates, which a one-member ZADD or GEOADD does not need).
    let repeats = parsed.len() > 1;
    let mut seen: std::collections::HashMap<&Bytes, f64> = std::collections::HashMap::new();
    for (score, member) in parsed {
        let old = match seen.get(member) {
            Some(&s) => Some(s),
            None => match w.score(member) {
                Ok(o) => o,
                Err(e) => return e,
            },
        };
        if (nx && old.is_some()) || (xx && old.is_none()) {
            continue;
        }
        let mut new = score;
        if incr {
            new = old.unwrap_or(0.0) + score;
            if new.is_nan() {
                return Reply::error("ERR resulting score is not a number (NaN)");
            }
        }
        if let Some(o) = old {
            if (gt && new <= o) || (lt && new >= o) {
                continue;
            }
            if new != o {
                w.set(member, new, Some(o));
                updated += 1;
            }
        } else {
            w.set(member, new, None);
            added += 1;
        }
        if repeats {
            seen.insert(member, new);
        }
        incr_result = Some(new);
    }
    let reply = if incr {
        incr_result.map_or(Reply::Null, Reply::Double)
    } else {
        Reply::Integer(if ch { added + updated } else { added })
    };
    let event = (added + updated > 0).then_some(if incr { "zincr" } else { "zadd" });
    let reply = w.commit(s, event, reply);
    if added > 0 {
        s.signal(&args[1]);
    }
    reply
}

fn zincrby(s: &mut Session, args: &[Bytes]) -> Reply {
    let Some(delta) = parse_score(&args[2]) else { return Reply::error(NOT_FLOAT) };
    let state = std::sync::Arc::clone(&s.state);
    let _guard = state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    let mut w = match ZWrite::open(state.storage.view(&s.exec, s.db), &args[1]) {
        Ok(w) => w,
        Err(e) => return e,
    };
    let old = match w.score(&args[3]) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let new = old.unwrap_or(0.0) + delta;
    if new.is_nan() {
        return Reply::error("ERR resulting score is not a number (NaN)");
    }
    w.set(&args[3], new, old);
    let reply = w.commit(s, Some("zincr"), Reply::Double(new));
    s.signal(&args[1]);
    reply
}

fn zrem(s: &mut Session, args: &[Bytes]) -> Reply {
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    match zset(&view, &args[1]) {
        Ok(Some(_)) => {}
        Ok(None) => return Reply::Integer(0),
        Err(e) => return e,
    }
    let mut w = match ZWrite::open(view, &args[1]) {
        Ok(w) => w,
        Err(e) => return e,
    };
    let mut removed = 0;
    let mut gone = std::collections::HashSet::new();
    for m in &args[2..] {
        if !gone.insert(m) {
            continue;
        }
        match w.score(m) {
            Ok(Some(score)) => {
                w.remove(m, score);
                removed += 1;
            }
            Ok(None) => {}
            Err(e) => return e,
        }
    }
    w.commit(s, (removed > 0).then_some("zrem"), Reply::Integer(removed))
}

fn zcard(s: &mut Session, args: &[Bytes]) -> Reply {
    match zset(&s.state.storage.view(&s.exec, s.db), &args[1]) {
        Ok(m) => Reply::Integer(m.map_or(0, |m| Header::of(&m).count as i64)),
        Err(e) => e,
    }
}

fn score_of(view: &View, meta: &Option<Meta>, member: &[u8]) -> Result<Option<f64>, Reply> {
    match meta {
        Some(m) => Ok(view.member(m.uid, member).map_err(engine_error)?.map(|v| decode_score(&v))),
        None => Ok(None),
    }
}

fn zscore(s: &mut Session, args: &[Bytes]) -> Reply {
    let view = s.state.storage.view(&s.exec, s.db);
    match zset(&view, &args[1]).and_then(|m| score_of(&view, &m, &args[2])) {
        Ok(score) => score.map_or(Reply::Null, Reply::Double),
        Err(e) => e,
    }
}

fn zmscore(s: &mut Session, args: &[Bytes]) -> Reply {
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match zset(&view, &args[1]) {
        Ok(m) => m,
        Err(e) => return e,
    };
    let mut out = Vec::new();
    for m in &args[2..] {
        match score_of(&view, &meta, m) {
            Ok(score) => out.push(score.map_or(Reply::Null, Reply::Double)),
            Err(e) => return e,
        }
    }
    Reply::Array(out)
}

/// The 0-based rank of `member` (whose score is `score`) counting from the lowest score.
fn rank_of(view: &View, meta: &Meta, score: f64, member: &[u8]) -> Result<u64, Reply> {
    let mut rank = 0;
    for item in view.scores(meta, None) {
        let (sc, m) = item.map_err(engine_error)?;
        if sc == score && m == member {
            return Ok(rank);
        }
        rank += 1;
    }
    Ok(rank)
}

fn rank_generic(s: &Session, args: &[Bytes], reverse: bool) -> Reply {
    let withscore = match args.len() {
        3 => false,
        4 if args[3].eq_ignore_ascii_case(b"withscore") => true,
        _ => return Reply::error(SYNTAX),
    };
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match zset(&view, &args[1]) {
        Ok(Some(m)) => m,
        Ok(None) => return if withscore { Reply::NullArray } else { Reply::Null },
        Err(e) => return e,
    };
    let score = match score_of(&view, &Some(meta.clone()), &args[2]) {
        Ok(Some(sc)) => sc,
        Ok(None) => return if withscore { Reply::NullArray } else { Reply::Null },
        Err(e) => return e,
    };
    let rank = match rank_of(&view, &meta, score, &args[2]) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let rank = if reverse { Header::of(&meta).count - 1 - rank } else { rank } as i64;
    if withscore {
        Reply::Array(vec![Reply::Integer(rank), Reply::Double(score)])
    } else {
        Reply::Integer(rank)
    }
}

fn zrank(s: &mut Session, args: &[Bytes]) -> Reply {
    rank_generic(s, args, false)
}

fn zrevrank(s: &mut Session, args: &[Bytes]) -> Reply {
    rank_generic(s, args, true)
}

/// Pops up to `count` members from the low (or `max`) end; returns (member, score) pairs.
/// The caller holds the key's lock.
pub(super) fn pop(s: &Session, key: &[u8], count: usize, max: bool) -> Result<Vec<(Bytes, f64)>, Reply> {
    pop_in(&s.state, &s.exec, s.db, key, count, max)
}

fn pop_in(
    state: &crate::state::ServerState,
    cx: &crate::storage::ExecContext,
    db: u32,
    key: &[u8],
    count: usize,
    max: bool,
) -> Result<Vec<(Bytes, f64)>, Reply> {
    let view = state.storage.view(cx, db);
    let Some(meta) = zset(&view, key)? else { return Ok(Vec::new()) };
    let mut w = ZWrite::of(view, key, meta);
    let mut popped = Vec::new();
    {
        let iter = view.scores_to_pop(&w.meta);
        let iter: Box<dyn Iterator<Item = lsm::Result<(f64, Bytes)>>> =
            if max { Box::new(iter.rev()) } else { Box::new(iter) };
        for item in iter.take(count) {
            let (score, member) = item.map_err(engine_error)?;
            popped.push((member, score));
        }
    }
    for (m, sc) in &popped {
        w.remove(m, *sc);
    }
    // The next pop seeks past these members' tombstones.
    if let Some((m, sc)) = popped.last() {
        if max {
            w.bounds.popped_high(*sc, m);
        } else {
            w.bounds.popped_low(*sc, m);
        }
        w.store();
        let emptied = w.header.count == 0;
        state.storage.write(cx, w.batch).map_err(engine_error)?;
        cx.notify(ZSET, if max { "zpopmax" } else { "zpopmin" }, db, key);
        if emptied {
            cx.notify(GENERIC, "del", db, key);
        }
    }
    Ok(popped)
}

fn pop_generic(s: &Session, args: &[Bytes], max: bool) -> Reply {
    let count = match pop_count(args) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    match pop(s, &args[1], count.unwrap_or(1), max) {
        Ok(popped) if count.is_none() => match popped.into_iter().next() {
            Some((m, sc)) => Reply::Array(vec![Reply::Bulk(m), Reply::Double(sc)]),
            None => Reply::Array(Vec::new()),
        },
        Ok(popped) => Reply::Pairs(popped.into_iter().map(|(m, sc)| (Reply::Bulk(m), Reply::Double(sc))).collect()),
        Err(e) => e,
    }
}

fn zpopmin(s: &mut Session, args: &[Bytes]) -> Reply {
    pop_generic(s, args, false)
}

fn zpopmax(s: &mut Session, args: &[Bytes]) -> Reply {
    pop_generic(s, args, true)
}

/// ZMPOP's reply for members popped from `key`.
pub(super) fn mpop_reply(key: &Bytes, popped: Vec<(Bytes, f64)>) -> Reply {
    let items = popped.into_iter().map(|(m, sc)| Reply::Array(vec![Reply::Bulk(m), Reply::Double(sc)])).collect();
    Reply::Array(vec![Reply::Bulk(key.clone()), Reply::Array(items)])
}

/// Pops from the first non-empty key of `keys`; `None` if all are empty.
pub(super) fn mpop_first(s: &Session, keys: &[Bytes], max: bool, count: usize) -> Result<Option<Reply>, Reply> {
    let _guard = s.state.storage.lock(&s.exec, s.db, keys.iter().map(|k| &k[..]));
    for key in keys {
        let popped = pop(s, key, count, max)?;
        if !popped.is_empty() {
            return Ok(Some(mpop_reply(key, popped)));
        }
    }
    Ok(None)
}

fn zmpop(s: &mut Session, args: &[Bytes]) -> Reply {
    let (keys, max, count) = match super::collections::mpop_args(&args[1..], ["max", "min"]) {
        Ok(a) => a,
        Err(e) => return e,
    };
    match mpop_first(s, keys, max, count) {
        Ok(r) => r.unwrap_or(Reply::NullArray),
        Err(e) => e,
    }
}

fn zrandmember(s: &mut Session, args: &[Bytes]) -> Reply {
    let (count, withscores) = match super::collections::random_args(args, b"withscores") {
        Ok(a) => a,
        Err(e) => return e,
    };
    let view = s.state.storage.view(&s.exec, s.db);
    match zset(&view, &args[1]) {
        Ok(meta) => super::collections::random_reply(&view, &args[1], meta.as_ref(), count, withscores, |v| {
            Reply::Double(decode_score(&v))
        }),
        Err(e) => e,
    }
}

fn zscan(s: &mut Session, args: &[Bytes]) -> Reply {
    super::collections::scan_command(s, args, KeyType::ZSet, false, |member, score, _, out| {
        out.push(Reply::Bulk(member));
        // ZSCAN scores are always strings, whatever the protocol.
        out.push(Reply::Bulk(Bytes::from(crate::resp::format_double(decode_score(&score)))));
    })
}

/// Pops one member for BZPOPMIN/BZPOPMAX: `[key, member, score]`.
fn bzpop(s: &mut Session, args: &[Bytes], max: bool) -> Reply {
    let keys = args[1..args.len() - 1].to_vec();
    let view = s.state.storage.view(&s.exec, s.db);
    for key in &keys {
        if let Err(e) = zset(&view, key) {
            return e;
        }
    }
    let db = s.db;
    super::blocking_pops::block_or_reply(s, keys, &args[args.len() - 1], Reply::NullArray, move |state, cx, key| {
        let _guard = state.storage.lock(cx, db, [&key[..]]);
        let popped = pop_in(state, cx, db, key, 1, max)?;
        Ok(popped
            .into_iter()
            .next()
            .map(|(m, sc)| Reply::Array(vec![Reply::Bulk(key.clone()), Reply::Bulk(m), Reply::Double(sc)])))
    })
}

fn bzpopmin(s: &mut Session, args: &[Bytes]) -> Reply {
    bzpop(s, args, false)
}

fn bzpopmax(s: &mut Session, args: &[Bytes]) -> Reply {
    bzpop(s, args, true)
}

fn bzmpop(s: &mut Session, args: &[Bytes]) -> Reply {
    let timeout = args[1].clone();
    let (keys, max, count) = match super::collections::mpop_args(&args[2..], ["max", "min"]) {
        Ok((k, m, c)) => (k.to_vec(), m, c),
        Err(e) => return e,
    };
    if let Err(e) = crate::services::blocking::parse_timeout(&timeout) {
        return e;
    }
    let view = s.state.storage.view(&s.exec, s.db);
    for key in &keys {
        if let Err(e) = zset(&view, key) {
            return e;
        }
    }
    let db = s.db;
    super::blocking_pops::block_or_reply(s, keys, &timeout, Reply::NullArray, move |state, cx, key| {
        let _guard = state.storage.lock(cx, db, [&key[..]]);
        let popped = pop_in(state, cx, db, key, count, max)?;
        Ok((!popped.is_empty()).then(|| mpop_reply(key, popped)))
    })
}

#[cfg(test)]
mod tests {
    use crate::commands::tests::{run, session};
    use crate::resp::Reply;

    /// A member named twice in one ZADD sees its own earlier score, as in Redis (replies
    /// compared with redis-server 7.0's); a one-member ZADD keeps no record of it.
    #[test]
    fn a_member_named_twice_in_one_zadd_sees_its_earlier_score() {
        let (_d, mut s) = session();
        assert_eq!(run(&mut s, &["zadd", "z", "1", "a", "2", "a", "3", "b"]), Reply::Integer(2));
        assert_eq!(run(&mut s, &["zadd", "z", "incr", "5", "a"]), Reply::Double(7.0));
        assert_eq!(run(&mut s, &["zadd", "z", "nx", "9", "a", "1", "c", "4", "c"]), Reply::Integer(1));
        assert_eq!(run(&mut s, &["zadd", "z", "ch", "8", "b", "8", "b"]), Reply::Integer(1));
        assert_eq!(run(&mut s, &["zadd", "z", "gt", "ch", "0", "b", "9", "b", "1", "b"]), Reply::Integer(1));
        for (member, score) in [("a", 7.0), ("b", 9.0), ("c", 1.0)] {
            assert_eq!(run(&mut s, &["zscore", "z", member]), Reply::Double(score));
        }
        assert_eq!(run(&mut s, &["geoadd", "g", "13.1", "38.1", "m", "13.2", "38.2", "m"]), Reply::Integer(1));
        assert_eq!(run(&mut s, &["zcard", "g"]), Reply::Integer(1));
    }
}
