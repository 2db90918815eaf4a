//! The pending entries of a group: XPENDING, XCLAIM and XAUTOCLAIM.

use bytes::Bytes;

use super::group_records::*;
use super::groups::{change_group, id_reply, nogroup};
use super::model::*;
use crate::commands::collections::SYNTAX;
use crate::commands::{engine_error, parse_i64, Session};
use crate::resp::Reply;
use crate::storage::{now_ms, prefix_end};

/// An interval bound of XPENDING / XAUTOCLAIM: `(id` is exclusive.
pub(super) fn interval(arg: &[u8], missing_seq: u64, start: bool) -> Result<StreamId, Reply> {
    if arg.len() > 1 && arg[0] == b'(' {
        let id = parse_id(&arg[1..], IdSyntax { missing_seq, strict: true, seq_star: false })?.0;
        return if start {
            id.incr().ok_or_else(|| Reply::error("ERR invalid start ID for the interval"))
        } else {
            id.decr().ok_or_else(|| Reply::error("ERR invalid end ID for the interval"))
        };
    }
    Ok(parse_id(arg, IdSyntax { missing_seq, strict: false, seq_star: false })?.0)
}

/// `XPENDING key group [[IDLE min-idle] start end count [consumer]]`.
pub(super) fn xpending(s: &mut Session, args: &[Bytes]) -> Reply {
    let (key, group) = (&args[1], &args[2]);
    if args.len() != 3 && !(6..=9).contains(&args.len()) {
        return Reply::error(SYNTAX);
    }
    let mut range_args = None;
    if args.len() >= 6 {
        let mut at = 3;
        let mut min_idle = 0;
        if args[3].eq_ignore_ascii_case(b"idle") {
            match parse_i64(&args[4]) {
                Some(n) => min_idle = n,
                None => return Reply::error(NOT_INTEGER),
            }
            if args.len() < 8 {
                return Reply::error(SYNTAX);
            }
            at += 2;
        }
        let Some(count) = args.get(at + 2).and_then(|a| parse_i64(a)) else { return Reply::error(NOT_INTEGER) };
        let start = match interval(&args[at], 0, true) {
            Ok(id) => id,
            Err(e) => return e,
        };
        let end = match interval(&args[at + 1], u64::MAX, false) {
            Ok(id) => id,
            Err(e) => return e,
        };
        if at + 4 < args.len() {
            return Reply::error(SYNTAX);
        }
        range_args = Some((min_idle, start, end, count.max(0) as usize, args.get(at + 3).cloned()));
    }
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match stream_at(&view, key) {
        Ok(Some((meta, _))) => meta,
        Ok(None) => return nogroup(key, group),
        Err(e) => return e,
    };
    let groups = Groups::new(&view, meta.uid);
    let g = match groups.group(group) {
        Ok(Some(g)) => g,
        Ok(None) => return nogroup(key, group),
        Err(e) => return engine_error(e),
    };
    let result = (|| -> lsm::Result<Reply> {
        let Some((min_idle, start, end, count, consumer)) = range_args else {
            if g.pending == 0 {
                return Ok(Reply::Array(vec![Reply::Integer(0), Reply::Null, Reply::Null, Reply::NullArray]));
            }
            let first = groups.pending(group, StreamId::default(), StreamId::MAX, 1)?;
            let prefix = named(b'p', group);
            let last = match view.elements_between(meta.uid, &prefix, &prefix_end(&prefix)).next_back() {
                Some(kv) => id_of(&kv?.0[prefix.len()..]).ok_or_else(damaged)?,
                None => StreamId::default(),
            };
            let owners: Vec<Reply> = groups
                .consumers_of(group)?
                .into_iter()
                .filter(|(_, c)| c.pending > 0)
                .map(|(name, c)| Reply::Array(vec![Reply::Bulk(name), Reply::bulk(Bytes::from(c.pending.to_string()))]))
                .collect();
            return Ok(Reply::Array(vec![
                Reply::Integer(g.pending as i64),
                first.first().map_or(Reply::Null, |(id, _)| id_reply(*id)),
                id_reply(last),
                Reply::Array(owners),
            ]));
        };
        let now = now_ms();
        let mut out = Vec::new();
        let idle_enough = |n: &Nack| min_idle <= 0 || now.saturating_sub(n.time) as i64 >= min_idle;
        let row = |id: StreamId, n: &Nack| {
            Reply::Array(vec![
                id_reply(id),
                Reply::Bulk(n.consumer.clone()),
                Reply::Integer(now.saturating_sub(n.time) as i64),
                Reply::Integer(n.deliveries as i64),
            ])
        };
        if count == 0 {
            return Ok(Reply::Array(out));
        }
        match consumer {
            Some(c) => {
                for id in groups.consumer_pending(group, &c, start, usize::MAX)? {
                    if id > end || out.len() >= count {
                        break;
                    }
                    let Some(v) = view.element(meta.uid, &pel_field(group, id))? else { continue };
                    let n = Nack::decode(&v).ok_or_else(damaged)?;
                    if idle_enough(&n) {
                        out.push(row(id, &n));
                    }
                }
            }
            None => {
                for (id, n) in groups.pending(group, start, end, usize::MAX)? {
                    if out.len() >= count {
                        break;
                    }
                    if idle_enough(&n) {
                        out.push(row(id, &n));
                    }
                }
            }
        }
        Ok(Reply::Array(out))
    })();
    result.unwrap_or_else(engine_error)
}

