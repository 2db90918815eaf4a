//! Snapshots: a sequence number pinned for reads until the snapshot is dropped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The live snapshots' sequence numbers (with counts), so compaction keeps what they can see.
#[derive(Debug, Default)]
pub(crate) struct SnapshotList {
    seqs: Mutex<BTreeMap<u64, usize>>,
}

impl SnapshotList {
    fn acquire(&self, seq: u64) {
        *self.seqs.lock().unwrap_or_else(|e| e.into_inner()).entry(seq).or_default() += 1;
    }

    fn release(&self, seq: u64) {
        let mut m = self.seqs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = m.get_mut(&seq) {
            *c -= 1;
            if *c == 0 {
                m.remove(&seq);
            }
        }
    }

    /// Sequence numbers of all live snapshots, ascending.
    pub(crate) fn all(&self) -> Vec<u64> {
        self.seqs.lock().unwrap_or_else(|e| e.into_inner()).keys().copied().collect()
    }

    /// The oldest live snapshot's sequence number.
    pub(crate) fn oldest(&self) -> Option<u64> {
        self.seqs.lock().unwrap_or_else(|e| e.into_inner()).keys().next().copied()
    }
}

#[derive(Debug)]
struct Inner {
    seq: u64,
    list: Arc<SnapshotList>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.list.release(self.seq);
    }
}

/// A consistent read view of the database; reads through it see exactly the writes acknowledged
/// before it was taken. Cheap to clone; released when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct Snapshot {
    inner: Arc<Inner>,
}

impl Snapshot {
    pub(crate) fn new(seq: u64, list: &Arc<SnapshotList>) -> Snapshot {
        list.acquire(seq);
        Snapshot { inner: Arc::new(Inner { seq, list: Arc::clone(list) }) }
    }

    /// The sequence number this snapshot reads at.
    pub fn sequence(&self) -> u64 {
        self.inner.seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_register_until_the_last_clone_drops() {
        let list = Arc::new(SnapshotList::default());
        let a = Snapshot::new(5, &list);
        let b = a.clone();
        let c = Snapshot::new(5, &list);
        let d = Snapshot::new(9, &list);
        assert_eq!(list.all(), vec![5, 9]);
        drop(a);
        drop(c);
        assert_eq!(list.all(), vec![5, 9]);
        drop(b);
        assert_eq!(list.all(), vec![9]);
        assert_eq!(d.sequence(), 9);
        drop(d);
        assert!(list.all().is_empty());
    }
}
