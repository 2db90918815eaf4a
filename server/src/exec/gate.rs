//! The command gate and the batch runner.
//!
//! Every request of every connection passes [`gate`] — authentication, RESP2 subscribed mode,
//! the command table's arity, `enable-debug-command` for DEBUG, `no-multi` commands inside
//! MULTI (SAVE, SHUTDOWN …), the user's ACL permissions, the replication rules (writes on a
//! replica, `min-replicas-to-write`, stale data), `-BUSY` while a script runs too long, then
//! MULTI queueing — in that order,
//! before anything runs; fast paths
//! come after it. [`run_batch`] runs a connection's parsed requests on an executor thread: it
//! honours `CLIENT PAUSE`, catches a panicking command (the client gets an error for that
//! command only and its execution context is reset), coalesces consecutive plain `SET`s into
//! one engine batch, runs consecutive pipelined writes of known keys as one write group (see
//! [`super::write_group`]), and stops once the replies it produced pass the output bound so the
//! connection can write them before more work is done (backpressure). What a connection's own
//! task runs before it hands a batch over is in [`super::in_memory`].

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::after_command;
use super::observe::{observe, stats_id};
use super::session::{BlockRequest, Session};
pub(super) use super::set_batch::SetBatch;
use super::write_group::{groupable, run_group, take_group};
use crate::commands::flag;
use crate::commands::{lookup, meta, unknown_command, CommandSpec};
use crate::resp::{Protocol, Reply};
use crate::services::command_stats::Stamp;
use crate::services::notifications;

/// Why [`run_batch`] returned.
#[derive(Debug)]
pub enum BatchEnd {
    /// Every request ran.
    Drained,
    /// The replies produced passed the output bound: write them, then run the rest.
    OutputFull,
    /// A command blocks (BLPOP, LOCK …): the connection waits for it, then runs the rest.
    Blocked(BlockRequest),
    /// `CLIENT PAUSE` holds the next command back this long.
    Paused(Duration),
    /// The connection closes after writing the replies (QUIT, CLIENT KILL).
    Close,
    /// PSYNC was accepted: the connection becomes a replica link.
    Replica(crate::replication::primary::Handoff),
    /// SYNC's snapshot: the connection sends this file as a bulk string, deletes it, closes.
    SendFile(std::path::PathBuf),
}

/// Checks a request against the gate. `Ok(spec)`: run it; `Err(reply)`: answer that instead
/// (an error, or `QUEUED` inside MULTI).
pub fn gate(s: &mut Session, args: &[Bytes]) -> Result<&'static CommandSpec, Reply> {
    let spec = args.first().and_then(|name| lookup(name));
    admit(s, args, spec)
}

/// [`gate`] for a request whose command was already looked up (`spec`). A refused EXEC also
/// discards the transaction, answering `EXECABORT` with the reason (as Redis does).
pub(super) fn admit(
    s: &mut Session,
    args: &[Bytes],
    spec: Option<&'static CommandSpec>,
) -> Result<&'static CommandSpec, Reply> {
    let outcome = match check(s, args, spec) {
        Err(Reply::Error(why)) if spec.is_some_and(|c| c.name == "exec") => {
            s.multi = None;
            s.multi_error = false;
            crate::commands::clear_watches(s);
            Err(Reply::error(format!("EXECABORT Transaction discarded because of: {why}")))
        }
        other => other,
    };
    if let Err(Reply::Error(why)) = &outcome {
        s.state.command_stats.rejected(spec.map(|c| stats_id(c, args)), why);
    }
    outcome
}