/// `XCLAIM key group consumer min-idle-time id … [IDLE ms] [TIME ms] [RETRYCOUNT n] [FORCE]
/// [JUSTID] [LASTID id]`.
pub(super) fn xclaim(s: &mut Session, args: &[Bytes]) -> Reply {
    let (key, group, consumer) = (&args[1], &args[2], &args[3]);
    let missing = nogroup(key, group);
    change_group(s, (key, group), missing, |view, meta, groups, g| {
        let Some(min_idle) = parse_i64(&args[4]) else {
            return Err(Reply::error("ERR Invalid min-idle-time argument for XCLAIM"));
        };
        let mut ids = Vec::new();
        let mut j = 5;
        while j < args.len() {
            match strict_id(&args[j]) {
                Ok(id) => ids.push(id),
                Err(_) => break,
            }
            j += 1;
        }
        let now = now_ms() as i64;
        let (mut force, mut justid, mut retry, mut time, mut last_id) = (false, false, None, None, StreamId::default());
        while j < args.len() {
            let more = args.len() - 1 - j;
            let opt = args[j].to_ascii_lowercase();
            let number = |what: &str| {
                parse_i64(&args[j + 1])
                    .ok_or_else(|| Reply::error(format!("ERR Invalid {what} option argument for XCLAIM")))
            };
            match opt.as_slice() {
                b"force" => force = true,
                b"justid" => justid = true,
                b"idle" if more > 0 => {
                    time = Some(now - number("IDLE")?);
                    j += 1;
                }
                b"time" if more > 0 => {
                    time = Some(number("TIME")?);
                    j += 1;
                }
                b"retrycount" if more > 0 => {
                    retry = Some(number("RETRYCOUNT")?);
                    j += 1;
                }
                b"lastid" if more > 0 => {
                    last_id = strict_id(&args[j + 1])?;
                    j += 1;
                }
                _ => {
                    return Err(Reply::error(format!(
                        "ERR Unrecognized XCLAIM option '{}'",
                        String::from_utf8_lossy(&args[j])
                    )))
                }
            }
            j += 1;
        }
        if last_id > g.last {
            g.last = last_id;
        }
        // A bogus delivery time (negative, or in the future) is now.
        let time = time.filter(|&t| (0..=now).contains(&t)).unwrap_or(now) as u64;
        let mut out = Vec::new();
        let result = (|| -> lsm::Result<()> {
            for id in ids {
                let entry = view.element(meta.uid, &id.field())?;
                let nack = groups.nack(group, id)?;
                let Some(value) = entry else {
                    // Pending but no longer in the stream: it leaves the PEL.
                    groups.release(g, id)?;
                    continue;
                };
                let nack = match nack {
                    Some(n) => {
                        if min_idle > 0 && (now as u64).saturating_sub(n.time) < min_idle as u64 {
                            continue;
                        }
                        Some(n)
                    }
                    None if force => None,
                    None => continue,
                };
                groups.consumer_or_create(g, consumer, true)?;
                // A new entry (FORCE) starts at one delivery, as Redis's NACKs do; then the count
                // is set (RETRYCOUNT >= 0) or goes up by one (unless JUSTID).
                let base = nack.as_ref().map_or(1, |n| n.deliveries);
                let deliveries = match retry {
                    Some(n) if n >= 0 => n as u64,
                    _ if justid => base,
                    _ => base + 1,
                };
                groups.assign(g, id, consumer, time, deliveries)?;
                out.push(if justid { id_reply(id) } else { entry_reply(id, &value)? });
            }
            Ok(())
        })();
        result.map_err(engine_error)?;
        Ok((Reply::Array(out), true))
    })
}

