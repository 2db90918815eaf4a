//! What a connection's own task runs before it hands its batch to an executor thread: reads
//! that memory answers (memory-only engine reads) and runs of plain SETs queued with the
//! engine's async commit. Every request passes the same gate as on an executor thread
//! ([`mod@super::gate`]), once.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};

use super::gate::{admit, blind_set, blind_sets_allowed, panicked, run_command, SetBatch};
use super::observe::failed_sets;
use super::queued::{self, PendingWrites};
use super::session::Session;
use crate::commands::{engine_error, flag, lookup};
use crate::resp::Reply;
use crate::services::notifications;
use crate::storage::BlindWrite;

/// Commands that may run on the connection's own thread when memory can answer them: reads
/// that never wait and never write — of one record per key (metadata, a field, a member), or
/// of a range through [`crate::storage::RawRange`], which voids the command at the first
/// block that memory does not hold (LRANGE, HGETALL, ZRANGE, XRANGE, BITCOUNT, …) — plus PING
/// and ECHO, which touch no data, and the pub/sub commands, which
/// touch only the hub: a SUBSCRIBE or UNSUBSCRIBE takes effect as soon as its connection reads
/// it, so a PUBLISH another client sends just after counts it as on Redis's single thread
/// (run on an executor, an UNSUBSCRIBE could lose that race by a thread hand-off). Random
/// picks (SRANDMEMBER, …) take a raw engine cursor, which memory-only mode refuses. PFCOUNT,
/// which writes back a cardinality it had to count, answers here only from a valid cached
/// one (anything else is void, see `commands::hyperloglog`). Each
/// command's membership is a bit of its table entry ([`crate::commands::flag::MEMORY_READ`]).
pub(crate) const MEMORY_READS: &[&str] = &[
    "bitcount",
    "bitpos",
    "echo",
    "exists",
    "expiretime",
    "geodist",
    "geohash",
    "geopos",
    "georadius_ro",
    "georadiusbymember_ro",
    "geosearch",
    "get",
    "getbit",
    "getrange",
    "hexists",
    "hget",
    "hgetall",
    "hkeys",
    "hlen",
    "hmget",
    "hstrlen",
    "hvals",
    "lindex",
    "llen",
    "lpos",
    "lrange",
    "mget",
    "pexpiretime",
    "pfcount",
    "ping",
    "psubscribe",
    "pttl",
    "publish",
    "punsubscribe",
    "scard",
    "sismember",
    "smembers",
    "smismember",
    "spublish",
    "ssubscribe",
    "strlen",
    "subscribe",
    "substr",
    "sunsubscribe",
    "ttl",
    "type",
    "unsubscribe",
    "xlen",
    "xrange",
    "xrevrange",
    "zcard",
    "zcount",
    "zlexcount",
    "zmscore",
    "zrange",
    "zrangebylex",
    "zrangebyscore",
    "zrank",
    "zrevrange",
    "zrevrangebylex",
    "zrevrangebyscore",
    "zrevrank",
    "zscore",
];

/// How often [`run_in_memory`] ran requests on connections' own tasks (INFO stats).
#[derive(Debug, Default)]
pub struct InMemoryCounters {
    /// Reads answered from memory.
    pub reads: crate::services::counter::Counter,
    /// Reads voided because they needed the disk (then run on an executor).
    pub reads_voided: crate::services::counter::Counter,
    /// Batches of plain SETs queued with the engine's async commit.
    pub set_batches: crate::services::counter::Counter,
    /// Batches of plain SETs handed to an executor (busy stripes, counts needing the disk).
    pub set_batches_handed_off: crate::services::counter::Counter,
    /// Write groups run on connections' tasks ([`queued`]).
    pub write_groups: crate::services::counter::Counter,
    /// Writes of such groups voided because they needed the disk (then run on an executor).
    pub writes_voided: crate::services::counter::Counter,
}

/// What [`run_in_memory`] left for its caller.
#[derive(Debug)]
pub enum InMemory {
    /// It ran what it could; the rest (if any) goes to an executor thread. True if it stopped
    /// because the replies passed the output bound.
    Stopped(bool),
    /// A run of plain SETs was queued with the engine: await [`PendingSets::commit`], then
    /// [`PendingSets::finish`], then call again.
    Sets(PendingSets),
    /// A run of read-modify-write commands ran as a write group whose batch was queued with
    /// the engine: await [`PendingWrites::commit`], then [`PendingWrites::finish`] (and serve
    /// the clients blocked on its keys if it says so), then call again — unless
    /// [`PendingWrites::voided`]: the next request needs the disk, and goes to an executor.
    Writes(PendingWrites),
    /// The request at the front is a write that would run as [`InMemory::Writes`] but for
    /// an async write queued under one of its keys' stripes and not visible yet (another
    /// client's write of a hot key): its round may wait for that write here, combined with
    /// other clients' writes of the key (`combine::on_task`), or go to an executor.
    Waits(lsm::WriteTicket),
    /// The request at the front is such a write of a hot key (`combine::on_task::joins_hot_key`):
    /// its round joins the key's next group there rather than running alone.
    Hot,
}

