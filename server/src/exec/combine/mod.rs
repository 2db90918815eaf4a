//! Write combining across connections: the writes of different clients run as one write
//! group.
//!
//! Fifty clients appending to one stream (or pushing to one list) each send one write and wait
//! for it. Run one by one, every write takes the key's stripe, waits for its own group commit
//! while holding it, and costs a hand-off to an executor thread and back: the key's writes are
//! serialised behind one commit each, and the machine spends its time switching threads.
//! Here a connection whose round is made of writes that may join a write group (the commands
//! of `write_group::GROUPABLE`: one write, or a pipeline of up to 64) queues them with its session in
//! the [`Combiner`]; one executor job drains the queue and runs the rounds it finds with the
//! same first key as one group (rounds of unrelated keys gain nothing from sharing a commit and
//! run on their own), the way a pipeline's write group runs
//! (`write_group::run_group`): the stripes of all their keys are locked up front in one order, each
//! command passes the gate as its own client and writes into one buffer that the next command
//! (of whichever client) reads through, the buffer is committed as one batch, and only then
//! does any client get its reply. Writes queued meanwhile make the next group.
//!
//! Each command keeps its own reply, statistics, slow-log entry and keyspace events; a
//! command's error stays its own; if the commit fails, every command of the group is answered
//! with the engine's error, since none of their writes happened. A group of one runs the usual
//! way ([`super::run_batch`]), so a lone client pays nothing for this.
//!
//! Short rounds whose key's last write is still on its way to the engine are combined the
//! same way without leaving the runtime ([`on_task`]); this queue takes the rest, and what
//! cannot run there.
//!
//! What is never combined: a client with `CLIENT TRACKING` on (its `NOLOOP` needs its writes
//! committed as its own), a client inside MULTI, subscribed or of a restricted ACL user (see
//! `write_group::groupable`), and anything while `CLIENT PAUSE` is in force (the usual path honours it).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use tokio::sync::oneshot;

use super::gate::panic_message;
use super::write_group::groupable;
use super::{run_batch, BatchEnd, Session};
use crate::commands::{engine_error, first_queued_key, lookup, queued_keys, run_buffered, Part};
use crate::resp::Reply;
use crate::state::ServerState;
use crate::storage::KeyHasher;

pub mod on_task;

/// Most writes one combined group runs (a client's round joins whole, so a group may pass it
/// by one round).
const MAX_COMBINED: usize = 128;
/// Most writes of one client's round that may join (a pipeline's write group is this long).
const MAX_ROUND: usize = 64;

/// What a round gives back to its connection: the session, requests not run, the replies, and
/// why it stopped (as `connection::execute` returns).
pub type Round = (Box<Session>, VecDeque<Vec<Bytes>>, BytesMut, BatchEnd);

/// One client's queued writes (its round).
struct Entry {
    /// The round's first key: rounds combine with rounds of the same first key.
    key: Option<(u32, Bytes)>,
    session: Box<Session>,
    requests: VecDeque<Vec<Bytes>>,
    output: BytesMut,
    done: oneshot::Sender<Round>,
}

/// A key's rounds waiting on connections' tasks (see [`on_task`]).
#[derive(Default)]
struct Waiting {
    rounds: VecDeque<Entry>,
    /// A task drains `rounds`. False: nothing waits, the key is only marked hot (its last group
    /// combined several clients' rounds), and the next round of it starts a drain task.
    draining: bool,
    /// When the key was left marked hot (None while a task drains it).
    idle_since: Option<std::time::Instant>,
}

/// Writes waiting to be combined, and whether an executor job is draining them.
#[derive(Default)]
struct Queue {
    entries: Vec<Entry>,
    draining: bool,
}

/// [`Combiner::waiting`]'s map: looked up for every round of a hot key.
type WaitingMap = HashMap<(u32, Bytes), Waiting, SeededHash>;

/// Hashes keys with xxh3 ([`KeyHasher`]) under a seed drawn at start: a third of the std
/// hasher's (SipHash's) cost on short keys, and as the seed is secret, clients still cannot
/// choose keys that collide.
#[derive(Debug, Clone, Copy)]
struct SeededHash(u64);

impl std::hash::BuildHasher for SeededHash {
    type Hasher = KeyHasher;

    fn build_hasher(&self) -> KeyHasher {
        KeyHasher::seeded(self.0)
    }
}

