//! Read-modify-write commands on the connection's own task: a run of writes that may join a
//! write group (INCR, HSET, LPUSH, …, see `write_group::GROUPABLE`, and EVAL scripts of their
//! declared keys, see `scripting::call`) runs right where it was
//! read, as one write group whose commit is queued with the engine and awaited, instead of
//! going to an executor thread and back (two thread hand-offs, which cost more CPU than the
//! command itself at one request per round).
//!
//! Nothing here may block, so it runs only when it cannot need to:
//! - the stripes of all the run's keys are free and every async write queued under them is
//!   visible (`Storage::try_lock_settled`); otherwise the run goes to an executor, where it
//!   may wait, or — free stripes whose write is not visible yet, a hot key's — a short round
//!   waits for that write on the task, where the rounds of every client waiting on the key
//!   then run as one group ([`run_parts`], `combine::on_task`);
//! - the keyspace counts' "before" of every key is known from memory (`Storage::befores`);
//! - every command's reads are memory-only, as the in-memory reads' are: the first one that
//!   would need the disk (or walks a range) is void — its buffered writes and events are
//!   rolled back to a savepoint, it is not counted, and it and the rest stay queued for an
//!   executor — and the commands before it commit as a group.
//!
//! The group runs as a pipeline's write group does (`write_group::run_group`): every command
//! passes the gate, writes into one transaction buffer that the next reads through, and keeps
//! its own reply; the buffer is queued as one batch, the stripes released at once and marked
//! with the write, so whoever takes them next waits until it is visible. The replies, the
//! keyspace events and the serving of clients blocked on the keys follow the commit; if it
//! fails, every command of the group is answered with the engine's error, since none of their
//! writes happened.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::gate::{dispatch, panic_message};
use super::session::Session;
use super::write_group::{groupable, session_may_group};
use crate::commands::{command_keys, engine_error, flag, lookup, CommandSpec};
use crate::resp::Reply;
use crate::services::notifications::KeyEvent;
use crate::state::ServerState;
use crate::storage::{Befores, CountChanges, QueuedWrite, Unsettled};

/// Most commands one group runs here (a pipeline's longer runs go on in the next round).
pub(crate) const MAX_RUN: usize = 64;

/// Groupable writes that go straight to an executor: those that walk or delete a range of
/// records (a random pick's bucket, a stream's entries, a list's elements, a sorted set's range
/// removals), which in memory-only mode void the command once it has done its work if a block
/// is not cached, and a random pick's raw cursor always (measured when every range voided: one
/// in six SPOPs tried here was voided), and DEL and UNLINK, which measure what they free by
/// walking it and then free the memtable's memory outside any group. ZPOPMIN and ZPOPMAX run
/// here: their walk of the sorted set's front voids them only where a block is not in memory
/// (ZPOPMIN of one sorted set, 50 clients: P1 about +10 %, P16 unchanged). XADD stays unless it
/// trims (see [`trims`]): appending reads only the stream's metadata.
pub(crate) const NOT_HERE: &[&str] = &[
    "del",
    "linsert",
    "lrem",
    "ltrim",
    "spop",
    "unlink",
    "xack",
    "xautoclaim",
    "xclaim",
    "xdel",
    "xreadgroup",
    "xtrim",
    "zremrangebylex",
    "zremrangebyrank",
    "zremrangebyscore",
];

/// True if a call of `spec` with `args` may run in a group here.
fn may_run_spec(s: &Session, spec: &CommandSpec, args: &[Bytes]) -> bool {
    if is_task_script(spec) {
        return session_may_group(s);
    }
    !spec.has(flag::NOT_ON_TASK) && groupable(s, spec, args) && !(spec.name == "xadd" && trims(args))
}

/// EVAL scripts join a group here: they run on a spare VM, may touch only their declared keys
/// and call only what [`script_may_call`] allows, or are void (see `scripting::call`).
/// Functions (FCALL) need the one VM, which another thread may hold: they go to executors.
/// On an executor, a pipeline's scripts run one by one, each with a commit of its own (only
/// here do they share a write group): a long round of scripts of one key stays on its task
/// (`combine::on_task::one_key_scripts`), and one of any length up to [`MAX_RUN`] may wait
/// there for a hot key (`combine::on_task::eligible`).
pub(crate) fn is_task_script(spec: &CommandSpec) -> bool {
    matches!(spec.name, "eval" | "evalsha" | "eval_ro" | "evalsha_ro")
}