/// Keys (of the requests at the front of a batch) whose metadata [`prefetch_keys`] prefetches.
const PREFETCHED: usize = 64;

/// Starts loading into the CPU's cache what reading the metadata records of the keys the
/// requests at the front of `requests` name will touch first, so that a pipeline's lookups
/// wait on memory together rather than one after another (reads here, writes on this thread
/// or an executor's: the lines are in the shared cache by then). Only a hint: the keys are
/// taken in the session's current database (a SELECT among the requests makes the later ones
/// useless, nothing worse), and nothing is done for a client that has not authenticated.
pub fn prefetch_keys(s: &Session, requests: &VecDeque<Vec<Bytes>>) {
    let one_short = requests.len() < 2 && requests.front().is_none_or(|args| args.len() < 5);
    if one_short || !s.authenticated {
        return;
    }
    let keys = requests
        .iter()
        .take(PREFETCHED)
        .filter_map(|args| Some((lookup(&args[0])?, args)))
        .flat_map(|(spec, args)| spec.key_positions(args.len()).map(|i| &args[i][..]))
        .take(PREFETCHED);
    s.state.storage.prefetch_metas(s.db, keys);
}

/// Runs requests from the front of `requests` on the calling thread — a connection's async
/// task — without ever blocking it:
/// - one of `MEMORY_READS` runs with every engine read made memory-only (memtables, open
///   tables, the block cache). The first that needs the disk stays at the front, its reply
///   discarded, for [`run_batch`](super::gate::run_batch) on an executor thread to run from scratch (reads have no
///   effects to undo);
/// - a run of plain `SET key value`s (or a lone `MSET`) is queued with the engine as one batch
///   ([`Storage::try_write_blind_async`](crate::storage::Storage::try_write_blind_async)),
///   handed to an executor thread only if their key stripes are busy or the keyspace counts
///   cannot be kept from memory; the caller awaits the commit (other connections go on).
///
/// Every request passes the same gate as on an executor thread, once.
pub fn run_in_memory(
    s: &mut Session,
    requests: &mut VecDeque<Vec<Bytes>>,
    out: &mut BytesMut,
    output_bound: usize,
) -> InMemory {
    while let Some(args) = requests.front() {
        let Some(spec) = lookup(&args[0]) else { return InMemory::Stopped(false) };
        // A lone MSET is written from here; a pipeline of them goes to an executor, where
        // their existence checks (ten point reads each) run beside other connections' work
        // (measured: MSET P1 +19 %, P16 -10 % had pipelines stayed here).
        let plain_set = blind_set(s, spec, args) && (spec.name == "set" || requests.len() == 1);
        // (PFCOUNT is both: a read here, answered only from a valid cached cardinality.)
        let write = !plain_set && !spec.has(flag::MEMORY_READ) && queued::eligible(s, spec, args);
        if !(plain_set || write || spec.has(flag::MEMORY_READ)) {
            return InMemory::Stopped(false);
        }
        // Where the executor path has more to do (transactions, authentication, pauses), it
        // does it: those requests go there.
        if !s.authenticated
            || s.multi.is_some()
            || s.in_exec
            || s.handle.killed.load(Ordering::Acquire)
            || s.state.pause_in_force()
        {
            return InMemory::Stopped(false);
        }
        if write {
            if super::combine::on_task::joins_hot_key(s, requests) {
                return InMemory::Hot;
            }
            return match queued::run_queued(s, requests, out.len(), output_bound) {
                Ok(writes) => InMemory::Writes(writes),
                Err(queued::NotRun::Waits(ticket)) => InMemory::Waits(ticket),
                Err(queued::NotRun::Elsewhere) => InMemory::Stopped(false),
            };
        }
        // Keyspace events a SET or a missed read would record go with the executor path (a
        // voided read must not have published its `keymiss`).
        if !blind_sets_allowed(s) || notifications::enabled(s.state.notify_flags(), notifications::KEY_MISS) {
            return InMemory::Stopped(false);
        }
        if plain_set {
            return InMemory::Sets(queue_sets(s, requests));
        }
        s.exec.begin_memory_only();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match admit(s, args, Some(spec)) {
            Ok(spec) => run_command(s, spec, args),
            Err(reply) => reply,
        }));
        if s.exec.end_memory_only() {
            // Void: the executor runs it again, gate included (counted once).
            s.state.commands_processed.fetch_sub(1, Ordering::Relaxed);
            s.state.in_memory.reads_voided.fetch_add(1, Ordering::Relaxed);
            s.exec.reset();
            return InMemory::Stopped(false);
        }
        s.state.in_memory.reads.fetch_add(1, Ordering::Relaxed);
        let reply = outcome.unwrap_or_else(|panic| panicked(s, &args[0], &*panic));
        s.exec.reset();
        requests.pop_front();
        if s.take_reply_permission() || reply.is_push() {
            reply.encode(s.protocol, out);
        }
        if out.len() >= output_bound {
            return InMemory::Stopped(true);
        }
    }
    InMemory::Stopped(false)
}

