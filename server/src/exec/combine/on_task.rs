//! Write combining on the connections' own tasks, for a hot key whose last write is still on
//! its way to the engine.
//!
//! A write that may run on its connection's task (`exec::queued`) takes its keys' stripes only
//! once every async write queued under them is visible. Fifty clients writing one key (SADD
//! to one set, XADD to one stream, one request each) nearly always find the key's last write
//! queued and not yet committed. Rather than send each of them to an executor thread (two
//! thread hand-offs per write, which at one request per round cost more CPU than the write),
//! a round that finds its keys so ([`InMemory::Waits`](crate::exec::InMemory::Waits)) waits
//! here: rounds are queued by their first key, and one task per waiting key awaits the write
//! they wait for ([`lsm::Db::committed`], which never blocks), then runs every round queued
//! meanwhile as one write group on the runtime, as a pipeline's run here is run
//! (`queued::run_parts`: stripes taken without waiting, memory-only reads, one batch queued with
//! the engine's async commit), awaits that commit and answers each client. Rounds that queue
//! while it commits make the next group, so a hot key's writes run one group per commit.
//! A key whose last group combined several clients' rounds stays marked hot for a while
//! ([`joins_hot_key`]): the next round of it finds its write visible, but joins a new group
//! rather than running alone, so each pass over the clients makes one group and one commit,
//! not a lone round's commit and then a group waiting for it. After a combined group is
//! answered, the drain task yields once before it takes the next group, so the requests its
//! clients send meanwhile (read when the runtime next polls the sockets) join that group.
//!
//! Besides writes, EVAL scripts wait here (fifty clients running one INCR+EXPIRE script on one
//! key send them one at a time too); a group runs them on a spare VM as a pipeline's run here
//! does. What cannot run here goes to the executors' [`Combiner`](super::Combiner) queue, as it
//! would have without this (a script: alone on an executor): a group whose stripes another
//! thread holds, or whose first command needs the disk. A round whose command turns out to
//! need the disk goes to that queue from that command on; the commands a group leaves
//! otherwise (of the rounds after that one, or of a client whose replies reached the output
//! bound) go back to their connections.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::{to_executor, Entry, Round, Waiting, MAX_COMBINED};
use crate::commands::{engine_error, lookup};
use crate::exec::queued::{self, NotRun, Part, PendingWrites};
use crate::exec::{serve_blocked, BatchEnd, Session};
use crate::resp::Reply;
use crate::state::ServerState;

/// Longest round that waits here. A pipeline's longer rounds of a hot key carry enough work
/// that running them on the executors, beside the runtime thread's network work, gains more
/// than the hand-offs cost (SADD and HSET -P 16 to one key, 50 clients: 4-10 % slower when
/// they waited here).
const MAX_ROUND_HERE: usize = 8;

/// True if `requests` (a connection's round whose front waits for a queued write) may wait
/// here: a short round of commands each of which may run on a connection's task
/// (`queued::eligible`: writes that may join a write group, and EVAL scripts, which fifty
/// clients running one INCR+EXPIRE script on one key also send one at a time), or a round of
/// up to `queued::MAX_RUN` EVAL scripts (on an executor they would run one by one, a commit
/// each).
pub fn eligible(s: &Session, requests: &VecDeque<Vec<Bytes>>) -> bool {
    !requests.is_empty()
        && (requests.len() <= MAX_ROUND_HERE || (requests.len() <= queued::MAX_RUN && all_scripts(requests)))
        && requests.iter().all(|args| lookup(&args[0]).is_some_and(|spec| queued::eligible(s, spec, args)))
}

/// True if every request of `requests` is an EVAL script.
fn all_scripts(requests: &VecDeque<Vec<Bytes>>) -> bool {
    requests.iter().all(|args| lookup(&args[0]).is_some_and(queued::is_task_script))
}

/// True if `requests` are EVAL scripts whose first declared key is one and the same: on the
/// executors they would run one after another anyway (each waits for the last one's commit),
/// so the round stays on its task, where they share one write group (`net::round`; 50
/// clients, `evalsha <sha> 1 key` -P 16: +63 %). Scripts of different keys still go to the
/// executors, which run them in parallel (over 100K keys, kept here, they lost a quarter).
pub(crate) fn one_key_scripts(requests: &VecDeque<Vec<Bytes>>) -> bool {
    let declares = |args: &Vec<Bytes>| crate::commands::parse_i64(&args[2]).is_some_and(|n| n >= 1);
    let first_key = |args: &Vec<Bytes>| (args.len() > 3 && declares(args)).then(|| args[3].clone());
    let Some(key) = requests.front().and_then(first_key) else { return false };
    all_scripts(requests) && requests.iter().all(|args| first_key(args).is_some_and(|k| k == key))
}

