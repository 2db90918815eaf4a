//! MULTI, EXEC, DISCARD, WATCH, UNWATCH.
//!
//! MULTI makes the connection queue commands (answering `+QUEUED`; a command that does not
//! exist or has the wrong arity answers its error and dooms the transaction). EXEC checks the
//! watched keys, takes the locks of every key the queued commands name, runs them with their
//! writes buffered (they see each other's writes), and commits everything as one engine batch:
//! no client sees part of a transaction, and neither does recovery after a crash.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{dispatch, engine_error, lookup, spec, CommandSpec, Session, NO_KEYS};
use crate::resp::Reply;
use crate::storage::{now_ms, LockGuard, Watched};

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("multi", 1, &["noscript", "loading", "stale", "fast", "allow_busy"], NO_KEYS, multi),
    spec("exec", 1, &["noscript", "loading", "stale", "skip_slowlog"], NO_KEYS, exec),
    spec("discard", 1, &["noscript", "loading", "stale", "fast", "allow_busy"], NO_KEYS, discard),
    spec("watch", -2, &["noscript", "loading", "stale", "fast", "allow_busy"], (1, -1, 1), watch),
    spec("unwatch", 1, &["noscript", "loading", "stale", "fast", "allow_busy"], NO_KEYS, unwatch),
];

/// Commands that act on the transaction itself rather than being queued.
pub(crate) fn is_control(name: &str) -> bool {
    matches!(name, "exec" | "discard" | "multi" | "watch" | "quit" | "reset")
}

fn multi(s: &mut Session, _: &[Bytes]) -> Reply {
    if s.multi.is_some() {
        return Reply::error("ERR MULTI calls can not be nested");
    }
    s.multi = Some(Vec::new());
    s.multi_error = false;
    Reply::ok()
}

fn discard(s: &mut Session, _: &[Bytes]) -> Reply {
    if s.multi.take().is_none() {
        return Reply::error("ERR DISCARD without MULTI");
    }
    clear_watches(s);
    Reply::ok()
}

/// Drops every WATCH of the session.
pub(crate) fn clear_watches(s: &mut Session) {
    let watched = std::mem::take(&mut s.watched);
    s.state.storage.watches.unwatch(&watched, &s.watch_flag);
    s.watch_flag.store(false, Ordering::Release);
}

fn watch(s: &mut Session, args: &[Bytes]) -> Reply {
    if s.multi.is_some() {
        return Reply::error("ERR WATCH inside MULTI is not allowed");
    }
    // Under the keys' locks: a writer holding them finishes (and is visible) first.
    let state = std::sync::Arc::clone(&s.state);
    let _guard = state.storage.lock(&s.exec, s.db, args[1..].iter().map(|k| &k[..]));
    let view = state.storage.view(&s.exec, s.db);
    for key in &args[1..] {
        let live_until = match view.get(key) {
            Ok(m) => m.map(|m| m.expire_at_ms),
            Err(e) => return engine_error(e),
        };
        let pdb = view.pdb();
        s.state.storage.watches.watch(pdb, key.clone(), &s.watch_flag);
        s.watched.push(Watched { pdb, key: key.clone(), live_until });
    }
    Reply::ok()
}

fn unwatch(s: &mut Session, _: &[Bytes]) -> Reply {
    clear_watches(s);
    Reply::ok()
}

/// True if a watched key changed (or expired) since WATCH.
fn watch_broken(s: &Session) -> bool {
    if s.watch_flag.load(Ordering::Acquire) {
        return true;
    }
    let now = now_ms();
    s.watched.iter().any(|w| matches!(w.live_until, Some(at) if at != 0 && at <= now))
}

/// Every (db, key) the queued commands may touch: their declared keys, and for commands that
/// locate keys by a count (ZUNION, LMPOP, …) every argument. Locking too much is harmless.
pub(crate) fn queued_keys(db: u32, queue: &[Vec<Bytes>]) -> Vec<(u32, Bytes)> {
    let mut out = Vec::new();
    each_queued_key(db, queue, |db, key| out.push((db, key.clone())));
    out
}

/// The first (db, key) of [`queued_keys`], found without collecting the others.
pub(crate) fn first_queued_key(db: u32, queue: &[Vec<Bytes>]) -> Option<(u32, Bytes)> {
    let mut first = None;
    each_queued_key(db, queue, |db, key| {
        if first.is_none() {
            first = Some((db, key.clone()));
        }
    });
    first
}

/// Calls `f` with every (db, key) of [`queued_keys`], in order, without copying them.
fn each_queued_key<'a>(db: u32, queue: &'a [Vec<Bytes>], mut f: impl FnMut(u32, &'a Bytes)) {
    let mut db = db;
    for args in queue {
        let Some(spec) = lookup(&args[0]) else { continue };
        if spec.name == "select" {
            if let Some(n) = args.get(1).and_then(|a| super::parse_i64(a)) {
                db = n.max(0) as u32;
            }
            continue;
        }
        command_keys(spec, args, |key| f(db, key));
    }
}