/// The commit of a run of SETs queued by [`run_in_memory`].
pub type SetsCommit = std::pin::Pin<Box<dyn std::future::Future<Output = lsm::Result<()>> + Send>>;

/// A run of pipelined plain SETs on its way to the engine: their replies go out, in order,
/// once the batch is committed (an error answers every SET of it, as `SetBatch` does).
pub struct PendingSets {
    /// Resolves once the batch is committed (None: nothing to commit).
    pub commit: Option<SetsCommit>,
    /// Each request's reply: `None` for a SET or MSET in the batch (OK, or the commit's
    /// error), or the gate's refusal; whether it is sent (`CLIENT REPLY`); its command-stats id.
    replies: Vec<(Option<Reply>, bool, usize)>,
}

impl std::fmt::Debug for PendingSets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingSets").field("replies", &self.replies.len()).finish_non_exhaustive()
    }
}

impl PendingSets {
    /// Encodes the replies once `committed` is the commit's outcome (Ok if there was none).
    pub fn finish(self, s: &Session, committed: lsm::Result<()>, out: &mut BytesMut) {
        let outcome = match committed {
            Ok(()) => Reply::ok(),
            Err(e) => failed_sets(s, engine_error(e), self.replies.iter().filter(|(r, ..)| r.is_none()).map(|r| r.2)),
        };
        for (reply, send, _) in self.replies {
            if send {
                reply.as_ref().unwrap_or(&outcome).encode(s.protocol, out);
            }
        }
    }
}

/// Times a queued SET batch waits for earlier writes under its stripes (or for a busy stripe)
/// before it is handed to an executor instead.
const MAX_STRIPE_WAITS: usize = 8;

/// Takes the run of plain SETs at the front of `requests` (one database, up to a
/// `SetBatch`'s size) through the gate, and returns the admitted ones as one batch whose
/// commit the caller awaits.
fn queue_sets(s: &mut Session, requests: &mut VecDeque<Vec<Bytes>>) -> PendingSets {
    let mut sets = SetBatch::for_db(s.db);
    let mut replies = Vec::new();
    while let Some(args) = requests.front() {
        let lone = requests.len() == 1;
        let Some(spec) = lookup(&args[0]).filter(|c| blind_set(s, c, args) && (c.name == "set" || lone)) else {
            break;
        };
        // A pause or a kill that came meanwhile is honoured between SETs, as on an executor.
        if s.db != sets.db
            || sets.is_full()
            || s.handle.killed.load(Ordering::Acquire)
            || s.state.pause_remaining(true).is_some()
        {
            break;
        }
        match admit(s, args, Some(spec)) {
            Ok(spec) => {
                let (send, id) = sets.add(s, spec, args);
                replies.push((None, send, id));
            }
            Err(reply) => replies.push((Some(reply), s.take_reply_permission(), 0)),
        }
        s.exec.reset();
        requests.pop_front();
    }
    sets.touch_keys(s);
    let (db, keys, batch) = (sets.db, sets.keys, sets.batch);
    if keys.is_empty() {
        return PendingSets { commit: None, replies };
    }
    let state = std::sync::Arc::clone(&s.state);
    let commit = async move {
        let mut batch = batch;
        for _ in 0..MAX_STRIPE_WAITS {
            match state.storage.try_write_blind_async(db, &keys, &mut batch)? {
                BlindWrite::Queued(commit, changes) => {
                    state.in_memory.set_batches.fetch_add(1, Ordering::Relaxed);
                    let committed = commit.await;
                    if committed.is_err() {
                        state.storage.revert_counts(&changes);
                    }
                    return committed;
                }
                // Another connection's SET under one of our stripes is being committed.
                BlindWrite::WaitFor(ticket) => state.storage.engine().committed(ticket).await,
                // Held for a moment by another command: let it finish.
                BlindWrite::Busy => tokio::task::yield_now().await,
                BlindWrite::HandOff => break,
            }
        }
        // Busy stripes or counts that need the disk: an executor thread writes it.
        state.in_memory.set_batches_handed_off.fetch_add(1, Ordering::Relaxed);
        let writer = std::sync::Arc::clone(&state);
        let job = state
            .executor
            .run(move || writer.storage.write_blind(&crate::storage::ExecContext::new(), db, &keys, batch));
        job.await.unwrap_or_else(|_| Err(lsm::Error::InvalidArgument("the write's executor job failed".into())))
    };
    PendingSets { commit: Some(Box::pin(commit)), replies }
}

#[cfg(test)]
mod script_tests;
#[cfg(test)]
mod tests;
