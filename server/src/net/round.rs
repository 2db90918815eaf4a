//! Where a connection's round of requests starts: on its own task, which runs the leading
//! requests memory can answer ([`run_here`]), or — for a long, costly round while other
//! connections' tasks wait for a runtime thread — whole on an executor
//! ([`RoundCost::hand_off_whole`]); and when its replies go out: at once, or — costly requests
//! that waited for nothing — after the other ready connections' rounds ([`REPLIES_WAIT_AT`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::connection::OUTPUT_BOUND;
use crate::commands::{engine_error, flag, lookup};
use crate::exec::{run_in_memory, serve_blocked, InMemory, Session};
use crate::services::command_stats::Stamp;
use crate::state::ServerState;

/// A round of more requests than this may go to an executor whole (see [`RoundCost`]).
pub const LONG_ROUND: usize = 8;

/// A long round whose requests are estimated to keep the runtime thread at least this long
/// goes to an executor (if other tasks wait): about what the hand-off costs (two thread
/// wake-ups and the session's trip), so cheaper rounds (PING, GETs of keys in the memtable)
/// stay here, where handing them off would cost more than it frees. Measured on 2 cores
/// against 16 µs: GET -P 16 over 1M keys +10 %, PING and GET over 100K keys unchanged.
const HAND_OFF_AT: Duration = Duration::from_micros(8);

/// A round whose requests ran here at this cost or more each, waiting for nothing, writes its
/// replies only once the other connections' tasks that are ready have run their rounds (the
/// task yields first), so the replies of one pass go out back to back, as Redis writes its
/// replies after a pass over the ready clients. Written one per round, each reply (a `send`
/// on loopback) finds a client that went to sleep after the last one and wakes it: an
/// inter-processor wake-up, charged to the sender, that cost more than the script itself
/// (EVALSHA of a GET, 50 clients, P1: 22 % of the runtime thread's CPU in that wake-up, Redis
/// 7 %). Measured on 2 cores: that EVALSHA +37 %, LRANGE of 100 elements +8 %; GET (cheaper
/// than this) unchanged with any bound down to 1.5 µs; rounds that awaited a commit are
/// woken together by it already, and a hot key's writes wait on each other's replies (its
/// one-key scripts lost a third when they waited too).
const REPLIES_WAIT_AT: Duration = Duration::from_micros(3);

/// One in this many rounds that would go to an executor runs here instead, to measure again.
const REMEASURE_EVERY: u32 = 8;

/// What running its rounds on its own task costs a connection's runtime thread, per request
/// (an estimate measured on the rounds run here), and whether a round goes to an executor
/// whole instead (see [`RoundCost::hand_off_whole`]).
#[derive(Debug, Default)]
pub(super) struct RoundCost {
    /// Nanoseconds a request run here took on the runtime thread (a moving average; 0 until
    /// measured).
    per_request_ns: u64,
    /// Rounds handed off since the last one measured.
    handed_off: u32,
    /// The current round waited for something another thread did (a commit, an executor).
    pub(super) waited: bool,
}

impl RoundCost {
    /// True if the whole round goes to an executor: it is longer than [`LONG_ROUND`], its
    /// requests would keep the runtime thread for [`HAND_OFF_AT`] or more by this connection's
    /// estimate, other connections' tasks are ready to run on the runtime meanwhile, it has
    /// no pub/sub command (a SUBSCRIBE or UNSUBSCRIBE takes effect when its connection reads
    /// it, see `exec::in_memory`), and it is not EVAL scripts of one key (which share a write
    /// group only on the task, see `combine::on_task::one_key_scripts`). Run here, a
    /// pipeline's commands keep a runtime thread from every other connection for as long as
    /// they take; handed off, they run on the executors, in parallel with the runtime's
    /// network I/O. With the single runtime thread
    /// a 2-core machine gets by default (`worker-threads`), GET -P 16 over 1M keys ran about
    /// 1.5x as fast as with every round run here (the runtime thread was the bottleneck). A
    /// round of one request (P1) is never handed off.
    pub(super) fn hand_off_whole(
        &mut self,
        runtime: &tokio::runtime::RuntimeMetrics,
        requests: &VecDeque<Vec<Bytes>>,
    ) -> bool {
        let estimate = self.per_request_ns.saturating_mul(requests.len() as u64);
        if requests.len() <= LONG_ROUND || estimate < HAND_OFF_AT.as_nanos() as u64 || !others_wait(runtime) {
            return false;
        }
        if requests.iter().any(|args| lookup(&args[0]).is_some_and(|c| c.has(flag::PUBSUB))) {
            return false;
        }
        // EVAL scripts of one key share a write group only here.
        if crate::exec::combine::on_task::one_key_scripts(requests) {
            return false;
        }
        self.handed_off += 1;
        if self.handed_off >= REMEASURE_EVERY {
            self.handed_off = 0;
            return false;
        }
        true
    }

