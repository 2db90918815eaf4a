//! ZUNION, ZINTER, ZDIFF (WEIGHTS, AGGREGATE, WITHSCORES), their STORE forms, and ZINTERCARD.
//! Plain sets are accepted as inputs, every member scoring 1, as in Redis.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;

use super::range::store_zset;
use crate::commands::collections::{NOT_INTEGER, SYNTAX, WRONGTYPE};
use crate::commands::{engine_error, parse_i64, Session};
use crate::resp::Reply;
use crate::storage::{decode_score, KeyType, View};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Union,
    Inter,
    Diff,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

struct Request<'a> {
    keys: &'a [Bytes],
    weights: Vec<f64>,
    aggregate: Aggregate,
    withscores: bool,
}

/// Parses `numkeys key … [WEIGHTS …] [AGGREGATE …] [WITHSCORES]` (`args` starts at numkeys).
fn parse<'a>(args: &'a [Bytes], op: Op, cmd: &str, store: bool) -> Result<Request<'a>, Reply> {
    let n = parse_i64(&args[0]).ok_or_else(|| Reply::error(NOT_INTEGER))?;
    if n < 1 {
        return Err(Reply::error(format!("ERR at least 1 input key is needed for '{cmd}' command")));
    }
    let n = n as usize;
    if n > args.len() - 1 {
        return Err(Reply::error(SYNTAX));
    }
    let mut req = Request { keys: &args[1..=n], weights: vec![1.0; n], aggregate: Aggregate::Sum, withscores: false };
    let mut i = n + 1;
    while i < args.len() {
        let opt = String::from_utf8_lossy(&args[i]).to_ascii_lowercase();
        match opt.as_str() {
            "weights" if op != Op::Diff && i + n < args.len() => {
                for j in 0..n {
                    req.weights[j] = crate::num::parse_float(&args[i + 1 + j])
                        .ok_or_else(|| Reply::error("ERR weight value is not a float"))?;
                }
                i += n;
            }
            "aggregate" if op != Op::Diff && i + 1 < args.len() => {
                req.aggregate = match String::from_utf8_lossy(&args[i + 1]).to_ascii_lowercase().as_str() {
                    "sum" => Aggregate::Sum,
                    "min" => Aggregate::Min,
                    "max" => Aggregate::Max,
                    _ => return Err(Reply::error(SYNTAX)),
                };
                i += 1;
            }
            "withscores" if !store => req.withscores = true,
            _ => return Err(Reply::error(SYNTAX)),
        }
        i += 1;
    }
    Ok(req)
}

/// The members and scores of the set or sorted set at `key`; `None` if absent.
fn load(view: &View, key: &[u8]) -> Result<Option<BTreeMap<Bytes, f64>>, Reply> {
    let Some(meta) = view.get(key).map_err(engine_error)? else { return Ok(None) };
    let score_of = match meta.kind {
        KeyType::ZSet => |v: &Bytes| decode_score(v),
        KeyType::Set => |_: &Bytes| 1.0,
        _ => return Err(Reply::error(WRONGTYPE)),
    };
    let mut out = BTreeMap::new();
    for kv in view.entries(&meta, Bound::Unbounded) {
        let (m, v) = kv.map_err(engine_error)?;
        let sc = score_of(&v);
        out.insert(m, sc);
    }
    Ok(Some(out))
}

fn weighted(score: f64, weight: f64) -> f64 {
    let w = score * weight;
    if w.is_nan() {
        0.0
    } else {
        w
    }
}

fn aggregate(a: f64, b: f64, how: Aggregate) -> f64 {
    match how {
        Aggregate::Sum => {
            let s = a + b;
            // inf + -inf: Redis answers 0 rather than NaN.
            if s.is_nan() {
                0.0
            } else {
                s
            }
        }
        Aggregate::Min => a.min(b),
        Aggregate::Max => a.max(b),
    }
}

