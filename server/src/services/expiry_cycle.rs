//! The active expiry cycle: ten times a second, delete keys whose TTL has passed, found through
//! the expiry index (so the work is proportional to what expires, not to the keyspace), with a
//! bounded amount of work per tick so clients never wait behind it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::state::ServerState;
use crate::storage::{now_ms, ExecContext};

/// Index entries looked at per engine call.
const BATCH: usize = 256;
/// Time one tick may spend (Redis's default `active-expire-effort` spends 25 % of a 100 ms tick).
const TICK_BUDGET: Duration = Duration::from_millis(25);

/// Runs until the task is aborted. The work itself runs on an executor thread.
pub async fn active_expiry(state: Arc<ServerState>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        crate::services::clients::tick_coarse_clock();
        // A lowered `tracking-table-max-keys` takes effect without waiting for a read.
        let max_keys = state.config().tracking_table_max_keys;
        state.storage.tracking.limit(max_keys);
        let run = {
            let st = Arc::clone(&state);
            state.executor.run(move || run_tick(&st))
        };
        if let Ok(Err(e)) = run.await {
            tracing::warn!(target: "shale::expire", error = %e, "active expiry failed; retrying next tick");
        }
    }
}

/// One tick: expire due keys in batches until none are due or the time budget is spent. A
/// replica expires nothing itself (its primary's deletes arrive through replication; until
/// then reads treat an expired key as missing), and nothing expires while `CLIENT PAUSE` is in
/// force (as in Redis: a pause, used to fail over, must leave the dataset unchanged; reads
/// still treat expired keys as missing).
pub fn run_tick(state: &ServerState) -> lsm::Result<u64> {
    if state.replication.is_replica() || state.pause_remaining(true).is_some() {
        return Ok(0);
    }
    let started = Instant::now();
    let mut total = 0;
    let cx = ExecContext::new();
    cx.set_notify_flags(state.notify_flags(), false);
    loop {
        let cycled = state.storage.expire_cycle(&cx, now_ms(), BATCH);
        crate::services::notifications::publish(state, cx.take_events());
        let (expired, more) = cycled?;
        total += expired;
        state.expired_keys.fetch_add(expired, Ordering::Relaxed);
        if !more || started.elapsed() >= TICK_BUDGET {
            // The latency monitor's `expire-cycle` event.
            state.latency.sample("expire-cycle", started.elapsed().as_millis() as u64);
            return Ok(total);
        }
    }
}
