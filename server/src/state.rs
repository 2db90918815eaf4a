//! State shared by every connection.

use std::sync::atomic::{AtomicU64, AtomicUsize};
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
        }
    }
}