    /// True if this round's replies should wait for the other ready connections' rounds
    /// before they are written (see [`REPLIES_WAIT_AT`]): its requests ran here without
    /// waiting for another thread, and cost at least that much each.
    pub(super) fn replies_wait(&self) -> bool {
        !self.waited && self.per_request_ns >= REPLIES_WAIT_AT.as_nanos() as u64
    }

    /// Notes that `requests` requests ran here, keeping the runtime thread for `took`.
    fn ran_here(&mut self, requests: usize, took: Duration) {
        if requests == 0 {
            return;
        }
        let sample = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX) / requests as u64;
        self.per_request_ns = if self.per_request_ns == 0 {
            sample
        } else {
            self.per_request_ns.saturating_mul(3).saturating_add(sample) / 4
        };
    }
}

/// True if other tasks are ready to run on the runtime (its queues are not empty).
pub(super) fn others_wait(runtime: &tokio::runtime::RuntimeMetrics) -> bool {
    let waiting = runtime.global_queue_depth();
    #[cfg(tokio_unstable)]
    let waiting = waiting + (0..runtime.num_workers()).map(|w| runtime.worker_local_queue_depth(w)).sum::<usize>();
    waiting > 0
}

/// Where a round stands after [`run_here`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Left {
    /// What is left of it (if anything) goes to an executor.
    Rest,
    /// The replies passed [`OUTPUT_BOUND`]: they go out before anything else runs.
    OutputFull,
    /// Its front request is a write that waits for another client's queued write
    /// ([`InMemory::Waits`]).
    Waits(lsm::WriteTicket),
    /// Its front request is a write of a hot key, which joins the key's next group
    /// ([`InMemory::Hot`]).
    Hot,
}

