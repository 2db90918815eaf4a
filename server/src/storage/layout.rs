//! The key layout record: which layout the data in this engine follows, and the secret seed of
//! the pick index (`picks.rs`).
//!
//! ```text
//! layout   "S:layout"  ->  version u8 | pick seed u64 LE
//! ```
//!
//! - Layout 1 had no record and no pick index: refused with a clear error.
//! - Layout 2 added the pick index (`R` records) and removal counts in collection headers.
//! - Layout 3 keeps a set's and a sorted set's members in their pick records alone (a member's
//!   value, the score of a sorted set's, moves into the pick record; the element records go).
//!   Data of layout 2 is upgraded in place when it is opened ([`upgrade_from_2`]).
//!
//! Data of any other layout is refused, never misread.

use super::collection::prefix_end;
use super::picks::{members_in_picks, pick_key};
use super::{decode, element_prefix};

/// The record naming the key layout of this data and the secret seed of the pick index.
pub(super) const LAYOUT_KEY: &[u8] = b"S:layout";
/// The layout this server writes (see the module docs).
pub(super) const LAYOUT_VERSION: u8 = 3;

/// Records an upgrade writes per batch.
const UPGRADE_BATCH: u32 = 4096;

/// Checks the layout record (writing it into an empty keyspace, upgrading data of layout 2) and
/// returns the pick seed. Data written by another layout is refused with a clear error instead
/// of being misread.
pub(super) fn layout(engine: &lsm::Db) -> lsm::Result<u64> {
    if let Some(raw) = engine.get(LAYOUT_KEY)? {
        let seed = raw.get(1..9).map(|s| u64::from_le_bytes(s.try_into().unwrap_or_default()));
        return match (raw.first(), seed) {
            (Some(&LAYOUT_VERSION), Some(seed)) => Ok(seed),
            (Some(&2), Some(seed)) => upgrade_from_2(engine, seed).map(|()| seed),
            _ => Err(lsm::Error::InvalidArgument(format!(
                "this data uses key layout {}; this shale-server reads layout {LAYOUT_VERSION}",
                raw.first().map_or_else(|| "(unreadable)".to_string(), u8::to_string)
            ))),
        };
    }
    if engine.range(b"M".to_vec()..b"N".to_vec()).next().is_some() {
        return Err(lsm::Error::InvalidArgument(format!(
            "this data was written by an older shale-server (key layout 1, without the pick index); \
             this one reads layout {LAYOUT_VERSION}: export the data with the old server and load it here"
        )));
    }
    let seed: u64 = rand::random();
    let mut b = lsm::WriteBatch::new();
    b.put(LAYOUT_KEY, record(seed));
    engine.write(b, &lsm::WriteOptions::synced())?;
    Ok(seed)
}

/// The layout record of this layout with `seed`.
fn record(seed: u64) -> Vec<u8> {
    let mut record = vec![LAYOUT_VERSION];
    record.extend_from_slice(&seed.to_le_bytes());
    record
}

/// Moves every set's and sorted set's members from their element records into their pick
/// records (layout 2 → 3), then writes the new layout record, synced. Batches are written as
/// they fill; an upgrade cut short (a crash) leaves the layout record at 2 and is run again at
/// the next open: a collection's element records are deleted only in or after the batch that
/// holds the last of its copies, and copying a member again writes the same record.
fn upgrade_from_2(engine: &lsm::Db, seed: u64) -> lsm::Result<()> {
    let mut b = lsm::WriteBatch::new();
    let (mut collections, mut members) = (0u64, 0u64);
    for kv in engine.range(b"M".to_vec()..b"N".to_vec()) {
        let (key, raw) = kv?;
        let Some(pdb) = key.get(1..3).map(|d| u16::from_be_bytes([d[0], d[1]])) else { continue };
        let meta = decode(raw)?;
        if !members_in_picks(meta.kind) {
            continue;
        }
        let prefix = element_prefix(b'E', pdb, meta.uid);
        let end = prefix_end(&prefix);
        for kv in engine.range(prefix.clone()..end.clone()) {
            let (k, value) = kv?;
            b.put(pick_key(pdb, meta.uid, seed, &k[prefix.len()..]), value);
            members += 1;
            if b.len() >= UPGRADE_BATCH {
                engine.write(std::mem::take(&mut b), &lsm::WriteOptions::default())?;
            }
        }
        b.delete_range(prefix, end);
        collections += 1;
    }
    b.put(LAYOUT_KEY, record(seed));
    engine.write(b, &lsm::WriteOptions::synced())?;
    tracing::info!(target: "shale::storage", collections, members, "key layout upgraded from 2 to 3: set and sorted-set members moved into their pick records");
    Ok(())
}