/// Most keys kept marked hot with nothing waiting on them (see [`joins_hot_key`]).
const MAX_HOT_KEYS: usize = 64;

/// A key marked hot stays so this long without a round of it arriving.
const HOT_FOR: std::time::Duration = std::time::Duration::from_millis(10);

/// True if the round `requests` (its front a write that may run on the task, its keys free)
/// joins its first key's next group here instead of running alone: the key is hot — a group
/// is being drained, or the last one combined several clients' rounds — and the round may
/// wait here. Run alone, the first round of each burst on a hot key queues a commit of its
/// own, and the rounds behind it wait for that commit before their group runs: two commits
/// for one pass over the clients. Joined, a burst makes one group (its drain task, spawned
/// behind the tasks already ready, runs after them) with one commit (50 clients running
/// one INCR+EXPIRE script on one key, P1: a commit every 6.7 calls before, every 17 after).
/// A group of one round unmarks the key.
pub fn joins_hot_key(s: &Session, requests: &VecDeque<Vec<Bytes>>) -> bool {
    let combiner = &s.state.combiner;
    if combiner.hot_keys.load(Ordering::Relaxed) == 0 {
        return false;
    }
    let front = requests.front().map(std::slice::from_ref).unwrap_or_default();
    let Some(key) = crate::commands::first_queued_key(s.db, front) else { return false };
    let hot = {
        let mut waiting = combiner.waiting();
        // The clock is read only for a key marked and idle (a hot key is mostly being drained).
        let cold = |w: &Waiting| w.idle_since.is_some_and(|t| t.elapsed() >= HOT_FOR);
        let hot = waiting.get(&key).is_some_and(|w| !cold(w));
        if !hot {
            // Keys left marked longer ago are forgotten.
            waiting.retain(|_, w| !cold(w));
            combiner.hot_keys.store(waiting.len(), Ordering::Relaxed);
        }
        hot
    };
    hot && eligible(s, requests)
}

/// Queues the writes `requests` of `session`, whose first key waits for the queued write
/// `ticket` (None: for nothing, the key is hot, see [`joins_hot_key`]), and waits until a
/// group has run them (see the module docs); a client's run stops once its replies pass
/// `output_bound`. `None` if the round was lost (a panic outside any command): the connection
/// closes.
pub async fn run(
    state: &Arc<ServerState>,
    session: Box<Session>,
    requests: VecDeque<Vec<Bytes>>,
    output: BytesMut,
    ticket: Option<lsm::WriteTicket>,
    output_bound: usize,
) -> Option<Round> {
    let (entry, rx) = Entry::new(session, requests, output);
    let Some(key) = entry.key.clone() else {
        to_executor(state, entry);
        return rx.await.ok();
    };
    let lead = {
        let mut waiting = state.combiner.waiting();
        let slot = waiting.entry(key.clone()).or_default();
        slot.rounds.push_back(entry);
        let lead = !std::mem::replace(&mut slot.draining, true);
        slot.idle_since = None;
        state.combiner.hot_keys.store(waiting.len(), Ordering::Relaxed);
        lead
    };
    if lead {
        tokio::spawn(drain(Arc::clone(state), key, ticket, output_bound));
    }
    rx.await.ok()
}

