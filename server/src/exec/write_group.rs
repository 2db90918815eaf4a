//! Write groups: a pipeline's consecutive writes of known keys run as one transaction with
//! one commit (see [`run_group`]).

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use super::gate::panic_message;
use super::session::Session;
use crate::commands::{engine_error, flag, lookup, queued_keys, run_buffered, CommandSpec};
use crate::resp::Reply;

/// Write commands that may join a pipeline's write group: each locks exactly the keys its
/// command-table entry names (XREADGROUP's key specs: the keys after STREAMS), never blocks
/// (XREADGROUP only without BLOCK, see [`groupable`]), and never touches another database.
/// Blind writes (plain SET, MSET) are left out: they read nothing, so a group only adds its
/// buffer's cost.
pub(crate) const GROUPABLE: &[&str] = &[
    "append",
    "decr",
    "decrby",
    "del",
    "expire",
    "expireat",
    "geoadd",
    "getdel",
    "getset",
    "hdel",
    "hincrby",
    "hincrbyfloat",
    "hmset",
    "hset",
    "hsetnx",
    "incr",
    "incrby",
    "incrbyfloat",
    "linsert",
    "lmove",
    "lpop",
    "lpush",
    "lpushx",
    "lrem",
    "lset",
    "ltrim",
    "msetnx",
    "pfadd",
    "pfcount",
    "persist",
    "pexpire",
    "pexpireat",
    "psetex",
    "rpop",
    "rpoplpush",
    "rpush",
    "rpushx",
    "sadd",
    "set",
    "setbit",
    "setex",
    "setnx",
    "setrange",
    "smove",
    "spop",
    "srem",
    "unlink",
    "xack",
    "xadd",
    "xautoclaim",
    "xclaim",
    "xdel",
    "xreadgroup",
    "xtrim",
    "zadd",
    "zincrby",
    "zpopmax",
    "zpopmin",
    "zrem",
    "zremrangebylex",
    "zremrangebyrank",
    "zremrangebyscore",
];

/// Most requests one write group runs.
const MAX_GROUP: usize = 256;

/// Whether `args` may join a write group on this session now (plain `SET`s have their own,
/// cheaper batch). Clients of a restricted ACL user run their writes one by one, so a refusal is
/// logged as a top-level command, never as part of a transaction.
pub(super) fn groupable(s: &Session, spec: &CommandSpec, args: &[Bytes]) -> bool {
    spec.has(flag::GROUPABLE)
        && !(spec.name == "set" && args.len() == 3)
        && !(spec.name == "xreadgroup" && crate::commands::read_may_block(args))
        && session_may_group(s)
}

/// Whether this session's writes may run in a write group now (see [`groupable`]).
pub(super) fn session_may_group(s: &Session) -> bool {
    s.authenticated && s.user.unrestricted() && s.multi.is_none() && !s.in_exec && !s.subscribed()
}

/// The run of groupable requests at the front of `requests`.
pub(super) fn take_group(s: &Session, requests: &mut VecDeque<Vec<Bytes>>) -> Vec<Vec<Bytes>> {
    let mut group = Vec::new();
    while group.len() < MAX_GROUP {
        let Some(args) = requests.front() else { break };
        if !lookup(&args[0]).is_some_and(|c| groupable(s, c, args)) {
            break;
        }
        group.extend(requests.pop_front());
    }
    group
}

/// Runs consecutive pipelined writes as one group, the way EXEC runs its queue: the stripes of
/// all their keys are locked up front (in one fixed order, so groups never deadlock), every
/// command writes into one buffer that later commands of the group read through, and the
/// buffer is committed to the engine as one batch before any reply goes out. Each command
/// keeps its own reply (an error stays that command's); if the commit fails, every command of
/// the group is answered with the engine's error, since none of their writes happened. One
/// lock round and one commit for the whole run instead of one per command. Returns the requests
/// left unrun because the replies reached `output_bound`.
pub(super) fn run_group(
    s: &mut Session,
    mut group: Vec<Vec<Bytes>>,
    out: &mut BytesMut,
    output_bound: usize,
) -> Vec<Vec<Bytes>> {
    let state = std::sync::Arc::clone(&s.state);
    // Replies are encoded as they come, so the group can stop at the output bound like any
    // other run of commands; the rest go back to the queue.
    let mut pending = BytesMut::new();
    let mut ran = 0;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let keys = queued_keys(s.db, &group);
        let guard = state.storage.lock_pairs(&s.exec, keys.iter().map(|(db, k)| (*db, &k[..])));
        run_buffered(&mut [(&mut *s, &group[..])], guard, |_, s, reply| {
            if s.take_reply_permission() {
                reply.encode(s.protocol, &mut pending);
            }
            ran += 1;
            out.len() + pending.len() < output_bound
        })
    }));
    let error = match outcome {
        Ok(Ok(())) => {
            out.extend_from_slice(&pending);
            return group.split_off(ran.min(group.len()));
        }
        Ok(Err(e)) => engine_error(e),
        Err(panic) => {
            let what = panic_message(&*panic);
            tracing::error!(target: "shale::exec", client = s.id, commands = group.len(), panic = %what, "a pipelined write group panicked; its commands get errors");
            s.in_exec = false;
            s.signals.clear();
            s.exec.reset();
            // The command that panicked is answered too, never run again.
            ran += 1;
            Reply::error("ERR internal error running a pipelined write (see the server log)")
        }
    };
    let consumed = ran.min(group.len());
    let rest = group.split_off(consumed);
    // None of the group's writes happened: every command that ran gets the error.
    for _ in 0..consumed {
        error.encode(s.protocol, out);
    }
    rest
}