/// True if a script running here may call `args` of `spec`: what may run here itself (a
/// write that may join a group, a read memory can answer), but no pub/sub command (a message
/// cannot be taken back if the script turns out void), and TIME.
pub(crate) fn script_may_call(spec: &CommandSpec, args: &[Bytes]) -> bool {
    let write = spec.has(flag::GROUPABLE) && !spec.has(flag::NOT_ON_TASK) && !(spec.name == "xadd" && trims(args));
    write || (spec.has(flag::MEMORY_READ) && !spec.has(flag::PUBSUB)) || spec.name == "time"
}

/// Appends the keys a request (a call of `spec`) of a run here locks and counts to `keys`,
/// borrowed from the request: a script's declared keys, any other command's (see
/// `command_keys`). A script's bad key count gives none (it fails at once).
fn request_keys<'a>(db: u32, spec: &CommandSpec, args: &'a [Bytes], keys: &mut Vec<(u32, &'a [u8])>) {
    if is_task_script(spec) {
        let n = args.get(2).and_then(|n| crate::commands::parse_i64(n)).unwrap_or(-1);
        if let Ok(n) = usize::try_from(n) {
            if n <= args.len().saturating_sub(3) {
                keys.extend(args[3..3 + n].iter().map(|k| (db, &k[..])));
            }
        }
        return;
    }
    command_keys(spec, args, |key| keys.push((db, &key[..])));
}

/// True if an XADD may trim (MAXLEN or MINID among its leading options, after a NOMKSTREAM):
/// trimming walks the stream's oldest entries. A field named so is taken for the option, which
/// only sends that XADD to an executor.
fn trims(args: &[Bytes]) -> bool {
    args.iter().skip(2).take(2).any(|a| a.eq_ignore_ascii_case(b"maxlen") || a.eq_ignore_ascii_case(b"minid"))
}

/// The commit of a group queued by [`run_queued`].
pub type GroupCommit = std::pin::Pin<Box<dyn std::future::Future<Output = lsm::Result<()>> + Send>>;

/// A group of writes on its way to the engine: its replies go out once it is committed.
#[derive(Default)]
pub struct PendingWrites {
    /// Resolves once the batch is committed (None: the group wrote nothing, or failed before
    /// it was queued: `failure`).
    pub commit: Option<GroupCommit>,
    /// The replies that are sent, encoded in order.
    replies: BytesMut,
    /// How many replies `replies` holds (each is the error if the commit fails).
    sent: usize,
    /// The group's keyspace events, published once it is committed.
    events: Vec<KeyEvent>,
    /// The group failed before its batch was queued: every command gets this.
    failure: Option<Reply>,
    /// The group ended at a command that needed the disk: it goes to an executor next.
    pub voided: bool,
    /// How many of the part's commands ran.
    pub(super) ran: usize,
}

impl std::fmt::Debug for PendingWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingWrites").field("sent", &self.sent).finish_non_exhaustive()
    }
}

impl PendingWrites {
    /// Encodes the replies once the commit is done — `failed` is its error, None if it
    /// succeeded (or there was none) — and publishes the group's keyspace events. True if
    /// clients blocked on keys the group wrote must be served now (`Session::signals`: serving
    /// runs their commands, which may block, so the caller does it on an executor thread before
    /// going on).
    pub fn finish(self, s: &mut Session, failed: Option<&Reply>, out: &mut BytesMut) -> bool {
        if let Some(error) = self.failure.as_ref().or(failed) {
            for _ in 0..self.sent {
                error.encode(s.protocol, out);
            }
            s.signals.clear();
            return false;
        }
        out.extend_from_slice(&self.replies);
        crate::services::notifications::publish(&s.state, self.events);
        let blocking = &s.state.blocking;
        s.signals.retain(|key| blocking.has_waiters(s.db, key));
        !s.signals.is_empty()
    }
}

