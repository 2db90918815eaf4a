//! Fault injection for tests: the engine asks a [`FaultInjector`] before each file operation
//! that makes data durable (WAL writes, creations and fsyncs, table fsyncs, manifest writes, the
//! `CURRENT` rename), and fails the operation with the error it returns, before anything of it
//! happens. An injector that also notes what each fsync makes durable can build the directory a
//! power cut would leave (see `lsm/tests/integrity_power_loss.rs`). Tests use it to fail the
//! Nth operation of a kind with `EIO` or `ENOSPC` and check that every failure ends in an `Err`
//! and a read-only state, never a panic, a hang or wrong data. Unset (the default), it costs a
//! branch.

use std::path::Path;

/// A file operation the engine is about to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoOp {
    /// Appending a commit group's records to the WAL.
    WalWrite,
    /// fsyncing the WAL (a synced write, the every-second syncer, a rotation).
    WalSync,
    /// Creating a new WAL (memtable rotation).
    WalCreate,
    /// fsyncing a finished table (flush or compaction output).
    TableSync,
    /// Appending a version edit to the manifest.
    ManifestWrite,
    /// Renaming a new `CURRENT` into place (a new manifest at open or when the old one is big).
    Rename,
}

/// Decides whether a file operation fails (see the module docs).
pub trait FaultInjector: Send + Sync + std::fmt::Debug {
    /// `Err` fails `op` on `path` with that error; `Ok` lets it happen.
    fn check(&self, op: IoOp, path: &Path) -> std::io::Result<()>;
}

/// Asks `faults`, if set.
pub(crate) fn check(faults: &Option<std::sync::Arc<dyn FaultInjector>>, op: IoOp, path: &Path) -> std::io::Result<()> {
    match faults {
        Some(f) => f.check(op, path),
        None => Ok(()),
    }
}
