//! Client-side caching (`CLIENT TRACKING`): which clients may hold which keys, and the
//! invalidation messages sent when those keys change.
//!
//! Two modes, as in Redis 7.0:
//! - **Default**: the server remembers the keys each tracking client read (one table, key →
//!   client ids, shared by all databases as in Redis). When a remembered key is written, each of
//!   its clients gets one invalidation and the entry is forgotten: a client learns of the next
//!   change only after reading the key again. OPTIN remembers only what the command right after
//!   `CLIENT CACHING yes` reads; OPTOUT remembers all but what follows `CLIENT CACHING no`.
//! - **BCAST**: nothing is remembered. A client registers key prefixes (none: every key) and
//!   hears of every written key that starts with one of them — one message per prefix per
//!   committed batch (Redis sends one per prefix per event-loop round).
//!
//! NOLOOP leaves out keys the client wrote itself. Messages go to the client itself as RESP3
//! pushes (`invalidate` + the keys), or to the client REDIRECT names: a RESP3 client gets the
//! push, a RESP2 client subscribed to anything gets a pub/sub `message` on
//! `__redis__:invalidate`; a redirect target that is gone makes the client `broken_redirect`
//! (and a RESP3 client is told with a `tracking-redir-broken` push). FLUSHDB and FLUSHALL send
//! every tracking client a null ("all keys") and empty the table. `tracking-table-max-keys`
//! bounds the table: past it, keys are forgotten with an invalidation, as if written.
//!
//! The storage layer calls [`Tracking::written`] with every committed batch (where it sets WATCH
//! flags) and the id of the client that wrote it. Messages are queued on the clients'
//! connections, which write them after the replies they are producing.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use bytes::Bytes;
use lsm::key::ValueKind;

use super::clients::Kind;
use super::pubsub::{Limits, Subscriber};
use crate::resp::Reply;

/// `CLIENT TRACKING ON`'s options.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// REDIRECT: the client that receives the messages (0: this one).
    pub redirect: u64,
    /// BCAST.
    pub bcast: bool,
    /// OPTIN.
    pub optin: bool,
    /// OPTOUT.
    pub optout: bool,
    /// NOLOOP.
    pub noloop: bool,
    /// PREFIX (BCAST only).
    pub prefixes: Vec<Bytes>,
}

/// `CLIENT TRACKINGINFO` of a tracking client.
#[derive(Debug, Clone, Default)]
pub struct Info {
    /// The mode and options in force.
    pub options: Options,
    /// Its redirect target disconnected.
    pub broken_redirect: bool,
}

#[derive(Debug)]
struct Client {
    options: Options,
    broken_redirect: bool,
    /// BCAST prefixes (a set: adding one twice registers it once).
    prefixes: BTreeSet<Bytes>,
}

/// What a committed batch wrote, as tracking sees it (see [`Tracking::touched`]).
#[derive(Debug, Default)]
pub struct Touched {
    /// The keys whose metadata it wrote, once each, in the order written.
    keys: Vec<Bytes>,
    /// It range-deleted metadata (FLUSHDB, FLUSHALL).
    flushed: bool,
}

/// What an invalidation says.
enum Payload {
    /// These keys changed.
    Keys(Vec<Bytes>),
    /// Every key may have changed (a flush).
    All,
}

#[derive(Debug, Default)]
struct Table {
    /// Tracking clients by id.
    clients: HashMap<u64, Client>,
    /// Default mode: key → ids of the clients that read it.
    keys: HashMap<Bytes, HashSet<u64>>,
    /// Ids stored across `keys` (INFO `tracking_total_items`).
    items: usize,
    /// BCAST: prefix → ids of the clients registered for it.
    prefixes: BTreeMap<Bytes, HashSet<u64>>,
    /// Every connected client's message queue, by id (tracking clients and redirect targets).
    inboxes: HashMap<u64, Weak<Subscriber>>,
}