/// True if the request at the front of `requests` may start a group here: a write that may
/// join a write group, from a client whose writes may be combined (no `CLIENT TRACKING`, see
/// `combine::eligible`), while no `CLIENT PAUSE` holds writes, no blocking command waits to
/// go before later writes and no MONITOR would see a voided command twice, on a writable
/// engine.
pub(super) fn eligible(s: &Session, spec: &CommandSpec, args: &[Bytes]) -> bool {
    may_run_spec(s, spec, args) && !s.tracking && server_allows(&s.state)
}

/// The server-wide part of [`eligible`], which can change while a round waits
/// (`combine::on_task` checks it again before it runs one).
pub(super) fn server_allows(state: &ServerState) -> bool {
    !state.pubsub.has_monitors()
        && !state.pause_in_force()
        && !state.blocking.announced.any()
        && !state.storage.engine().is_read_only()
}

/// Why [`run_queued`] ran nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRun {
    /// A stripe is held by another command, or the first command's counts or reads need the
    /// disk: the requests go to an executor thread.
    Elsewhere,
    /// The stripes are free but an async write queued under one is not visible yet: the
    /// requests may wait for it here (`combine::on_task`).
    Waits(lsm::WriteTicket),
}

/// Runs the run of groupable writes at the front of `requests` (see the module docs) and
/// queues their batch; the requests it ran leave the queue. Stops early once the replies (with
/// `out_len` bytes already waiting) reach `output_bound`.
pub(super) fn run_queued(
    s: &mut Session,
    requests: &mut VecDeque<Vec<Bytes>>,
    out_len: usize,
    output_bound: usize,
) -> Result<PendingWrites, NotRun> {
    let (state, origin) = (Arc::clone(&s.state), s.id);
    let (mut ran, commit) = run_parts(&mut [Part { s, requests, out_len }], output_bound, false)?;
    let mut pending = ran.pop().expect("one part");
    if let Some(queued) = commit {
        pending.commit = Some(Box::pin(committed(state, queued, origin)));
    }
    Ok(pending)
}

/// One client's requests in a run here: its session, its requests (those run leave the
/// front), and the bytes of replies it already has waiting.
pub(super) struct Part<'a> {
    pub(super) s: &'a mut Session,
    pub(super) requests: &'a mut VecDeque<Vec<Bytes>>,
    pub(super) out_len: usize,
}