/// `XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]`.
pub(super) fn xautoclaim(s: &mut Session, args: &[Bytes]) -> Reply {
    let (key, group, consumer) = (&args[1], &args[2], &args[3]);
    let Some(min_idle) = parse_i64(&args[4]) else {
        return Reply::error("ERR Invalid min-idle-time argument for XAUTOCLAIM");
    };
    let start = match interval(&args[5], 0, true) {
        Ok(id) => id,
        Err(e) => return e,
    };
    let (mut count, mut justid) = (100usize, false);
    let mut j = 6;
    while j < args.len() {
        if args[j].eq_ignore_ascii_case(b"count") && j + 1 < args.len() {
            match parse_i64(&args[j + 1]) {
                Some(n) if (1..=i64::MAX / 16).contains(&n) => count = n as usize,
                _ => return Reply::error("ERR COUNT must be > 0"),
            }
            j += 2;
        } else if args[j].eq_ignore_ascii_case(b"justid") {
            justid = true;
            j += 1;
        } else {
            return Reply::error(SYNTAX);
        }
    }
    let missing = nogroup(key, group);
    change_group(s, (key, group), missing, |view, meta, groups, g| {
        let now = now_ms();
        let (mut claimed, mut deleted) = (Vec::new(), Vec::new());
        let mut next = StreamId::default();
        let result = (|| -> lsm::Result<()> {
            let mut attempts = count.saturating_mul(10);
            let mut left = count;
            // One more than can be visited, to know where the next call starts.
            let pending = groups.pending(group, start, StreamId::MAX, attempts.saturating_add(1))?;
            let mut it = pending.into_iter();
            for (id, n) in it.by_ref() {
                if attempts == 0 || left == 0 {
                    next = id;
                    return Ok(());
                }
                attempts -= 1;
                let Some(value) = view.element(meta.uid, &id.field())? else {
                    groups.release(g, id)?;
                    deleted.push(id_reply(id));
                    left -= 1;
                    continue;
                };
                if min_idle > 0 && now.saturating_sub(n.time) < min_idle as u64 {
                    continue;
                }
                groups.consumer_or_create(g, consumer, true)?;
                let deliveries = if justid { n.deliveries } else { n.deliveries + 1 };
                groups.assign(g, id, consumer, now, deliveries)?;
                claimed.push(if justid { id_reply(id) } else { entry_reply(id, &value)? });
                left -= 1;
            }
            Ok(())
        })();
        result.map_err(engine_error)?;
        Ok((Reply::Array(vec![id_reply(next), Reply::Array(claimed), Reply::Array(deleted)]), true))
    })
}