/// Runs what of the round's front [`run_in_memory`] takes on this task, awaiting the commits
/// of the writes it queues, and notes in `cost` how long that kept the runtime thread (the
/// waits for commits not counted); says where it stopped.
pub(super) async fn run_here(
    state: &Arc<ServerState>,
    session: &mut Box<Session>,
    requests: &mut VecDeque<Vec<Bytes>>,
    output: &mut BytesMut,
    cost: &mut RoundCost,
) -> Left {
    let before = requests.len();
    let mut took = Duration::ZERO;
    cost.waited = false;
    let left = loop {
        let started = Stamp::now();
        let ran = run_in_memory(session, requests, output, OUTPUT_BOUND);
        took += started.elapsed();
        match ran {
            InMemory::Stopped(true) => break Left::OutputFull,
            InMemory::Stopped(false) => break Left::Rest,
            InMemory::Waits(ticket) => break Left::Waits(ticket),
            InMemory::Hot => break Left::Hot,
            InMemory::Sets(mut sets) => {
                let committed = match sets.commit.take() {
                    Some(commit) => {
                        cost.waited = true;
                        commit.await
                    }
                    None => Ok(()),
                };
                sets.finish(session, committed, output);
                if output.len() >= OUTPUT_BOUND {
                    break Left::OutputFull;
                }
            }
            InMemory::Writes(mut writes) => {
                let voided = writes.voided;
                let failed = match writes.commit.take() {
                    Some(commit) => {
                        cost.waited = true;
                        commit.await.err().map(engine_error)
                    }
                    None => None,
                };
                if writes.finish(session, failed.as_ref(), output) {
                    serve_blocked(state, session).await;
                }
                if output.len() >= OUTPUT_BOUND {
                    break Left::OutputFull;
                }
                if voided {
                    break Left::Rest;
                }
            }
        }
    };
    cost.ran_here(before - requests.len(), took);
    left
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(commands: &[&str], n: usize) -> VecDeque<Vec<Bytes>> {
        (0..n)
            .map(|i| vec![Bytes::copy_from_slice(commands[i % commands.len()].as_bytes()), Bytes::from("k")])
            .collect()
    }

    #[test]
    fn only_long_costly_rounds_without_pub_sub_leave_a_busy_runtime() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
        let metrics = rt.metrics();
        let long = round(&["get", "incr"], LONG_ROUND + 1);
        let mut cost = RoundCost::default();
        cost.ran_here(4, Duration::from_micros(8));
        assert!(!cost.hand_off_whole(&metrics, &long), "nothing waits for the runtime");
        // Hold the only worker, then queue tasks behind it.
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        rt.spawn(async move {
            held_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        });
        held_rx.recv().unwrap();
        let queued: Vec<_> = (0..3).map(|_| rt.spawn(async {})).collect();
        assert!(cost.hand_off_whole(&metrics, &long), "a long, costly round leaves a busy runtime");
        assert!(!cost.hand_off_whole(&metrics, &round(&["get"], LONG_ROUND)), "a short one stays");
        assert!(!cost.hand_off_whole(&metrics, &round(&["get"], 1)), "P1 stays");
        let with_pubsub = round(&["get", "get", "unsubscribe"], LONG_ROUND * 2);
        assert!(!cost.hand_off_whole(&metrics, &with_pubsub), "pub/sub takes effect when read");
        let script = |key: &str| ["evalsha", "sha", "1", key].map(|a| Bytes::copy_from_slice(a.as_bytes())).to_vec();
        let one_key: VecDeque<_> = (0..LONG_ROUND * 2).map(|_| script("k")).collect();
        assert!(!cost.hand_off_whole(&metrics, &one_key), "scripts of one key share a write group only here");
        let keys: VecDeque<_> = (0..LONG_ROUND * 2).map(|i| script(&format!("k{i}"))).collect();
        assert!(cost.hand_off_whole(&metrics, &keys), "scripts of different keys run in parallel there");
        // Every REMEASURE_EVERY-th round that would go runs here, to measure again.
        let handed: Vec<bool> = (0..2 * REMEASURE_EVERY).map(|_| cost.hand_off_whole(&metrics, &long)).collect();
        assert_eq!(handed.iter().filter(|&&h| !h).count(), 2, "{handed:?}");
        // Cheap requests (measured at 100 ns each) stay, however busy the runtime.
        let mut cheap = RoundCost::default();
        assert!(!cheap.hand_off_whole(&metrics, &long), "unmeasured: runs here first");
        cheap.ran_here(16, Duration::from_micros(1) + Duration::from_nanos(600));
        assert!(!cheap.hand_off_whole(&metrics, &round(&["ping"], 16)));
        assert!(cheap.hand_off_whole(&metrics, &round(&["ping"], 1000)), "unless there are many");
        release_tx.send(()).unwrap();
        for task in queued {
            rt.block_on(task).unwrap();
        }
    }

    #[test]
    fn the_estimate_follows_what_rounds_cost() {
        let mut cost = RoundCost::default();
        cost.ran_here(0, Duration::from_secs(1));
        assert_eq!(cost.per_request_ns, 0, "a round that ran nothing says nothing");
        cost.ran_here(10, Duration::from_micros(10));
        assert_eq!(cost.per_request_ns, 1000);
        for _ in 0..20 {
            cost.ran_here(10, Duration::from_micros(50));
        }
        assert!((4900..=5000).contains(&cost.per_request_ns), "{}", cost.per_request_ns);
    }

    #[test]
    fn only_costly_rounds_that_waited_for_nothing_hold_their_replies() {
        let mut cost = RoundCost::default();
        assert!(!cost.replies_wait(), "unmeasured");
        cost.ran_here(1, REPLIES_WAIT_AT / 2);
        assert!(!cost.replies_wait(), "cheap requests write at once");
        for _ in 0..20 {
            cost.ran_here(1, REPLIES_WAIT_AT * 2);
        }
        assert!(cost.replies_wait(), "costly ones wait for the other ready rounds");
        cost.waited = true;
        assert!(!cost.replies_wait(), "a round that awaited a commit or an executor writes at once");
    }
}