/// Runs the groupable writes at the front of each part's requests as one write group, the
/// parts in order (one client's pipeline, or several clients' writes combined by
/// `combine::on_task`): every command reads through the writes of those before it, of
/// whichever client, and the group's batch is queued with the engine once. Each part gets its
/// [`PendingWrites`] (replies and events; the commit is the group's, returned beside them).
/// Where a command turns out to need the disk, it and everything after it (of every part)
/// is left queued; a panic answers the commands run so far, and the one that panicked, with
/// an error and queues nothing. `urgent`: other writes wait for this one (its commit is
/// started at once, see `Storage::queue_write`).
pub(super) fn run_parts(
    parts: &mut [Part<'_>],
    output_bound: usize,
    urgent: bool,
) -> Result<(Vec<PendingWrites>, Option<QueuedWrite>), NotRun> {
    let Some(state) = parts.first().map(|p| Arc::clone(&p.s.state)) else { return Err(NotRun::Elsewhere) };
    // The run's keys, borrowed from its requests (no copies: this runs for every round of a
    // pipeline, and fails at once when another client's write holds a hot key's stripe), and
    // how many each request has; each part's leading requests that may run here.
    let (mut keys, mut counts, mut limits) = (Vec::new(), Vec::new(), Vec::with_capacity(parts.len()));
    for part in parts.iter() {
        let mut limit = 0;
        for args in part.requests.iter().take(MAX_RUN) {
            let Some(spec) = lookup(&args[0]).filter(|spec| may_run_spec(part.s, spec, args)) else { break };
            let before = keys.len();
            request_keys(part.s.db, spec, args, &mut keys);
            counts.push(keys.len() - before);
            limit += 1;
        }
        limits.push(limit);
    }
    let mut guard = state.storage.try_lock_settled(&keys).map_err(|why| match why {
        Unsettled::Held => NotRun::Elsewhere,
        Unsettled::Queued(ticket) => NotRun::Waits(ticket),
    })?;
    // The run ends before the first command with a key whose state before needs the disk.
    let mut befores = Befores::with_capacity(keys.len());
    let mut known = state.storage.learn_befores(&mut befores, &keys, &counts);
    if known == 0 {
        return Err(NotRun::Elsewhere);
    }
    let mut ran_parts = Vec::with_capacity(parts.len());
    let (mut buffer, mut stopped, mut failure) = (None, false, None);
    for (part, limit) in parts.iter_mut().zip(limits) {
        let s = &mut *part.s;
        let mut pending = PendingWrites::default();
        let may_run = if stopped || failure.is_some() { 0 } else { limit.min(known) };
        known = known.saturating_sub(limit);
        if may_run == 0 || s.handle.killed.load(Ordering::Acquire) {
            ran_parts.push(pending);
            continue;
        }
        state.storage.hold_for_exec(&s.exec, &guard);
        s.exec.resume_transaction(buffer.take());
        s.in_exec = true;
        s.exec.begin_memory_only();
        let mut ran = 0;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for args in part.requests.iter().take(may_run) {
                let (savepoint, signals) = (s.exec.savepoint(), s.signals.len());
                let reply = dispatch(s, args);
                if s.exec.voided() {
                    // Not run: an executor runs it again, gate included (counted once).
                    stopped = true;
                    s.exec.rollback(savepoint);
                    s.signals.truncate(signals);
                    state.commands_processed.fetch_sub(1, Ordering::Relaxed);
                    state.in_memory.writes_voided.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                ran += 1;
                if s.take_reply_permission() {
                    reply.encode(s.protocol, &mut pending.replies);
                    pending.sent += 1;
                }
                if part.out_len + pending.replies.len() >= output_bound {
                    break;
                }
            }
        }));
        s.in_exec = false;
        buffer = s.exec.suspend_transaction();
        s.exec.end_memory_only();
        state.storage.end_exec(&s.exec);
        pending.events = s.exec.take_events();
        s.exec.reset();
        if let Err(panic) = outcome {
            let what = panic_message(&*panic);
            tracing::error!(target: "shale::exec", client = s.id, commands = ran + 1, panic = %what, "a write group run on a connection's task panicked; its commands get errors");
            // The command that panicked is answered too, never run again.
            ran = (ran + 1).min(part.requests.len());
            pending.sent = ran;
            failure = Some(Reply::error("ERR internal error running a pipelined write (see the server log)"));
        }
        pending.ran = ran;
        pending.voided = stopped;
        part.requests.drain(..ran);
        ran_parts.push(pending);
    }
    if let Some(failure) = failure {
        // Nothing is queued: every command run so far gets the error.
        drop(guard);
        for (part, pending) in parts.iter_mut().zip(&mut ran_parts) {
            part.s.signals.clear();
            if pending.ran > 0 {
                pending.sent = pending.ran;
                pending.failure = Some(failure.clone());
            }
        }
        return Ok((ran_parts, None));
    }
    if ran_parts.iter().all(|p| p.ran == 0) {
        return Err(NotRun::Elsewhere);
    }
    state.in_memory.write_groups.fetch_add(1, Ordering::Relaxed);
    let batch = buffer.map(crate::storage::Suspended::into_batch).unwrap_or_default();
    if batch.is_empty() {
        return Ok((ran_parts, None));
    }
    match state.storage.queue_write(&mut guard, batch, &befores, urgent) {
        Ok(queued) => Ok((ran_parts, Some(queued))),
        Err(e) => {
            // Refused before anything was queued (nothing happened): a batch writing a key
            // the group did not lock, which no groupable command does, or an engine that
            // turned read-only meanwhile.
            tracing::warn!(target: "shale::exec", error = %e, "a write group run on a connection's task could not be queued");
            let failure = engine_error(e);
            for pending in ran_parts.iter_mut().filter(|p| p.ran > 0) {
                pending.failure = Some(failure.clone());
            }
            Ok((ran_parts, None))
        }
    }
}

/// Awaits a queued group's commit, then what follows it (tracking invalidations, or taking
/// back its count changes).
pub(super) async fn committed(state: Arc<ServerState>, queued: QueuedWrite, origin: u64) -> lsm::Result<()> {
    let (commit, changes, touched): (_, CountChanges, _) = queued.into_parts();
    let outcome = commit.await;
    state.storage.finish_queued(changes, touched, &outcome, origin);
    outcome
}
