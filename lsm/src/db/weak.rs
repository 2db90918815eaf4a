//! Read handles that do not keep the database open: [`WeakDb`] and its snapshots, for code the
//! database itself holds (a compaction filter looking other keys up).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::DbInner;
use crate::{Error, ReadOptions, Result, Snapshot};

/// A non-owning read handle from [`Db::downgrade`]: reads fail with [`Error::Closed`] once the
/// database is closed or every [`Db`] is dropped.
#[derive(Debug, Clone)]
pub struct WeakDb(pub(super) std::sync::Weak<DbInner>);

impl WeakDb {
    /// The value of `key`, if present (the latest committed state).
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        self.0.upgrade().ok_or(Error::Closed)?.get_with(key.as_ref(), &ReadOptions::default())
    }

    /// A consistent view for several dependent reads (each `get` sees the same state).
    pub fn snapshot(&self) -> Result<WeakSnapshot> {
        let inner = self.0.upgrade().ok_or(Error::Closed)?;
        inner.check_open()?;
        let snapshot = Snapshot::new(inner.visible_seq.load(Ordering::Acquire), &inner.snapshots);
        Ok(WeakSnapshot { inner, opts: ReadOptions::default().snapshot(&snapshot) })
    }
}

/// Reads at one sequence number, from [`WeakDb::snapshot`]. Keep it short-lived.
#[derive(Debug)]
pub struct WeakSnapshot {
    inner: Arc<DbInner>,
    opts: ReadOptions,
}

impl WeakSnapshot {
    /// The value of `key` at the snapshot.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        self.inner.get_with(key.as_ref(), &self.opts)
    }
}