/// The tracking table and the tracking clients.
#[derive(Debug, Default)]
pub struct Tracking {
    table: Mutex<Table>,
    /// Tracking clients (every write checks this, not the mutex).
    clients: AtomicUsize,
}

/// Why `CLIENT TRACKING ON` was refused (Redis's error text, without `ERR `).
pub type Refusal = String;

impl Tracking {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True while some client tracks keys.
    pub fn active(&self) -> bool {
        self.clients.load(Ordering::Acquire) > 0
    }

    /// A connection opened: `inbox` is where its messages go.
    pub fn connect(&self, id: u64, inbox: &Arc<Subscriber>) {
        self.lock().inboxes.insert(id, Arc::downgrade(inbox));
    }

    /// A connection closed: it stops tracking and stops being a redirect target.
    pub fn disconnect(&self, id: u64) {
        self.disable(id);
        self.lock().inboxes.remove(&id);
    }

    /// True if client `id` exists (REDIRECT's check).
    pub fn is_connected(&self, id: u64) -> bool {
        self.lock().inboxes.get(&id).is_some_and(|w| w.strong_count() > 0)
    }

    /// `CLIENT TRACKING ON` for client `id`, with Redis's checks against the options it has.
    pub fn enable(&self, id: u64, options: Options) -> Result<(), Refusal> {
        let mut t = self.lock();
        if let Some(old) = t.clients.get(&id) {
            if old.options.bcast != options.bcast {
                return Err("You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.".into());
            }
        }
        if options.bcast && (options.optin || options.optout) {
            return Err("OPTIN and OPTOUT are not compatible with BCAST".into());
        }
        if options.optin && options.optout {
            return Err("You can't specify both OPTIN mode and OPTOUT mode".into());
        }
        if let Some(old) = t.clients.get(&id) {
            if (options.optin && old.options.optout) || (options.optout && old.options.optin) {
                return Err("You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.".into());
            }
        }
        if options.bcast {
            let existing = t.clients.get(&id).map(|c| &c.prefixes);
            check_prefixes(existing, &options.prefixes)?;
        }
        let mut client = t.clients.remove(&id).unwrap_or_else(|| {
            self.clients.fetch_add(1, Ordering::AcqRel);
            Client { options: Options::default(), broken_redirect: false, prefixes: BTreeSet::new() }
        });
        if options.bcast {
            let wanted: Vec<Bytes> =
                if options.prefixes.is_empty() { vec![Bytes::new()] } else { options.prefixes.clone() };
            for p in wanted {
                t.prefixes.entry(p.clone()).or_default().insert(id);
                client.prefixes.insert(p);
            }
        }
        client.broken_redirect = false;
        client.options = Options { prefixes: Vec::new(), ..options };
        t.clients.insert(id, client);
        Ok(())
    }

    /// `CLIENT TRACKING OFF` (and a closed connection). Its remembered keys are left in the
    /// table and dropped lazily, as in Redis (an id that no longer tracks is skipped) — until
    /// the last tracking client leaves: then nobody can be told anything and the table empties
    /// (so an idle table never outlives its clients, and writers skip tracking entirely).
    pub fn disable(&self, id: u64) {
        let mut t = self.lock();
        let Some(client) = t.clients.remove(&id) else { return };
        if self.clients.fetch_sub(1, Ordering::AcqRel) == 1 {
            t.keys.clear();
            t.items = 0;
        }
        for p in &client.prefixes {
            if let Some(ids) = t.prefixes.get_mut(p) {
                ids.remove(&id);
                if ids.is_empty() {
                    t.prefixes.remove(p);
                }
            }
        }
    }

    /// `CLIENT TRACKINGINFO` / `GETREDIR`: None if `id` does not track.
    pub fn info(&self, id: u64) -> Option<Info> {
        let t = self.lock();
        let c = t.clients.get(&id)?;
        let options = Options { prefixes: c.prefixes.iter().cloned().collect(), ..c.options.clone() };
        Some(Info { options, broken_redirect: c.broken_redirect })
    }

