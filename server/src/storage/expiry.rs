//! The active expiry cycle's storage side: due keys found through the expiry index and
//! deleted under their key locks (see [`crate::services::expiry_cycle`]).

use bytes::Bytes;

use super::{decode, expiry_key, meta_key, now_ms, ExecContext, Storage};
use crate::services::notifications;

impl Storage {
    /// One step of the active expiry cycle: looks at up to `budget` index entries due by `now`,
    /// deletes the keys that really expired (under their key locks) and the entries, and indexes
    /// again, at their TTL, the keys whose TTL moved later than their entry. Returns
    /// how many keys it deleted and whether due entries remain. Each deleted key is an
    /// `expired` keyspace event in `cx`.
    pub fn expire_cycle(&self, cx: &ExecContext, now: u64, budget: usize) -> lsm::Result<(u64, bool)> {
        let mut due = Vec::new();
        let end = expiry_key(now.saturating_add(1), 0, b"");
        for kv in self.engine.range(b"X".to_vec()..end) {
            let (k, _) = kv?;
            if due.len() == budget {
                return self.expire_entries(cx, due, now).map(|n| (n, true));
            }
            due.push(k);
        }
        self.expire_entries(cx, due, now).map(|n| (n, false))
    }

    /// Lazy expiry: deletes the keys the last command found expired (`seen`, from `cx`'s
    /// [`ExecContext::take_expired_seen`]) as Redis does on access, so they count in
    /// `expired_keys` and send their `expired` events before the command's reply. Entries
    /// whose key was meanwhile rewritten only lose their stale index entry. Returns how many
    /// keys were deleted.
    pub fn expire_seen(&self, cx: &ExecContext, mut seen: Vec<Bytes>) -> lsm::Result<u64> {
        seen.sort();
        seen.dedup();
        self.expire_entries(cx, seen, now_ms())
    }

    fn expire_entries(&self, cx: &ExecContext, due: Vec<Bytes>, now: u64) -> lsm::Result<u64> {
        let mut expired = 0;
        for entry in due {
            if entry.len() < 11 {
                self.engine.delete(&entry)?;
                continue;
            }
            let at = u64::from_be_bytes(entry[1..9].try_into().unwrap_or_default());
            let pdb = u16::from_be_bytes([entry[9], entry[10]]);
            let key = &entry[11..];
            let mk = meta_key(pdb, key);
            let mut one = lsm::WriteBatch::new();
            one.delete(&entry);
            // Key locks are by logical database.
            let logical = self.logical(pdb);
            let _guard = self.lock(cx, logical, [key]);
            let mut gone = false;
            if let Some(raw) = self.engine.get(&mk)? {
                let meta = decode(raw)?;
                // An entry before the key's TTL: the TTL moved later without a new entry
                // (`needs_index_entry`), or a later one was written and this one is stale.
                if meta.expire_at_ms >= at && meta.is_expired(now) {
                    one.delete(&mk);
                    expired += 1;
                    gone = true;
                } else if meta.expire_at_ms > at {
                    let later = expiry_key(meta.expire_at_ms, pdb, key);
                    if self.engine.get(&later)?.is_none() {
                        one.put(later, b"");
                    }
                }
            }
            self.commit(one)?;
            if gone {
                cx.notify(notifications::EXPIRED, "expired", logical, key);
            }
        }
        Ok(expired)
    }
}