/// The queues of writes waiting to run as a group (see the module docs): one per executor
/// thread, a round going to the queue its first key hashes to, so writes of one key always meet
/// in one queue and writes of unrelated keys still run on every executor thread.
pub struct Combiner {
    shards: Vec<Mutex<Queue>>,
    /// Rounds waiting on connections' tasks for a hot key's queued write, by their first key
    /// (see [`on_task`]); a key is here while a task drains its rounds, and stays (marked hot)
    /// after a group that combined several clients' rounds.
    waiting: Mutex<WaitingMap>,
    /// How many keys `waiting` holds (read without its lock).
    hot_keys: AtomicUsize,
    /// Groups of two or more writes run (INFO `combined_write_groups`).
    pub groups: AtomicU64,
    /// Writes those groups ran (INFO `combined_writes`).
    pub writes: AtomicU64,
}

impl Combiner {
    /// `n` queues (at least one).
    pub fn new(n: usize) -> Combiner {
        Combiner {
            shards: (0..n.max(1)).map(|_| Mutex::default()).collect(),
            waiting: Mutex::new(HashMap::with_hasher(SeededHash(rand::random()))),
            hot_keys: AtomicUsize::new(0),
            groups: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        }
    }

    /// The queue for a round whose first key is `key` of `db`.
    fn shard_of(&self, db: u32, key: &[u8]) -> usize {
        let hash = xxhash_rust::xxh3::xxh3_64_with_seed(key, u64::from(db));
        (hash % self.shards.len() as u64) as usize
    }

    fn queue(&self, shard: usize) -> std::sync::MutexGuard<'_, Queue> {
        self.shards[shard].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, WaitingMap> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for Combiner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combiner").finish_non_exhaustive()
    }
}

/// True if `requests` (a connection's round) are writes that may be combined with other
/// clients' writes: each may join a write group.
pub fn eligible(s: &Session, requests: &VecDeque<Vec<Bytes>>) -> bool {
    !requests.is_empty()
        && requests.len() <= MAX_ROUND
        && !s.tracking
        && !s.state.pause_in_force()
        // (A write must be able to wait for an announced blocking command: see run_command.)
        && !s.state.blocking.announced.any()
        && all_groupable(s, requests)
}

/// True if every request of `requests` may join a write group (`write_group::groupable`).
fn all_groupable(s: &Session, requests: &VecDeque<Vec<Bytes>>) -> bool {
    requests.iter().all(|args| lookup(&args[0]).is_some_and(|spec| groupable(s, spec, args)))
}

/// Queues the writes `requests` of `session` and waits until a combined group has run them.
/// `None` if the job was lost (the pool is gone, or it panicked outside a command): the
/// connection closes.
pub async fn run(
    state: &Arc<ServerState>,
    session: Box<Session>,
    requests: VecDeque<Vec<Bytes>>,
    output: BytesMut,
) -> Option<Round> {
    let (entry, rx) = Entry::new(session, requests, output);
    to_executor(state, entry);
    rx.await.ok()
}

impl Entry {
    /// The entry of a round, and where its outcome arrives.
    fn new(
        session: Box<Session>,
        requests: VecDeque<Vec<Bytes>>,
        output: BytesMut,
    ) -> (Entry, oneshot::Receiver<Round>) {
        let (done, rx) = oneshot::channel();
        let key = first_queued_key(session.db, requests.front().map(std::slice::from_ref).unwrap_or_default());
        (Entry { key, session, requests, output, done }, rx)
    }
}

/// Queues `entry` for an executor job that drains its queue; a round the queue would not take
/// (an EVAL script, from [`on_task`]) runs alone on an executor.
fn to_executor(state: &Arc<ServerState>, entry: Entry) {
    if !all_groupable(&entry.session, &entry.requests) {
        drop(state.executor.run(move || alone(entry)));
        return;
    }
    let shard = entry.key.as_ref().map_or(0, |(db, k)| state.combiner.shard_of(*db, k));
    let start = {
        let mut q = state.combiner.queue(shard);
        q.entries.push(entry);
        !std::mem::replace(&mut q.draining, true)
    };
    if start {
        schedule(state, shard);
    }
}

/// Queues the draining job on the executor; its result is not awaited (each entry gets its
/// own).
fn schedule(state: &Arc<ServerState>, shard: usize) {
    let drainer = Arc::clone(state);
    drop(state.executor.run(move || drain(&drainer, shard)));
}