    /// After a read-only command of client `id`: remember the keys it read (default mode, with
    /// OPTIN/OPTOUT honoured: `caching` is whether `CLIENT CACHING` preceded), then keep the
    /// table within `max_keys` (0: no bound).
    pub fn remember<'a>(&self, id: u64, keys: impl IntoIterator<Item = &'a [u8]>, caching: bool, max_keys: usize) {
        let mut t = self.lock();
        let Some(c) = t.clients.get(&id) else { return };
        let o = &c.options;
        if o.bcast || (o.optin && !caching) || (o.optout && caching) {
            return;
        }
        let mut added = 0;
        for key in keys {
            let ids = t.keys.entry(Bytes::copy_from_slice(key)).or_default();
            added += usize::from(ids.insert(id));
        }
        t.items += added;
        Self::bound(&mut t, max_keys);
    }

    /// Forgets keys (each with an invalidation to its clients) until at most `max_keys` are
    /// remembered (0: no bound). Called after each remembering command and by the server's
    /// periodic tick, so a lowered `tracking-table-max-keys` takes effect by itself.
    pub fn limit(&self, max_keys: usize) {
        if !self.active() {
            return;
        }
        Self::bound(&mut self.lock(), max_keys);
    }

    fn bound(t: &mut Table, max_keys: usize) {
        if max_keys == 0 || t.keys.len() <= max_keys {
            return;
        }
        let excess = t.keys.len() - max_keys;
        // HashMap order is arbitrary: in effect Redis's random walk.
        let victims: Vec<Bytes> = t.keys.keys().take(excess).cloned().collect();
        for key in victims {
            Self::invalidate_key(t, &key, 0);
        }
    }

    /// What `batch` writes that tracking clients may care about (None while nobody tracks):
    /// metadata records (`M` + database + key) are the keys, and a range delete over them is a
    /// flush. Taken before the batch is committed, handed to [`Tracking::invalidate`] after.
    pub fn touched(&self, batch: &lsm::WriteBatch) -> Option<Touched> {
        if !self.active() {
            return None;
        }
        let mut touched = Touched::default();
        for entry in batch.iter().flatten() {
            match entry.kind {
                ValueKind::RangeDelete => touched.flushed |= entry.key < &b"N"[..] && entry.value > &b"M"[..],
                _ if entry.key.len() >= 3 && entry.key[0] == b'M' => {
                    touched.keys.push(Bytes::copy_from_slice(&entry.key[3..]))
                }
                _ => {}
            }
        }
        // Once each, in the order written (Redis invalidates in the order a command writes).
        let mut seen = HashSet::new();
        touched.keys.retain(|k| seen.insert(k.clone()));
        Some(touched)
    }

    /// A batch client `origin` (0: the server itself — expiry, replication) committed wrote
    /// `touched`: send the invalidations.
    pub fn invalidate(&self, touched: Option<Touched>, origin: u64) {
        let Some(touched) = touched else { return };
        let mut t = self.lock();
        if touched.flushed {
            Self::flush(&mut t);
        }
        for key in &touched.keys {
            Self::invalidate_key(&mut t, key, origin);
        }
        Self::broadcast(&mut t, &touched.keys, origin);
    }

    /// Default mode: tell the clients that read `key` and forget it.
    fn invalidate_key(t: &mut Table, key: &[u8], origin: u64) {
        let Some(ids) = t.keys.remove(key) else { return };
        t.items -= ids.len();
        for id in ids {
            let Some(c) = t.clients.get(&id) else { continue };
            if c.options.bcast || (c.options.noloop && id == origin) {
                continue;
            }
            Self::send(t, id, Payload::Keys(vec![Bytes::copy_from_slice(key)]));
        }
    }

    /// BCAST: one message per prefix with the written keys under it, to each of its clients.
    fn broadcast(t: &mut Table, keys: &[Bytes], origin: u64) {
        if t.prefixes.is_empty() {
            return;
        }
        let mut messages: Vec<(u64, Vec<Bytes>)> = Vec::new();
        for (prefix, ids) in &t.prefixes {
            let under: Vec<&Bytes> = keys.iter().filter(|k| k.starts_with(prefix)).collect();
            if under.is_empty() {
                continue;
            }
            for &id in ids {
                // NOLOOP: this batch is all one client's, so its own keys are all of them.
                if t.clients.get(&id).is_some_and(|c| c.options.noloop) && id == origin {
                    continue;
                }
                messages.push((id, under.iter().map(|k| (*k).clone()).collect()));
            }
        }
        for (id, keys) in messages {
            Self::send(t, id, Payload::Keys(keys));
        }
    }

    /// FLUSHDB/FLUSHALL: every tracking client hears "all keys"; the table empties.
    fn flush(t: &mut Table) {
        let ids: Vec<u64> = t.clients.keys().copied().collect();
        for id in ids {
            Self::send(t, id, Payload::All);
        }
        t.keys.clear();
        t.items = 0;
    }

    /// Queues one invalidation for tracking client `id`, where its messages go.
    fn send(t: &mut Table, id: u64, payload: Payload) {
        let Some(c) = t.clients.get_mut(&id) else { return };
        let redirect = c.options.redirect;
        let own = t.inboxes.get(&id).and_then(Weak::upgrade);
        let target = if redirect == 0 { own.clone() } else { t.inboxes.get(&redirect).and_then(Weak::upgrade) };
        let Some(target) = target else {
            if redirect != 0 {
                c.broken_redirect = true;
                if let Some(own) = own.filter(|o| o.handle().resp.load(Ordering::Relaxed) == 3) {
                    let broken =
                        Reply::Push(vec![Reply::bulk(&b"tracking-redir-broken"[..]), Reply::Integer(redirect as i64)]);
                    own.push(broken, Limits::from_config(""));
                }
            }
            return;
        };
        let keys = match payload {
            Payload::Keys(keys) => Reply::Array(keys.into_iter().map(Reply::Bulk).collect()),
            Payload::All => Reply::Null,
        };
        let msg = if target.handle().resp.load(Ordering::Relaxed) == 3 {
            Reply::Push(vec![Reply::bulk(&b"invalidate"[..]), keys])
        } else if redirect != 0 && target.handle().kind() == Kind::PubSub {
            Reply::Push(vec![Reply::bulk(&b"message"[..]), Reply::bulk(&b"__redis__:invalidate"[..]), keys])
        } else {
            // RESP2 has no pushes outside pub/sub: nothing can be sent (as in Redis).
            return;
        };
        target.push(msg, Limits::from_config(""));
    }

    /// INFO: tracking clients, remembered keys, ids stored across them, BCAST prefixes.
    pub fn stats(&self) -> (usize, usize, usize, usize) {
        let t = self.lock();
        (t.clients.len(), t.keys.len(), t.items, t.prefixes.len())
    }
}

/// Redis's prefix collision check: no new prefix may be a prefix of another new one or of one
/// the client already has (either way round).
fn check_prefixes(existing: Option<&BTreeSet<Bytes>>, new: &[Bytes]) -> Result<(), Refusal> {
    let overlap = |a: &[u8], b: &[u8]| {
        let n = a.len().min(b.len());
        a[..n] == b[..n]
    };
    let show = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for (i, p) in new.iter().enumerate() {
        if let Some(old) = existing.and_then(|e| e.iter().find(|o| overlap(o, p))) {
            return Err(format!(
                "Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                show(p),
                show(old)
            ));
        }
        if let Some(other) = new[i + 1..].iter().find(|o| overlap(p, o)) {
            return Err(format!(
                "Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                show(p),
                show(other)
            ));
        }
    }
    Ok(())
}
