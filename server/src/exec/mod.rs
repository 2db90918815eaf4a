//! Where commands run.
//!
//! **The execution model, in three sentences.** Tokio's runtime does network I/O and only
//! what cannot block: each connection's task reads, parses, writes replies and waits, and runs
//! the leading requests of a batch itself only when memory answers them — point reads with
//! memory-only engine reads, plain SETs (and a lone MSET) queued with the engine's non-blocking
//! commit ([`in_memory::run_in_memory`]), and runs of read-modify-write commands (EVAL scripts
//! too) whose keys' stripes are free, run as one write group with memory-only reads and queued
//! the same way ([`queued`]) — but a batch of more than `net::round::LONG_ROUND`
//! requests goes to an executor whole while other connections wait for a runtime thread.
//! Everything else (and any command that turns out to need the disk)
//! goes with the connection's [`Session`] to an executor thread ([`pool`]), which passes each
//! request through the one command gate ([`gate`]) — as the in-memory path does — and runs it
//! against the engine, where a page fault, a lock wait, a group commit or a write stall blocks
//! only that thread (and a monitor adds helper threads when every executor is stuck).
//! Per-command state (transaction buffer, read snapshot, held key stripes, memory-only mode)
//! travels in the session's [`ExecContext`](crate::storage::ExecContext), reset after each
//! command, and a connection whose unsent replies pass a bound is not read until they drain.
//! A short round of writes of the kinds pipelines group (INCR, LPUSH, XADD, …) whose key's
//! last write is still queued waits for it on the task ([`combine::on_task`]): one task per
//! such hot key runs the rounds of all the clients waiting on it as one write group, the same
//! way, once that write is visible, so fifty clients writing one key do not wait for fifty
//! commits in turn. Other rounds of such writes that cannot run on the task go to the
//! [`combine`] queue, where one executor job runs them as one group with one commit.

mod after_command;
pub mod combine;
pub mod gate;
pub mod in_memory;
pub mod observe;
pub mod pool;
pub mod queued;
pub mod session;
mod set_batch;
pub(crate) mod write_group;

pub(crate) use gate::run_command;
pub use gate::{dispatch, gate, run_batch, serve_blocked, serve_keys, serve_signals, BatchEnd};
pub use in_memory::{prefetch_keys, run_in_memory, InMemory, InMemoryCounters};
pub use observe::log_slow;
pub use pool::{Executor, JobPanicked};
pub use session::{BlockRequest, ReplyMode, Session};
