//! Services that run beside command execution: the active expiry cycle, the registry of
//! clients blocked on keys, the pub/sub hub, the client registry (`CLIENT LIST/KILL`), named
//! LOCKs (user-visible, unlike the internal key stripes of [`crate::storage::KeyLocks`]),
//! keyspace notifications, client-side caching's invalidations (`CLIENT TRACKING`),
//! per-command statistics, the slow log and latency monitor, SCAN cursors, and keys' access
//! times and frequencies (`OBJECT IDLETIME | FREQ`).

pub mod access_times;
pub mod announced;
pub mod blocking;
pub mod clients;
pub mod command_stats;
pub mod counter;
pub mod cursors;
pub mod expiry_cycle;
pub mod named_locks;
pub mod notifications;
pub mod pubsub;
pub mod slowlog;
pub mod tracking;