/// Calls `f` with every key a call of `spec` with `args` (not a SELECT) may touch, as
/// [`queued_keys`] counts them.
pub(crate) fn command_keys<'a>(spec: &CommandSpec, args: &'a [Bytes], mut f: impl FnMut(&'a Bytes)) {
    if spec.name == "xreadgroup" {
        // Its keys follow STREAMS (a groupable write: it must lock its keys, not its words).
        super::meta::keys(spec, args).into_iter().for_each(|k| f(&args[k.pos]));
    } else if spec.first_key == 0 {
        args[1..].iter().for_each(f);
    } else {
        spec.key_positions(args.len()).for_each(|i| f(&args[i]));
    }
}

/// One client's commands in a buffered run: its session and the commands it runs.
pub(crate) type Part<'a> = (&'a mut Session, &'a [Vec<Bytes>]);

/// Runs the commands of `parts` (one client's, or several clients' combined into one write
/// group) with the stripes of `guard` held: every command writes into one buffer that later
/// ones (of whichever client) read through, and the buffer is committed as one engine batch,
/// after which each client's keyspace events are published and the clients blocked on keys it
/// filled are served. `each` gets every reply in order with its part's index, before the
/// commit, and answers whether to go on (the rest is then not run); the result is the
/// commit's. EXEC, pipelined write groups and combined writes (`exec::combine`) all run
/// through here.
pub(crate) fn run_buffered(
    parts: &mut [Part<'_>],
    guard: LockGuard<'_>,
    mut each: impl FnMut(usize, &mut Session, Reply) -> bool,
) -> lsm::Result<()> {
    let Some(state) = parts.first().map(|(s, _)| std::sync::Arc::clone(&s.state)) else { return Ok(()) };
    // A client's own batch is committed as its own (`CLIENT TRACKING NOLOOP`); a combined one
    // as the server's.
    let origin = if parts.len() == 1 { parts[0].0.id } else { 0 };
    let mut buffer = None;
    'parts: for (i, (s, queue)) in parts.iter_mut().enumerate() {
        state.storage.hold_for_exec(&s.exec, &guard);
        s.exec.resume_transaction(buffer.take());
        s.in_exec = true;
        let mut go_on = true;
        for args in queue.iter() {
            let reply = dispatch(s, args);
            if !each(i, s, reply) {
                go_on = false;
                break;
            }
        }
        s.in_exec = false;
        buffer = s.exec.suspend_transaction();
        state.storage.end_exec(&s.exec);
        if !go_on {
            break 'parts;
        }
    }
    let batch = buffer.map(crate::storage::Suspended::into_batch).unwrap_or_default();
    let committed = if batch.is_empty() { Ok(()) } else { state.storage.commit_from(batch, origin) };
    drop(guard);
    for (s, _) in parts.iter_mut() {
        // The commands' keyspace events, once their writes are visible (none if they failed).
        let events = s.exec.take_events();
        if committed.is_ok() {
            crate::services::notifications::publish(&state, events);
        }
        crate::exec::serve_signals(s);
    }
    committed
}

fn exec(s: &mut Session, _: &[Bytes]) -> Reply {
    let Some(queue) = s.multi.take() else { return Reply::error("ERR EXEC without MULTI") };
    if s.multi_error {
        clear_watches(s);
        return Reply::error("EXECABORT Transaction discarded because of previous errors.");
    }
    let state = std::sync::Arc::clone(&s.state);
    let keys = queued_keys(s.db, &queue);
    // A queued FLUSHDB/FLUSHALL commits with the rest: every stripe is held until then, so no
    // other client's write straddles it (the keyspace counts stay exact).
    let whole_keyspace =
        queue.iter().any(|args| lookup(&args[0]).is_some_and(|c| matches!(c.name, "flushdb" | "flushall" | "swapdb")));
    let guard = if whole_keyspace {
        state.storage.lock_all(&s.exec)
    } else {
        state.storage.lock_pairs(&s.exec, keys.iter().map(|(db, k)| (*db, &k[..])))
    };
    // Checked under the locks: nobody can change a watched key between the check and the run.
    if watch_broken(s) {
        drop(guard);
        clear_watches(s);
        return Reply::NullArray;
    }
    let mut replies = Vec::with_capacity(queue.len());
    // Clients blocked on keys the transaction filled are served once it is visible.
    let committed = run_buffered(&mut [(&mut *s, &queue[..])], guard, |_, _, reply| {
        replies.push(reply);
        true
    });
    clear_watches(s);
    match committed {
        Ok(()) => Reply::Array(replies),
        Err(e) => engine_error(e),
    }
}