/// Redis's refusal of a command that may grow memory while `used_memory` is over `maxmemory`.
pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// The gate's checks, in order.
fn check(s: &mut Session, args: &[Bytes], spec: Option<&'static CommandSpec>) -> Result<&'static CommandSpec, Reply> {
    let Some(name) = args.first() else { return Err(Reply::error("ERR empty command")) };
    s.state.commands_processed.fetch_add(1, Ordering::Relaxed);
    if !s.authenticated && !spec.is_some_and(|c| c.has(flag::NO_AUTH) || c.name == "quit") {
        return Err(Reply::error("NOAUTH Authentication required."));
    }
    if s.protocol == Protocol::Resp2
        && s.subscribed()
        && !spec.is_some_and(|c| crate::commands::allowed_when_subscribed(c.name))
    {
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        return Err(Reply::error(format!(
            "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
        )));
    }
    let queuing = s.multi.is_some() && !spec.is_some_and(|c| crate::commands::is_transaction_control(c.name));
    let Some(spec) = spec else {
        s.multi_error |= queuing;
        return Err(unknown_command(args));
    };
    let n = args.len() as i32;
    if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
        s.multi_error |= queuing;
        return Err(Reply::error(format!("ERR wrong number of arguments for '{}' command", spec.name)));
    }
    // A container's subcommand has an arity of its own (`command|getkeys`), as in Redis 7.
    if let Some(arity) = subcommand_arity(spec, args).filter(|&(_, a)| (a > 0 && n != a) || (a < 0 && n < -a)) {
        s.multi_error |= queuing;
        return Err(Reply::error(format!("ERR wrong number of arguments for '{}' command", arity.0)));
    }
    if spec.name == "debug" && !s.allowed_by("enable-debug-command") {
        s.multi_error |= queuing;
        return Err(Reply::error(
            "ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server.",
        ));
    }
    if queuing && spec.has(flag::NO_MULTI) {
        s.multi_error = true;
        return Err(Reply::error("ERR Command not allowed inside a transaction"));
    }
    if let Err(refused) = crate::commands::acl::permit(s, spec, args) {
        s.multi_error |= queuing;
        return Err(refused);
    }
    // Over `maxmemory`: no command that may grow memory, and (as queuing takes memory too)
    // nothing queued inside MULTI.
    if (queuing || spec.has(flag::DENYOOM)) && s.state.out_of_memory() {
        s.multi_error |= queuing;
        return Err(Reply::error(OOM));
    }
    if let Some(refused) = crate::commands::replication::refusal(s, spec) {
        s.multi_error |= queuing;
        return Err(refused);
    }
    // A script running past `busy-reply-threshold` holds everyone else off, as in Redis.
    if let Some(eval) = s.state.scripting.status.busy_for(s.id) {
        if !crate::scripting::allowed_while_busy(spec.name, args) {
            s.multi_error |= queuing;
            return Err(Reply::error(if eval {
                "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
            } else {
                "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE."
            }));
        }
    }
    if queuing {
        if let Some(queue) = s.multi.as_mut() {
            queue.push(args.to_vec());
        }
        return Err(Reply::Simple("QUEUED".into()));
    }
    // CLIENT LIST's `cmd=`: the subcommand of a container (`client|list`), as in Redis 7.
    s.handle.touch(meta::static_name(stats_id(spec, args)));
    Ok(spec)
}

/// The full name and arity of the subcommand a call of a container command names, if Redis
/// 7.0 has it.
fn subcommand_arity(spec: &'static CommandSpec, args: &[Bytes]) -> Option<(&'static str, i32)> {
    let called = &meta::universe()[stats_id(spec, args)];
    if !called.is_sub {
        return None;
    }
    meta::redis_command(&called.name).map(|m| (m.name, m.arity))
}

/// Runs one request through the gate (EXEC runs its queue through here).
pub fn dispatch(s: &mut Session, args: &[Bytes]) -> Reply {
    match gate(s, args) {
        Ok(spec) => run_command(s, spec, args),
        Err(reply) => reply,
    }
}

