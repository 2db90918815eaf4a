//! Where commands run.
//!
//! **The execution model, in three sentences.** Tokio's runtime does network I/O only: each
//! connection's task reads, parses, writes replies and waits (for a blocked pop, a LOCK, a
//! pause) without ever calling the engine. Every parsed batch of a connection's requests goes,
//! with the connection's [`Session`], to an executor thread ([`pool`]), which passes each
//! request through the one command gate ([`gate`]) and runs it against the engine, where a
//! page fault, a lock wait, a group commit or a write stall blocks only that thread (and a
//! monitor adds helper threads when every executor is stuck). Per-command state (transaction
//! buffer, read snapshot, held key stripes) travels in the session's
//! [`ExecContext`](crate::storage::ExecContext), reset after each command, and a connection
//! whose unsent replies pass a bound is not read until they drain.

pub mod gate;
pub mod pool;
pub mod session;

pub use gate::{dispatch, gate, run_batch, serve_signals, BatchEnd};
pub use pool::{Executor, JobPanicked};
pub use session::{BlockRequest, ReplyMode, Session};
