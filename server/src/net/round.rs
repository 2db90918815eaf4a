//! Where a connection's round of requests starts: on its own task, which runs the leading
//! requests memory can answer ([`run_here`]), or — for a long round while other connections'
//! tasks wait for a runtime thread — whole on an executor ([`hand_off_whole`]).

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::connection::{serve_blocked, OUTPUT_BOUND};
use crate::commands::{flag, lookup};
use crate::exec::{run_in_memory, InMemory, Session};
use crate::state::ServerState;

/// A round of more requests than this goes to an executor whole while other connections'
/// tasks wait for a runtime thread (see [`hand_off_whole`]).
pub const LONG_ROUND: usize = 8;

/// Runs what of the round's front [`run_in_memory`] takes on this task, awaiting the commits
/// of the writes it queues; true if it stopped because the replies passed [`OUTPUT_BOUND`].
pub(super) async fn run_here(
    state: &Arc<ServerState>,
    session: &mut Box<Session>,
    requests: &mut VecDeque<Vec<Bytes>>,
    output: &mut BytesMut,
) -> bool {
    loop {
        match run_in_memory(session, requests, output, OUTPUT_BOUND) {
            InMemory::Stopped(full) => return full,
            InMemory::Sets(mut sets) => {
                let committed = match sets.commit.take() {
                    Some(commit) => commit.await,
                    None => Ok(()),
                };
                sets.finish(session, committed, output);
                if output.len() >= OUTPUT_BOUND {
                    return true;
                }
            }
            InMemory::Writes(mut writes) => {
                let voided = writes.voided;
                let committed = match writes.commit.take() {
                    Some(commit) => commit.await,
                    None => Ok(()),
                };
                if writes.finish(session, committed, output) {
                    serve_blocked(state, session).await;
                }
                if output.len() >= OUTPUT_BOUND || voided {
                    return output.len() >= OUTPUT_BOUND;
                }
            }
        }
    }
}

/// True if the whole round goes to an executor: it is longer than [`LONG_ROUND`], other
/// connections' tasks are ready to run on the runtime meanwhile, and it has no pub/sub command
/// (a SUBSCRIBE or UNSUBSCRIBE takes effect when its connection reads it, see
/// `exec::in_memory`). Run here, a pipeline's commands keep a runtime thread from every other
/// connection for as long as they take; handed off, they run on the executors, in parallel
/// with the runtime's network I/O, for the price of two thread hand-offs per round. With the
/// single runtime thread a 2-core machine gets by default (`worker-threads`), GET -P 16 over
/// 1M keys ran about 1.5x as fast as with every round run here (the runtime thread was the
/// bottleneck). A round of one request (P1) is never handed off.
pub(super) fn hand_off_whole(runtime: &tokio::runtime::RuntimeMetrics, requests: &VecDeque<Vec<Bytes>>) -> bool {
    if requests.len() <= LONG_ROUND {
        return false;
    }
    let waiting = runtime.global_queue_depth();
    #[cfg(tokio_unstable)]
    let waiting = waiting + (0..runtime.num_workers()).map(|w| runtime.worker_local_queue_depth(w)).sum::<usize>();
    waiting > 0 && !requests.iter().any(|args| lookup(&args[0]).is_some_and(|c| c.has(flag::PUBSUB)))
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
    fn only_long_rounds_without_pub_sub_leave_a_busy_runtime() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
        let metrics = rt.metrics();
        let long = round(&["get", "incr"], LONG_ROUND + 1);
        assert!(!hand_off_whole(&metrics, &long), "nothing waits for the runtime");
        // Hold the only worker, then queue tasks behind it.
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        rt.spawn(async move {
            held_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        });
        held_rx.recv().unwrap();
        let queued: Vec<_> = (0..3).map(|_| rt.spawn(async {})).collect();
        assert!(hand_off_whole(&metrics, &long), "a long round leaves a busy runtime");
        assert!(!hand_off_whole(&metrics, &round(&["get"], LONG_ROUND)), "a short one stays");
        assert!(!hand_off_whole(&metrics, &round(&["get"], 1)), "P1 stays");
        let with_pubsub = round(&["get", "get", "unsubscribe"], LONG_ROUND * 2);
        assert!(!hand_off_whole(&metrics, &with_pubsub), "pub/sub takes effect when read");
        release_tx.send(()).unwrap();
        for task in queued {
            rt.block_on(task).unwrap();
        }
    }
}