/// Runs a command that passed the gate.
pub(crate) fn run_command(s: &mut Session, spec: &'static CommandSpec, args: &[Bytes]) -> Reply {
    // A read of several keys sees them all as of one moment.
    let multi_key_read =
        spec.has(flag::READONLY) && args.len() > 2 && (spec.first_key != spec.last_key || spec.first_key == 0);
    let took_snapshot = multi_key_read && s.exec.begin_snapshot(s.state.storage.engine());
    s.exec.set_notify_flags(s.state.notify_flags(), spec.has(flag::READONLY));
    if let Some(key) = usize::try_from(spec.first_key).ok().filter(|&k| k > 0).and_then(|k| args.get(k)) {
        s.state.access.prefetch(s.db, key);
    }
    // A write does not overtake another client's blocking command that arrived before it
    // (services/announced.rs). Writes run on executor threads, where waiting is allowed.
    if s.state.blocking.announced.any() && !s.in_exec && spec.has(flag::WRITE) {
        let keys: Vec<&Bytes> = spec.key_positions(args.len()).filter_map(|i| args.get(i)).collect();
        s.state.blocking.announced.wait_for_earlier(s.id, s.arrival, s.db, &keys);
    }
    let started = Stamp::now();
    let reply = (spec.handler)(s, args);
    // A memory-only attempt that needed the disk is void: its rerun is the call.
    if !s.exec.voided() {
        after_command::touch_keys(s, spec, args);
        after_command::wake_changed_keys(s, spec, args);
        observe(s, spec, args, &reply, started.elapsed());
        if s.tracking {
            after_command::remember_keys(s, spec, args);
        }
    }
    // `CLIENT CACHING` covers the next command, or the next transaction.
    if !s.in_exec && s.multi.is_none() && spec.name != "client" {
        s.tracking_caching = false;
    }
    if took_snapshot {
        s.exec.end_snapshot();
    }
    if !s.in_exec {
        after_command::expire_seen(s);
        // A command's writes are committed when it returns (EXEC's and a write group's
        // events were published by `run_buffered`, after their commit).
        notifications::publish(&s.state, s.exec.take_events());
        serve_signals(s);
    }
    reply
}

/// True if plain SETs may skip their handler (blind batches): no keyspace notification asks
/// for their events, no MONITOR client waits for them, no client tracks keys and the slow log
/// does not log every command.
pub(super) fn blind_sets_allowed(s: &Session) -> bool {
    !notifications::enabled(s.state.notify_flags(), notifications::STRING | notifications::NEW)
        && !s.state.pubsub.has_monitors()
        && !s.state.storage.tracking.active()
        && !s.state.slowlog.wants(0)
}

/// True if `args` is a write that can join a batch of blind string writes ([`SetBatch`]): a
/// plain `SET key value`, or an `MSET` of whole pairs, of keys no client is blocked on.
pub(super) fn blind_set(s: &Session, spec: &CommandSpec, args: &[Bytes]) -> bool {
    let keys = match spec.name {
        "set" if args.len() == 3 => &args[1..2],
        "mset" if args.len() >= 3 && args.len() % 2 == 1 => &args[1..],
        _ => return false,
    };
    keys.iter().step_by(2).all(|k| !waited_on(s, k))
}

/// True if a client is blocked on `key` (a SET of it must run its handler, which wakes them:
/// see `after_command::wake_changed_keys`).
pub(super) fn waited_on(s: &Session, key: &Bytes) -> bool {
    (s.state.blocking.blocked_clients() > 0 && s.state.blocking.has_waiters(s.db, key))
        || s.state.blocking.announced.announced_by_other(s.id, s.db, key)
}

/// True if `CLIENT PAUSE WRITE` holds this request back: what Redis calls a "may replicate"
/// command — a write, PUBLISH, PFCOUNT, a script or function that may write (an EVAL without a
/// shebang may), and EXEC of a transaction that queued any of these. A request the gate will
/// refuse for its arity is answered at once, as in Redis.
fn may_replicate(s: &Session, spec: &CommandSpec, args: &[Bytes]) -> bool {
    let n = args.len() as i32;
    if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
        return false;
    }
    let script_may_write = |flags: Option<crate::scripting::ScriptFlags>| flags.is_some_and(|f| !f.no_writes);
    match spec.name {
        "exec" => s.multi.as_ref().is_some_and(|queued| {
            queued.iter().any(|q| lookup(&q[0]).is_some_and(|c| c.name != "exec" && may_replicate(s, c, q)))
        }),
        "eval" => script_may_write(crate::scripting::eval_shebang(&args[1]).ok().map(|(f, _)| f)),
        "evalsha" => {
            let sha = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
            script_may_write(s.state.scripting.script_flags(&sha))
        }
        "fcall" => {
            let name = String::from_utf8_lossy(&args[1]).into_owned();
            script_may_write(s.state.scripting.vm().libraries.function(&name).map(|f| f.flags))
        }
        _ => spec.flags.iter().any(|f| matches!(*f, "write" | "may_replicate")),
    }
}

