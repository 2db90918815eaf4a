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
//!   may wait (and where writes of one hot key are combined);
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
use crate::storage::{Befores, CountChanges, QueuedWrite};

/// Most commands one group runs here (a pipeline's longer runs go on in the next round).
const MAX_RUN: usize = 64;

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
fn is_task_script(spec: &CommandSpec) -> bool {
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
}

impl std::fmt::Debug for PendingWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingWrites").field("sent", &self.sent).finish_non_exhaustive()
    }
}

impl PendingWrites {
    /// Encodes the replies once `committed` is the commit's outcome (Ok if there was none) and
    /// publishes the group's keyspace events. True if clients blocked on keys the group wrote
    /// must be served now (`Session::signals`: serving runs their commands, which may block,
    /// so the caller does it on an executor thread before going on).
    pub fn finish(self, s: &mut Session, committed: lsm::Result<()>, out: &mut BytesMut) -> bool {
        let failure = match (self.failure, committed) {
            (Some(reply), _) => Some(reply),
            (None, Err(e)) => Some(engine_error(e)),
            (None, Ok(())) => None,
        };
        if let Some(error) = failure {
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
    may_run_spec(s, spec, args)
        && !s.tracking
        && !s.state.pubsub.has_monitors()
        && !s.state.pause_in_force()
        && !s.state.blocking.announced.any()
        && !s.state.storage.engine().is_read_only()
}

/// Runs the run of groupable writes at the front of `requests` (see the module docs) and
/// queues their batch; the requests it ran leave the queue. `None` if none ran (busy stripes,
/// counts or a first read that need the disk): they go to an executor thread. Stops early once
/// the replies (with `out_len` bytes already waiting) reach `output_bound`.
pub(super) fn run_queued(
    s: &mut Session,
    requests: &mut VecDeque<Vec<Bytes>>,
    out_len: usize,
    output_bound: usize,
) -> Option<PendingWrites> {
    let state = Arc::clone(&s.state);
    // The run's keys, borrowed from its requests (no copies: this runs for every round of a
    // pipeline, and fails at once when another client's write holds a hot key's stripe), and
    // how many each request has.
    let (mut keys, mut counts) = (Vec::new(), Vec::new());
    for args in requests.iter().take(MAX_RUN) {
        let Some(spec) = lookup(&args[0]).filter(|spec| may_run_spec(s, spec, args)) else { break };
        let before = keys.len();
        request_keys(s.db, spec, args, &mut keys);
        counts.push(keys.len() - before);
    }
    let mut guard = state.storage.try_lock_settled(&keys)?;
    // The run ends before the first command with a key whose state before needs the disk.
    let mut befores = Befores::with_capacity(keys.len());
    let run = state.storage.learn_befores(&mut befores, &keys, &counts);
    if run == 0 {
        return None;
    }
    state.storage.hold_for_exec(&s.exec, &guard);
    s.exec.resume_transaction(None);
    s.in_exec = true;
    s.exec.begin_memory_only();
    let (mut replies, mut sent, mut ran, mut voided) = (BytesMut::new(), 0, 0, false);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for args in requests.iter().take(run) {
            let (savepoint, signals) = (s.exec.savepoint(), s.signals.len());
            let reply = dispatch(s, args);
            if s.exec.voided() {
                // Not run: an executor runs it again, gate included (counted once).
                voided = true;
                s.exec.rollback(savepoint);
                s.signals.truncate(signals);
                state.commands_processed.fetch_sub(1, Ordering::Relaxed);
                state.in_memory.writes_voided.fetch_add(1, Ordering::Relaxed);
                break;
            }
            ran += 1;
            if s.take_reply_permission() {
                reply.encode(s.protocol, &mut replies);
                sent += 1;
            }
            if out_len + replies.len() >= output_bound {
                break;
            }
        }
    }));
    s.in_exec = false;
    let batch = s.exec.finish_transaction();
    s.exec.end_memory_only();
    state.storage.end_exec(&s.exec);
    let events = s.exec.take_events();
    s.exec.reset();
    if let Err(panic) = outcome {
        drop(guard);
        let what = panic_message(&*panic);
        tracing::error!(target: "shale::exec", client = s.id, commands = ran + 1, panic = %what, "a write group run on a connection's task panicked; its commands get errors");
        s.signals.clear();
        // The command that panicked is answered too, never run again.
        let answered = (ran + 1).min(requests.len());
        requests.drain(..answered);
        let failure = Reply::error("ERR internal error running a pipelined write (see the server log)");
        return Some(PendingWrites {
            commit: None,
            replies,
            sent: answered,
            events,
            failure: Some(failure),
            voided: false,
        });
    }
    if ran == 0 {
        return None;
    }
    requests.drain(..ran);
    state.in_memory.write_groups.fetch_add(1, Ordering::Relaxed);
    let mut pending = PendingWrites { commit: None, replies, sent, events, failure: None, voided };
    if batch.is_empty() {
        return Some(pending);
    }
    match state.storage.queue_write(&mut guard, batch, &befores) {
        Ok(queued) => pending.commit = Some(Box::pin(committed(Arc::clone(&state), queued, s.id))),
        Err(e) => {
            // Refused before anything was queued (nothing happened): a batch writing a key
            // the group did not lock, which no groupable command does, or an engine that
            // turned read-only meanwhile.
            tracing::warn!(target: "shale::exec", client = s.id, error = %e, "a write group run on a connection's task could not be queued");
            pending.failure = Some(engine_error(e));
        }
    }
    Some(pending)
}

/// Awaits a queued group's commit, then what follows it (tracking invalidations, or taking
/// back its count changes).
async fn committed(state: Arc<ServerState>, queued: QueuedWrite, origin: u64) -> lsm::Result<()> {
    let (commit, changes, touched): (_, CountChanges, _) = queued.into_parts();
    let outcome = commit.await;
    state.storage.finish_queued(changes, touched, &outcome, origin);
    outcome
}
