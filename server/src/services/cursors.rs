//! SCAN cursors. Redis cursors are integers, but Shale walks keys in byte order, so a cursor
//! stands for "the next key to visit": the server remembers that key under a numbered cursor.
//! A walk is therefore stable across writes (every key present for the whole walk is returned,
//! none twice) and costs nothing to resume. The table is bounded; a cursor pushed out of it (or
//! from before a restart) gets a clear `ERR invalid cursor` rather than a silent restart.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use bytes::Bytes;

/// Cursors kept at most; the oldest are forgotten first.
const CAPACITY: usize = 1 << 16;

/// Numbered resume points of SCAN-style walks.
#[derive(Debug)]
pub struct Cursors {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    positions: HashMap<u64, Bytes>,
    order: VecDeque<u64>,
}

impl Default for Cursors {
    fn default() -> Self {
        Cursors { inner: Mutex::new(Inner { next_id: 1, ..Inner::default() }) }
    }
}

impl Cursors {
    /// Remembers `position` and returns its cursor (never 0, which means "start" and "done").
    pub fn save(&self, position: Bytes) -> u64 {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let id = inner.next_id;
        inner.next_id = inner.next_id.wrapping_add(1).max(1);
        inner.positions.insert(id, position);
        inner.order.push_back(id);
        while inner.order.len() > CAPACITY {
            if let Some(old) = inner.order.pop_front() {
                inner.positions.remove(&old);
            }
        }
        id
    }

    /// The position of `cursor`: empty for 0, `None` if unknown.
    pub fn position(&self, cursor: u64) -> Option<Bytes> {
        if cursor == 0 {
            return Some(Bytes::new());
        }
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).positions.get(&cursor).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_old_ones_are_forgotten() {
        let c = Cursors::default();
        assert_eq!(c.position(0), Some(Bytes::new()));
        let first = c.save(Bytes::from_static(b"k1"));
        assert_ne!(first, 0);
        assert_eq!(c.position(first), Some(Bytes::from_static(b"k1")));
        for i in 0..CAPACITY {
            c.save(Bytes::from(i.to_string()));
        }
        assert_eq!(c.position(first), None, "the oldest cursor was pushed out");
        assert_eq!(c.position(12345678901), None);
    }
}