/// Serves clients blocked on the keys the last command signalled.
pub fn serve_signals(s: &mut Session) {
    serve_keys(&s.state, s.db, std::mem::take(&mut s.signals));
}

/// Serves, on an executor thread, the clients blocked on the keys in `session.signals` (their
/// commands run, and may block), before the connection goes on.
pub async fn serve_blocked(state: &std::sync::Arc<crate::state::ServerState>, session: &mut Session) {
    let (keys, db) = (std::mem::take(&mut session.signals), session.db);
    let server = std::sync::Arc::clone(state);
    let served = state.executor.run(move || crate::exec::serve_keys(&server, db, keys));
    if served.await.is_err() {
        tracing::error!(target: "shale::net", client = session.id, "serving blocked clients failed");
    }
}

/// Serves the clients blocked on `keys` of `db` (their commands run here, and may block).
pub fn serve_keys(state: &crate::state::ServerState, db: u32, keys: Vec<Bytes>) {
    for key in keys {
        if state.blocking.has_waiters(db, &key) {
            state.blocking.serve(db, &key);
        }
    }
}

/// Runs requests from the front of `requests` until none is left, the replies in `out` pass
/// `output_bound` bytes, a command blocks, `CLIENT PAUSE` holds one back, or the connection
/// must close. Requests not run stay in `requests`.
pub fn run_batch(
    s: &mut Session,
    requests: &mut VecDeque<Vec<Bytes>>,
    out: &mut BytesMut,
    output_bound: usize,
) -> BatchEnd {
    let mut sets = SetBatch::default();
    let end = loop {
        if s.handle.killed.load(Ordering::Acquire) {
            break BatchEnd::Close;
        }
        let Some(args) = requests.front() else { break BatchEnd::Drained };
        let looked_up = lookup(&args[0]);
        // A script may keep the VM for the script after it; it is let go before anything else
        // runs, and during a pause (whose check below may look a script up in the VM).
        let script = looked_up.is_some_and(is_script);
        s.script_next = script && requests.get(1).is_some_and(|a| lookup(&a[0]).is_some_and(is_script));
        if s.script_vm.is_some() && (!script || s.state.pause_in_force()) {
            s.script_vm = None;
        }
        if let Some(spec) = looked_up.filter(|c| c.name != "client" && s.state.pause_in_force()) {
            if let Some(wait) = s.state.pause_remaining(may_replicate(s, spec, args)) {
                break BatchEnd::Paused(wait);
            }
        }
        // Two or more groupable writes in a row run as one write group.
        let joins = |r: Option<&Vec<Bytes>>| r.is_some_and(|a| lookup(&a[0]).is_some_and(|c| groupable(s, c, a)));
        if joins(Some(args)) && joins(requests.get(1)) {
            let group = take_group(s, requests);
            sets.commit(s, out);
            let rest = run_group(s, group, out, output_bound);
            for args in rest.into_iter().rev() {
                requests.push_front(args);
            }
            s.exec.reset();
            if out.len() >= output_bound {
                break BatchEnd::OutputFull;
            }
            continue;
        }
        let Some(args) = requests.pop_front() else { break BatchEnd::Drained };
        let name = args[0].clone();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Option<Reply> {
            let spec = match admit(s, &args, looked_up) {
                Ok(spec) => spec,
                Err(reply) => {
                    sets.commit(s, out);
                    return Some(reply);
                }
            };
            if spec.name == "set" && !s.in_exec && blind_sets_allowed(s) && blind_set(s, spec, &args) {
                // Fast path: a plain SET joins the pipeline's batch of blind writes. (MSETs run
                // their handler here: a batch of many holds all their key stripes through its
                // commit, which stalled other connections' MSETs — 10 % fewer at P16.)
                if !sets.is_empty() && sets.db != s.db {
                    sets.commit(s, out);
                }
                sets.add(s, spec, &args);
                if sets.is_full() {
                    sets.commit(s, out);
                }
                return None;
            }
            sets.commit(s, out);
            Some(run_command(s, spec, &args))
        }));
        let reply = match outcome {
            Ok(Some(reply)) => reply,
            Ok(None) => continue,
            Err(panic) => {
                sets = SetBatch::default();
                panicked(s, &name, &*panic)
            }
        };
        s.exec.reset();
        if let Some(req) = s.blocked.take() {
            break BatchEnd::Blocked(req);
        }
        if let Some(handoff) = s.handoff.take() {
            break BatchEnd::Replica(handoff);
        }
        if let Some(path) = s.send_file.take() {
            break BatchEnd::SendFile(path);
        }
        if s.take_reply_permission() || reply.is_push() {
            reply.encode(s.protocol, out);
        }
        if s.closing {
            break BatchEnd::Close;
        }
        if out.len() >= output_bound {
            break BatchEnd::OutputFull;
        }
    };
    sets.commit(s, out);
    s.exec.reset();
    s.script_vm = None;
    s.script_next = false;
    end
}

