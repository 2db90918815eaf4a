//! The key layout record: which layout the data in this engine follows, and the secret seed of
//! the pick index (`picks/mod.rs`).
//!
//! ```text
//! layout   "S:layout"  ->  version u8 | pick seed u64 LE
//! ```
//!
//! - Layout 1 had no record and no pick index: refused with a clear error.
//! - Layout 2 added the pick index (`R` records) and removal counts in collection headers.
//! - Layout 3 keeps a set's and a sorted set's members in their pick records alone (a member's
//!   value, the score of a sorted set's, moves into the pick record; the element records go).
//! - Layout 4 does the same for hashes: a field's record holds a compact hash's ordinal (which
//!   was the pick record's whole value) and the field's value (see `field_order.rs`).
//!
//! Data of layouts 2 and 3 is upgraded in place when it is opened ([`upgrade_from_2`],
//! [`upgrade_from_3`]).
//!
//! Data of any other layout is refused, never misread.

use super::collection::prefix_end;
use super::field_order::encode_field;
use super::picks::pick_key;
use super::{decode, element_prefix, KeyType};

/// The record naming the key layout of this data and the secret seed of the pick index.
pub(super) const LAYOUT_KEY: &[u8] = b"S:layout";
/// The layout this server writes (see the module docs).
pub(super) const LAYOUT_VERSION: u8 = 4;

/// Where an upgrade records how far it got in the collection it was copying.
const PROGRESS_KEY: &[u8] = b"S:upgrade-progress";

/// Records an upgrade writes per batch.
const UPGRADE_BATCH: u32 = 4096;

/// Checks the layout record (writing it into an empty keyspace; with `upgrade`, upgrading data
/// of layouts 2 and 3) and returns the pick seed. Data written by another layout is refused
/// with a clear error instead of being misread. A replica's copy of its primary's data is not
/// upgraded: the primary's later writes, shipped as they are, would follow the old layout.
pub(super) fn layout(engine: &lsm::Db, upgrade: bool) -> lsm::Result<u64> {
    if let Some(raw) = engine.get(LAYOUT_KEY)? {
        let seed = raw.get(1..9).map(|s| u64::from_le_bytes(s.try_into().unwrap_or_default()));
        return match (raw.first(), seed) {
            (Some(&LAYOUT_VERSION), Some(seed)) => Ok(seed),
            (Some(&(2 | 3)), Some(_)) if !upgrade => Err(lsm::Error::InvalidArgument(format!(
                "the primary's data uses key layout {}; this replica reads layout {LAYOUT_VERSION}: run the same \
                 shale-server version on both",
                raw[0]
            ))),
            (Some(&2), Some(seed)) => {
                upgrade_from_2(engine, seed).and_then(|()| upgrade_from_3(engine, seed)).map(|()| seed)
            }
            (Some(&3), Some(seed)) => upgrade_from_3(engine, seed).map(|()| seed),
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
    b.put(LAYOUT_KEY, record(LAYOUT_VERSION, seed));
    engine.write(b, &lsm::WriteOptions::synced())?;
    Ok(seed)
}

/// The layout record of layout `version` with `seed`.
pub(super) fn record(version: u8, seed: u64) -> Vec<u8> {
    let mut record = vec![version];
    record.extend_from_slice(&seed.to_le_bytes());
    record
}

/// Layout 2 → 3: moves every set's and sorted set's members from their element records into
/// their pick records (see [`move_members`]).
fn upgrade_from_2(engine: &lsm::Db, seed: u64) -> lsm::Result<()> {
    move_members(engine, seed, 3, &[KeyType::Set, KeyType::ZSet], |_, value| Ok(value.to_vec()))
}

/// Layout 3 → 4: moves every hash's fields from their element records into their pick records,
/// each after the ordinal its pick record held (see [`move_members`]).
fn upgrade_from_3(engine: &lsm::Db, seed: u64) -> lsm::Result<()> {
    move_members(engine, seed, 4, &[KeyType::Hash], |pick, value| {
        let ordinal = engine.get(pick)?.and_then(|v| <[u8; 8]>::try_from(&v[..]).ok()).map(u64::from_be_bytes);
        Ok(encode_field(ordinal, value))
    })
}

/// Rewrites the element records of every collection of `kinds` as pick records valued
/// `value(pick key, element value)` (which may read the pick record as the old layout left
/// it), deletes the element records, then writes layout record `version`, synced.
///
/// Batches are written as they fill. An upgrade cut short (a crash) leaves the old layout
/// record and runs again at the next open, where it must not rewrite a member twice (its pick
/// record then holds the new value): a collection's element records are deleted in the batch
/// after its last copy, and every batch written in the middle of a collection records how far
/// it got ([`PROGRESS_KEY`]: the collection's uid and the last field copied), so a rerun
/// skips the fields up to there. Batches commit whole and in order.
fn move_members(
    engine: &lsm::Db,
    seed: u64,
    version: u8,
    kinds: &[KeyType],
    value: impl Fn(&[u8], &[u8]) -> lsm::Result<Vec<u8>>,
) -> lsm::Result<()> {
    let mut b = lsm::WriteBatch::new();
    let (mut collections, mut members) = (0u64, 0u64);
    // (uid, last field copied) of an earlier run cut short.
    let done = engine
        .get(PROGRESS_KEY)?
        .filter(|p| p.len() >= 8)
        .map(|p| (u64::from_be_bytes(p[..8].try_into().unwrap_or_default()), p.slice(8..)));
    for kv in engine.range(b"M".to_vec()..b"N".to_vec()) {
        let (key, raw) = kv?;
        let Some(pdb) = key.get(1..3).map(|d| u16::from_be_bytes([d[0], d[1]])) else { continue };
        let meta = decode(raw)?;
        if !kinds.contains(&meta.kind) {
            continue;
        }
        let prefix = element_prefix(b'E', pdb, meta.uid);
        let end = prefix_end(&prefix);
        let copied = done.as_ref().filter(|(uid, _)| *uid == meta.uid).map(|(_, field)| field);
        for kv in engine.range(prefix.clone()..end.clone()) {
            let (k, v) = kv?;
            let field = &k[prefix.len()..];
            if copied.is_some_and(|last| field <= &last[..]) {
                continue;
            }
            let pick = pick_key(pdb, meta.uid, seed, field);
            let new = value(&pick, &v)?;
            b.put(pick, new);
            members += 1;
            if b.len() >= UPGRADE_BATCH {
                let mut progress = meta.uid.to_be_bytes().to_vec();
                progress.extend_from_slice(field);
                b.put(PROGRESS_KEY, progress);
                engine.write(std::mem::take(&mut b), &lsm::WriteOptions::default())?;
            }
        }
        b.delete_range(prefix, end);
        collections += 1;
    }
    b.delete(PROGRESS_KEY);
    b.put(LAYOUT_KEY, record(version, seed));
    engine.write(b, &lsm::WriteOptions::synced())?;
    tracing::info!(target: "shale::storage", version, collections, members, "key layout upgraded: members moved into their pick records");
    Ok(())
}
