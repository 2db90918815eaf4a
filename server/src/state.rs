//! State shared by every connection.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::config::Config;
use crate::storage::Storage;

/// The server: its configuration, its engine, and counters.
#[derive(Debug)]
pub struct ServerState {
    /// Settings in force.
    pub config: Config,
    /// The keyspace, over the storage engine.
    pub storage: Storage,
    /// Next `CLIENT ID`.
    pub next_client_id: AtomicU64,
    /// Connected clients.
    pub clients: AtomicUsize,
    /// Commands processed since start.
    pub commands_processed: AtomicU64,
    /// When the server started.
    pub started: Instant,
    /// Reads that found their key.
    pub keyspace_hits: AtomicU64,
    /// Reads that did not.
    pub keyspace_misses: AtomicU64,
    /// (when, commands processed) at the last ops/sec sample.
    ops_sample: Mutex<(Instant, u64, f64)>,
}

impl ServerState {
    /// State for a server with `config` over `db`.
    pub fn new(config: Config, db: lsm::Db) -> Self {
        ServerState {
            config,
            storage: Storage::new(db),
            next_client_id: AtomicU64::new(1),
            clients: AtomicUsize::new(0),
            commands_processed: AtomicU64::new(0),
            started: Instant::now(),
            keyspace_hits: AtomicU64::new(0),
            keyspace_misses: AtomicU64::new(0),
            ops_sample: Mutex::new((Instant::now(), 0, 0.0)),
        }
    }

    /// Commands per second since the previous sample (taken at most every 100 ms).
    pub fn ops_per_sec(&self) -> f64 {
        let mut s = self.ops_sample.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.commands_processed.load(Ordering::Relaxed);
        let dt = s.0.elapsed().as_secs_f64();
        if dt >= 0.1 {
            s.2 = (now - s.1) as f64 / dt;
            *s = (Instant::now(), now, s.2);
        }
        s.2
    }
}