/// EVAL, EVALSHA, FCALL and their read-only forms.
fn is_script(spec: &CommandSpec) -> bool {
    matches!(spec.name, "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro")
}

/// The reply of a command that panicked, after logging it and clearing what it left in the
/// session (its execution context is reset by the caller).
pub(super) fn panicked(s: &mut Session, name: &[u8], panic: &(dyn std::any::Any + Send)) -> Reply {
    let what = panic_message(panic);
    let command = String::from_utf8_lossy(name).to_ascii_lowercase();
    tracing::error!(target: "shale::exec", client = s.id, %command, panic = %what, "command panicked; its client gets an error");
    s.in_exec = false;
    s.blocked = None;
    s.signals.clear();
    Reply::error(format!("ERR internal error running '{command}' (see the server log)"))
}

/// The text a panic carried.
pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::Config;
    use crate::state::ServerState;

    pub(crate) fn session() -> (tempfile::TempDir, Session) {
        let dir = tempfile::tempdir().unwrap();
        let s = session_in(dir.path());
        (dir, s)
    }

    /// A session on the database in `path`.
    pub(crate) fn session_in(path: &std::path::Path) -> Session {
        let db = lsm::Db::open(path, lsm::Options::default()).unwrap();
        Session::new(Arc::new(ServerState::new(Config::default(), db).unwrap()))
    }

    pub(crate) fn request(words: &[&[u8]]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::copy_from_slice(w)).collect()
    }

    #[test]
    fn a_write_group_stops_at_the_output_bound_and_keeps_the_rest_queued() {
        let (_d, mut s) = session();
        let big = vec![b'x'; 10_000];
        let mut queue: VecDeque<Vec<Bytes>> =
            (0..20).map(|_| request(&[b"rpush", b"l", &big])).collect::<VecDeque<_>>();
        let mut out = BytesMut::new();
        assert!(matches!(run_batch(&mut s, &mut queue, &mut out, 1 << 20), BatchEnd::Drained));
        out.clear();
        queue.extend((0..20).map(|_| request(&[b"lpop", b"l"])));
        // Twenty pops of 10 KB each, an output bound of 25 KB: three replies, then stop.
        let end = run_batch(&mut s, &mut queue, &mut out, 25_000);
        assert!(matches!(end, BatchEnd::OutputFull), "{end:?}");
        assert_eq!(queue.len(), 17, "the pops not run stay queued, in order");
        assert!(out.len() >= 25_000 && out.len() < 40_000, "{} bytes of replies", out.len());
        // The three that ran are committed; the rest run on the next round.
        out.clear();
        assert!(matches!(run_batch(&mut s, &mut queue, &mut out, 1 << 20), BatchEnd::Drained));
        assert_eq!(out.iter().filter(|&&b| b == b'$').count(), 17);
        assert_eq!(dispatch(&mut s, &request(&[b"llen", b"l"])), Reply::Integer(0));
    }
}