/// Groups one draining job runs before it queues itself again behind other jobs.
const GROUPS_PER_TURN: usize = 16;

/// The executor job: runs queued writes, a group at a time, until none is left (or its turn is
/// over: it then queues itself again, so a steady stream of writes does not hold a thread).
fn drain(state: &Arc<ServerState>, shard: usize) {
    for turn in 0.. {
        let group: Vec<Entry> = {
            let mut q = state.combiner.queue(shard);
            if q.entries.is_empty() {
                q.draining = false;
                return;
            }
            if turn == GROUPS_PER_TURN {
                drop(q);
                schedule(state, shard);
                return;
            }
            // The oldest round, and the rounds queued after it with the same first key: writes
            // of one hot key meet here; rounds of unrelated keys gain nothing from sharing a
            // commit (they would only wait for each other) and run on their own.
            let key = q.entries[0].key.clone();
            let mut writes = 0;
            let mut group = Vec::new();
            let mut rest = Vec::with_capacity(q.entries.len());
            for entry in q.entries.drain(..) {
                if group.is_empty() || (writes < MAX_COMBINED && key.is_some() && entry.key == key) {
                    writes += entry.requests.len();
                    group.push(entry);
                } else {
                    rest.push(entry);
                }
            }
            q.entries = rest;
            group
        };
        if group.len() == 1 || state.pause_in_force() {
            for entry in group {
                alone(entry);
            }
        } else {
            state.combiner.groups.fetch_add(1, Ordering::Relaxed);
            let writes = group.iter().map(|e| e.requests.len() as u64).sum();
            state.combiner.writes.fetch_add(writes, Ordering::Relaxed);
            run_group(state, group);
        }
    }
}

/// Runs one entry the usual way.
fn alone(entry: Entry) {
    let Entry { mut session, mut requests, mut output, done, .. } = entry;
    let end = run_batch(&mut session, &mut requests, &mut output, usize::MAX);
    let _ = done.send((session, requests, output, end));
}

/// Runs several clients' writes as one group (see the module docs) and answers each.
fn run_group(state: &ServerState, mut group: Vec<Entry>) {
    // Each command's reply (None: not sent), per entry, kept until the group is committed.
    let mut replies: Vec<Vec<Option<Reply>>> = vec![Vec::new(); group.len()];
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> lsm::Result<()> {
        for entry in group.iter_mut() {
            entry.requests.make_contiguous();
        }
        let keys: Vec<(u32, Bytes)> =
            group.iter().flat_map(|e| queued_keys(e.session.db, e.requests.as_slices().0)).collect();
        let locker = crate::storage::ExecContext::new();
        let guard = state.storage.lock_pairs(&locker, keys.iter().map(|(db, k)| (*db, &k[..])));
        // A client killed while it waited runs nothing.
        let mut parts: Vec<Part<'_>> = group
            .iter_mut()
            .map(|e| {
                let killed = e.session.handle.killed.load(Ordering::Acquire);
                (&mut *e.session, if killed { &[][..] } else { e.requests.as_slices().0 })
            })
            .collect();
        run_buffered(&mut parts, guard, |i, s, reply| {
            replies[i].push(s.take_reply_permission().then_some(reply));
            true
        })
    }));
    let failure = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(engine_error(e)),
        Err(panic) => {
            let what = panic_message(&*panic);
            tracing::error!(target: "shale::exec", writes = group.len(), panic = %what, "a combined write group panicked; its commands get errors");
            Some(Reply::error("ERR internal error running a pipelined write (see the server log)"))
        }
    };
    // After a panic, the commands that did not run are answered with the error too.
    for (entry, mut mine) in group.into_iter().zip(replies) {
        if failure.is_some() && !entry.session.handle.killed.load(Ordering::Acquire) {
            mine.resize(entry.requests.len(), Some(Reply::Null));
        }
        let Entry { mut session, mut output, done, .. } = entry;
        // (Its keyspace events and blocked clients were served after the commit.)
        if failure.is_some() {
            session.in_exec = false;
            session.signals.clear();
        }
        session.exec.reset();
        let end = if session.handle.killed.load(Ordering::Acquire) {
            BatchEnd::Close
        } else {
            for reply in mine.iter().flatten() {
                failure.as_ref().unwrap_or(reply).encode(session.protocol, &mut output);
            }
            BatchEnd::Drained
        };
        let _ = done.send((session, VecDeque::new(), output, end));
    }
}