/// The task that runs the rounds waiting on `key`, a group per commit, until none is left;
/// the key stays marked hot if the last group combined several clients' rounds.
async fn drain(state: Arc<ServerState>, key: (u32, Bytes), mut ticket: Option<lsm::WriteTicket>, output_bound: usize) {
    let _unwinding = Draining { state: Arc::clone(&state), key: key.clone() };
    let mut combined = false;
    loop {
        if let Some(ticket) = ticket {
            state.storage.engine().committed(ticket).await;
        }
        if combined {
            // The clients answered by the last group send their next requests meanwhile: one
            // yield lets the runtime read what arrived (tokio runs a yielded task after its
            // next poll of the sockets), so those rounds join this group, not the next one.
            // Fewer, larger groups: a commit (and a wake-up of the commit thread) for more
            // writes. 50 clients, one key, P1: EVALSHA of INCR+EXPIRE +5 %, RPUSH +10 %,
            // INCR +10 %; a second yield gained nothing more, a third lost 2 %.
            tokio::task::yield_now().await;
        }
        let mut group = {
            let mut waiting = state.combiner.waiting();
            let Some(queue) = waiting.get_mut(&key).map(|w| &mut w.rounds).filter(|q| !q.is_empty()) else {
                let keep = combined && waiting.len() <= MAX_HOT_KEYS;
                match waiting.get_mut(&key) {
                    Some(w) if keep => {
                        w.draining = false;
                        w.idle_since = Some(std::time::Instant::now());
                    }
                    _ => {
                        waiting.remove(&key);
                    }
                }
                state.combiner.hot_keys.store(waiting.len(), Ordering::Relaxed);
                return;
            };
            let mut writes = 0;
            let mut group = Vec::new();
            while let Some(entry) = queue.pop_front() {
                writes += entry.requests.len();
                group.push(entry);
                if writes >= MAX_COMBINED {
                    break;
                }
            }
            group
        };
        // What changed while they waited (a CLIENT PAUSE, an announced blocking command, a
        // MONITOR) is honoured on the usual path.
        let ran =
            if queued::server_allows(&state) { run_group(&mut group, output_bound) } else { Err(NotRun::Elsewhere) };
        match ran {
            Err(NotRun::Waits(next)) => {
                // Another write of the key was queued in between: wait for that one.
                ticket = Some(next);
                let mut waiting = state.combiner.waiting();
                let queue = &mut waiting.entry(key.clone()).or_default().rounds;
                for entry in group.into_iter().rev() {
                    queue.push_front(entry);
                }
            }
            Err(NotRun::Elsewhere) => {
                combined = false;
                for entry in group {
                    to_executor(&state, entry);
                }
            }
            Ok((pending, queued)) => {
                combined = group.len() > 1;
                if combined {
                    state.combiner.groups.fetch_add(1, Ordering::Relaxed);
                    let writes: usize = pending.iter().map(|p| p.ran).sum();
                    state.combiner.writes.fetch_add(writes as u64, Ordering::Relaxed);
                }
                let failed = match queued {
                    Some(queued) => {
                        let origin = if group.len() == 1 { group[0].session.id } else { 0 };
                        queued::committed(Arc::clone(&state), queued, origin).await.err().map(engine_error)
                    }
                    None => None,
                };
                answer(&state, group, pending, failed.as_ref()).await;
            }
        }
    }
}

/// Hands the rounds still waiting on its key to the executors if its drain task panics: with the
/// key still listed, later rounds would queue behind a drain task that is gone.
struct Draining {
    state: Arc<ServerState>,
    key: (u32, Bytes),
}

impl Drop for Draining {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let left = {
            let mut waiting = self.state.combiner.waiting();
            let left = waiting.remove(&self.key).unwrap_or_default().rounds;
            self.state.combiner.hot_keys.store(waiting.len(), Ordering::Relaxed);
            left
        };
        for entry in left {
            to_executor(&self.state, entry);
        }
    }
}

/// Runs the rounds of `group` as one write group here (`queued::run_parts`); what each round
/// did not run stays in its entry.
fn run_group(
    group: &mut [Entry],
    output_bound: usize,
) -> Result<(Vec<PendingWrites>, Option<crate::storage::QueuedWrite>), NotRun> {
    let mut parts: Vec<Part<'_>> = group
        .iter_mut()
        .map(|e| Part { out_len: e.output.len(), s: &mut e.session, requests: &mut e.requests })
        .collect();
    queued::run_parts(&mut parts, output_bound, true)
}

/// Answers each round of a group once its commit is done (`failed`: its error). A round whose
/// command needed the disk goes on to the executors' queue from that command, with the replies
/// of the commands before it: back on its connection, it would only wait here again.
async fn answer(state: &Arc<ServerState>, group: Vec<Entry>, pending: Vec<PendingWrites>, failed: Option<&Reply>) {
    for (mut entry, ran) in group.into_iter().zip(pending) {
        let voided = ran.voided;
        if ran.finish(&mut entry.session, failed, &mut entry.output) {
            serve_blocked(state, &mut entry.session).await;
        }
        let killed = entry.session.handle.killed.load(Ordering::Acquire);
        if voided && !killed && failed.is_none() && !entry.requests.is_empty() {
            to_executor(state, entry);
            continue;
        }
        let Entry { session, requests, output, done, .. } = entry;
        let end = if killed { BatchEnd::Close } else { BatchEnd::Drained };
        let _ = done.send((session, requests, output, end));
    }
}

#[cfg(test)]
mod tests;
