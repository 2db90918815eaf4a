//! The blocking list commands: BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, and the helper every
//! blocking command (the sorted-set ones too) uses to try now and otherwise block.

use std::sync::Arc;

use bytes::Bytes;

use super::collections::mpop_args;
use super::lists::{list_at, move_one, mpop_key, pop, side};
use super::{spec, BlockRequest, CommandSpec, Session};
use crate::resp::Reply;
use crate::state::ServerState;
use crate::storage::ExecContext;

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("blpop", -3, &["write", "noscript", "blocking"], (1, -2, 1), blpop),
    spec("brpop", -3, &["write", "noscript", "blocking"], (1, -2, 1), brpop),
    spec("blmove", 6, &["write", "denyoom", "noscript", "blocking"], (1, 2, 1), blmove),
    spec("brpoplpush", 4, &["write", "denyoom", "noscript", "blocking"], (1, 2, 1), brpoplpush),
    spec("blmpop", -5, &["write", "blocking"], (0, 0, 0), blmpop),
];

/// Runs `attempt` on each key now; if nothing comes of it, asks the connection to block.
pub(super) fn block_or_reply(
    s: &mut Session,
    keys: Vec<Bytes>,
    timeout: &[u8],
    timeout_reply: Reply,
    attempt: impl Fn(&ServerState, &ExecContext, &Bytes) -> Result<Option<Reply>, Reply> + Send + Sync + 'static,
) -> Reply {
    let timeout = match crate::services::blocking::parse_timeout(timeout) {
        Ok(t) => t,
        Err(e) => return e,
    };
    for key in &keys {
        match attempt(&s.state, &s.exec, key) {
            Ok(Some(r)) => return r,
            Ok(None) => {}
            Err(e) => return e,
        }
    }
    block_on(s, keys, timeout, timeout_reply, attempt)
}

/// Asks the connection to block on `keys` until `attempt` serves one of them (retried whenever
/// one is signalled) or `timeout` passes (then `timeout_reply`).
pub(super) fn block_on(
    s: &mut Session,
    keys: Vec<Bytes>,
    timeout: Option<std::time::Duration>,
    timeout_reply: Reply,
    attempt: impl Fn(&ServerState, &ExecContext, &Bytes) -> Result<Option<Reply>, Reply> + Send + Sync + 'static,
) -> Reply {
    let state: Arc<ServerState> = Arc::clone(&s.state);
    // A retry runs for no command of this client: in a context of its own, whose keyspace
    // events are published once it is done.
    let attempt = Box::new(move |key: &Bytes| {
        let cx = ExecContext::new();
        cx.set_notify_flags(state.notify_flags(), false);
        let served = attempt(&state, &cx, key).ok().flatten();
        crate::services::notifications::publish(&state, cx.take_events());
        served
    });
    s.block(BlockRequest { keys, timeout, attempt, timeout_reply, lock: None, replicas: None })
}

fn bpop(s: &mut Session, args: &[Bytes], left: bool) -> Reply {
    let keys = args[1..args.len() - 1].to_vec();
    let db = s.db;
    let view = s.state.storage.view(&s.exec, db);
    for key in &keys {
        if let Err(e) = list_at(&view, key) {
            return e;
        }
    }
    block_or_reply(s, keys, &args[args.len() - 1], Reply::NullArray, move |state, cx, key| {
        let items = pop(state, cx, db, key, left, 1)?.unwrap_or_default();
        Ok(items.into_iter().next().map(|v| Reply::Array(vec![Reply::Bulk(key.clone()), Reply::Bulk(v)])))
    })
}

fn blpop(s: &mut Session, args: &[Bytes]) -> Reply {
    bpop(s, args, true)
}

fn brpop(s: &mut Session, args: &[Bytes]) -> Reply {
    bpop(s, args, false)
}

fn bmove(s: &mut Session, src: Bytes, dst: Bytes, from_left: bool, to_left: bool, timeout: &[u8]) -> Reply {
    let db = s.db;
    let view = s.state.storage.view(&s.exec, db);
    // Only the source's type matters until it has an element to move (then LMOVE checks both).
    if let Err(e) = list_at(&view, &src) {
        return e;
    }
    let target = dst.clone();
    let reply = block_or_reply(s, vec![src], timeout, Reply::NullArray, move |state, cx, key| {
        let moved = match move_one(state, cx, db, key, &target, from_left, to_left) {
            Ok(moved) => moved,
            // The source has an element but the destination is not a list: a blocked client
            // is answered with the error (the element stays), as Redis does; a source that is
            // not a list keeps it waiting.
            Err(e) if list_at(&state.storage.view(cx, db), key).is_ok() => return Ok(Some(e)),
            Err(e) => return Err(e),
        };
        if moved.is_some() && state.blocking.has_waiters(db, &target) {
            state.blocking.serve(db, &target);
        }
        Ok(moved.map(Reply::Bulk))
    });
    if matches!(reply, Reply::Bulk(_)) {
        s.signal(&dst);
    }
    // Inside MULTI an empty source answers a null bulk at once (a timeout answers a null array).
    if s.in_exec && reply == Reply::NullArray {
        return Reply::Null;
    }
    reply
}

fn blmove(s: &mut Session, args: &[Bytes]) -> Reply {
    let (Some(from), Some(to)) = (side(&args[3]), side(&args[4])) else {
        return Reply::error(crate::commands::collections::SYNTAX);
    };
    bmove(s, args[1].clone(), args[2].clone(), from, to, &args[5])
}

fn brpoplpush(s: &mut Session, args: &[Bytes]) -> Reply {
    bmove(s, args[1].clone(), args[2].clone(), false, true, &args[3])
}

fn blmpop(s: &mut Session, args: &[Bytes]) -> Reply {
    let timeout = args[1].clone();
    let (keys, left, count) = match mpop_args(&args[2..], ["left", "right"]) {
        Ok((k, l, c)) => (k.to_vec(), l, c),
        Err(e) => return e,
    };
    if let Err(e) = crate::services::blocking::parse_timeout(&timeout) {
        return e;
    }
    let db = s.db;
    let view = s.state.storage.view(&s.exec, db);
    for key in &keys {
        if let Err(e) = list_at(&view, key) {
            return e;
        }
    }
    block_or_reply(s, keys, &timeout, Reply::NullArray, move |state, cx, key| mpop_key(state, cx, db, key, left, count))
}