/// The result of `op`, ordered by (score, member).
fn compute(s: &Session, req: &Request, op: Op) -> Result<Vec<(Bytes, f64)>, Reply> {
    let view = s.state.storage.view(&s.exec, s.db);
    let mut inputs = Vec::with_capacity(req.keys.len());
    for k in req.keys {
        inputs.push(load(&view, k)?);
    }
    let mut acc: BTreeMap<Bytes, f64> = BTreeMap::new();
    match op {
        Op::Union => {
            for (input, &w) in inputs.iter().zip(&req.weights) {
                for (m, &sc) in input.iter().flatten() {
                    let sc = weighted(sc, w);
                    acc.entry(m.clone()).and_modify(|a| *a = aggregate(*a, sc, req.aggregate)).or_insert(sc);
                }
            }
        }
        Op::Inter => {
            if inputs.iter().any(Option::is_none) {
                return Ok(Vec::new());
            }
            'members: for (m, &sc) in inputs[0].iter().flatten() {
                let mut total = weighted(sc, req.weights[0]);
                for (input, &w) in inputs.iter().zip(&req.weights).skip(1) {
                    match input.as_ref().and_then(|i| i.get(m)) {
                        Some(&other) => total = aggregate(total, weighted(other, w), req.aggregate),
                        None => continue 'members,
                    }
                }
                acc.insert(m.clone(), total);
            }
        }
        Op::Diff => {
            if let Some(first) = &inputs[0] {
                for (m, &sc) in first {
                    if !inputs[1..].iter().flatten().any(|other| other.contains_key(m)) {
                        acc.insert(m.clone(), sc);
                    }
                }
            }
        }
    }
    let mut out: Vec<(Bytes, f64)> = acc.into_iter().collect();
    out.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    Ok(out)
}

fn read(s: &Session, args: &[Bytes], op: Op, cmd: &str) -> Reply {
    let req = match parse(&args[1..], op, cmd, false) {
        Ok(r) => r,
        Err(e) => return e,
    };
    match compute(s, &req, op) {
        Ok(items) if req.withscores => {
            Reply::Pairs(items.into_iter().map(|(m, sc)| (Reply::Bulk(m), Reply::Double(sc))).collect())
        }
        Ok(items) => Reply::Array(items.into_iter().map(|(m, _)| Reply::Bulk(m)).collect()),
        Err(e) => e,
    }
}

fn write(s: &mut Session, args: &[Bytes], op: Op, cmd: &'static str) -> Reply {
    let reply = write_locked(s, args, op, cmd);
    s.signal(&args[1]);
    reply
}

fn write_locked(s: &Session, args: &[Bytes], op: Op, cmd: &'static str) -> Reply {
    let req = match parse(&args[2..], op, cmd, true) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let _guard =
        s.state.storage.lock(&s.exec, s.db, std::iter::once(&args[1][..]).chain(req.keys.iter().map(|k| &k[..])));
    match s.exec.as_read(|| compute(s, &req, op)) {
        Ok(items) => store_zset(s, &args[1], &items, cmd),
        Err(e) => e,
    }
}

pub(super) fn zunion(s: &mut Session, args: &[Bytes]) -> Reply {
    read(s, args, Op::Union, "zunion")
}

pub(super) fn zinter(s: &mut Session, args: &[Bytes]) -> Reply {
    read(s, args, Op::Inter, "zinter")
}

pub(super) fn zdiff(s: &mut Session, args: &[Bytes]) -> Reply {
    read(s, args, Op::Diff, "zdiff")
}

pub(super) fn zunionstore(s: &mut Session, args: &[Bytes]) -> Reply {
    write(s, args, Op::Union, "zunionstore")
}

pub(super) fn zinterstore(s: &mut Session, args: &[Bytes]) -> Reply {
    write(s, args, Op::Inter, "zinterstore")
}

pub(super) fn zdiffstore(s: &mut Session, args: &[Bytes]) -> Reply {
    write(s, args, Op::Diff, "zdiffstore")
}

pub(super) fn zintercard(s: &mut Session, args: &[Bytes]) -> Reply {
    let n = parse_i64(&args[1]).unwrap_or(0);
    if n < 1 {
        return Reply::error("ERR at least 1 input key is needed for 'zintercard' command");
    }
    let (keys, limit) = match crate::commands::sets::numkeys_and_limit(args) {
        Ok(k) => k,
        Err(e) => return e,
    };
    let req = Request { keys, weights: vec![1.0; keys.len()], aggregate: Aggregate::Sum, withscores: false };
    match compute(s, &req, Op::Inter) {
        Ok(r) => Reply::Integer(if limit > 0 { r.len().min(limit) } else { r.len() } as i64),
        Err(e) => e,
    }
}
