//! Reads through a transaction's buffer: ranges of the engine with the buffered writes merged
//! in ([`RawRange`], [`MergedRange`]), and the buffer's writes over one range for a caller that
//! reads with its own engine cursor ([`Overlay`]).

use std::collections::BTreeMap;

use bytes::Bytes;

/// A transaction's buffered writes over one key range, to lay over an engine cursor's reads.
#[derive(Debug)]
pub(in crate::storage) struct Overlay {
    /// Keys written in the range, sorted (true: put, false: deleted).
    pub(in crate::storage) writes: Vec<(Vec<u8>, bool)>,
    /// Ranges deleted that meet the range.
    pub(super) range_dels: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Overlay {
    /// Whether the engine's entry for `key` is hidden (rewritten or deleted) by the buffer.
    pub(in crate::storage) fn hides(&self, key: &[u8]) -> bool {
        self.writes.binary_search_by(|(k, _)| k[..].cmp(key)).is_ok()
            || self.range_dels.iter().any(|(a, b)| key >= &a[..] && key < &b[..])
    }
}

/// The engine's entries of a range with a transaction's buffered writes laid over them, read
/// lazily from either end: a command that takes the first few entries of a large range inside
/// a transaction (ZPOPMIN, LPOP of a list …) pays for those entries only.
pub struct MergedRange {
    pub(super) engine: lsm::Range,
    /// The buffer's writes in the range (None: deleted); they hide the engine's entries.
    pub(super) buffered: BTreeMap<Bytes, Option<Bytes>>,
    /// Ranges the transaction deleted: engine entries in them are gone.
    pub(super) range_dels: Vec<(Vec<u8>, Vec<u8>)>,
    /// An engine entry read from the front (or back) but not handed out yet.
    pub(super) front: Option<(Bytes, Bytes)>,
    pub(super) back: Option<(Bytes, Bytes)>,
}

impl std::fmt::Debug for MergedRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergedRange").field("buffered", &self.buffered.len()).finish_non_exhaustive()
    }
}

impl MergedRange {
    /// Whether the engine's entry for `key` is what the transaction sees.
    fn engine_visible(&self, key: &[u8]) -> bool {
        !self.buffered.contains_key(key) && !self.range_dels.iter().any(|(a, b)| key >= &a[..] && key < &b[..])
    }

    /// The next visible engine entry from the front (the back's pending one once the engine
    /// range is used up).
    fn engine_front(&mut self) -> Option<lsm::Result<(Bytes, Bytes)>> {
        loop {
            let kv = match self.front.take() {
                Some(kv) => kv,
                None => match self.engine.next() {
                    Some(Ok(kv)) => kv,
                    Some(Err(e)) => return Some(Err(e)),
                    None => self.back.take()?,
                },
            };
            if self.engine_visible(&kv.0) {
                return Some(Ok(kv));
            }
        }
    }

    fn engine_back(&mut self) -> Option<lsm::Result<(Bytes, Bytes)>> {
        loop {
            let kv = match self.back.take() {
                Some(kv) => kv,
                None => match self.engine.next_back() {
                    Some(Ok(kv)) => kv,
                    Some(Err(e)) => return Some(Err(e)),
                    None => self.front.take()?,
                },
            };
            if self.engine_visible(&kv.0) {
                return Some(Ok(kv));
            }
        }
    }
}

impl Iterator for MergedRange {
    type Item = lsm::Result<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let engine = match self.engine_front() {
                Some(Err(e)) => return Some(Err(e)),
                Some(Ok(kv)) => Some(kv),
                None => None,
            };
            let buffer_first = self.buffered.first_key_value().map(|(k, _)| k.clone());
            match (engine, buffer_first) {
                (Some(kv), Some(b)) if b < kv.0 => {
                    self.front = Some(kv);
                    if let Some((k, Some(v))) = self.buffered.pop_first() {
                        return Some(Ok((k, v)));
                    }
                }
                (Some(kv), _) => return Some(Ok(kv)),
                (None, Some(_)) => {
                    if let Some((k, Some(v))) = self.buffered.pop_first() {
                        return Some(Ok((k, v)));
                    }
                }
                (None, None) => return None,
            }
        }
    }
}

impl DoubleEndedIterator for MergedRange {
    fn next_back(&mut self) -> Option<Self::Item> {
        loop {
            let engine = match self.engine_back() {
                Some(Err(e)) => return Some(Err(e)),
                Some(Ok(kv)) => Some(kv),
                None => None,
            };
            let buffer_last = self.buffered.last_key_value().map(|(k, _)| k.clone());
            match (engine, buffer_last) {
                (Some(kv), Some(b)) if b > kv.0 => {
                    self.back = Some(kv);
                    if let Some((k, Some(v))) = self.buffered.pop_last() {
                        return Some(Ok((k, v)));
                    }
                }
                (Some(kv), _) => return Some(Ok(kv)),
                (None, Some(_)) => {
                    if let Some((k, Some(v))) = self.buffered.pop_last() {
                        return Some(Ok((k, v)));
                    }
                }
                (None, None) => return None,
            }
        }
    }
}

/// A range over the engine, merged with the running transaction's writes when there is one.
// The engine variant is the common one; boxing it would cost an allocation per range.
#[allow(clippy::large_enum_variant)]
pub enum RawRange {
    /// No transaction: the engine's own iterator.
    Engine(lsm::Range),
    /// Inside a transaction: the engine's entries under the transaction's writes.
    Merged(Box<MergedRange>),
}

impl std::fmt::Debug for RawRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RawRange")
    }
}

impl Iterator for RawRange {
    type Item = lsm::Result<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            RawRange::Engine(r) => r.next(),
            RawRange::Merged(m) => m.next(),
        }
    }
}

impl DoubleEndedIterator for RawRange {
    fn next_back(&mut self) -> Option<Self::Item> {
        match self {
            RawRange::Engine(r) => r.next_back(),
            RawRange::Merged(m) => m.next_back(),
        }
    }
}
