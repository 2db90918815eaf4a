//! Publish/subscribe: channels, patterns (Redis globs) and shard channels.
//!
//! A subscribed connection owns an unbounded queue the hub pushes messages into; the connection
//! writes them out as it can. What a subscriber has queued but not yet written is counted, and a
//! subscriber over the `client-output-buffer-limit pubsub` hard limit (or over the soft limit
//! for longer than its seconds) is disconnected, so a slow reader cannot grow the server's memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::glob;
use crate::resp::Reply;
use crate::services::clients::ClientHandle;

/// One subscribed connection as the hub sees it.
#[derive(Debug)]
pub struct Subscriber {
    tx: mpsc::UnboundedSender<Reply>,
    /// Bytes queued and not yet written.
    pub pending: AtomicUsize,
    /// Since when the soft limit has been exceeded (ms since the epoch; 0: it is not).
    soft_since: AtomicU64,
    handle: Arc<ClientHandle>,
}

impl Subscriber {
    /// A subscriber delivering into `tx` for the connection `handle`.
    pub fn new(tx: mpsc::UnboundedSender<Reply>, handle: Arc<ClientHandle>) -> Self {
        Subscriber { tx, pending: AtomicUsize::new(0), soft_since: AtomicU64::new(0), handle }
    }

    /// The connection this subscriber delivers to.
    pub fn handle(&self) -> &ClientHandle {
        &self.handle
    }

    /// Queues `msg` (a push, or a pub/sub message) for the connection, within `limits`;
    /// false if it could not be (the connection is gone, or went over the limits and is
    /// being closed).
    pub fn push(&self, msg: Reply, limits: Limits) -> bool {
        let size = message_size(&msg);
        deliver(self, msg, size, limits)
    }

    /// The connection wrote `n` bytes of queued messages.
    pub fn written(&self, n: usize) {
        self.pending.fetch_sub(n.min(self.pending.load(Ordering::Relaxed)), Ordering::Relaxed);
    }
}

/// The output-buffer limits for subscribers (`client-output-buffer-limit pubsub hard soft secs`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Disconnect at once beyond this many bytes (0: no limit).
    pub hard: usize,
    /// Disconnect beyond this many bytes held for `soft_secs` (0: no limit).
    pub soft: usize,
    /// Seconds the soft limit may be exceeded.
    pub soft_secs: u64,
}

impl Limits {
    /// Parses the `pubsub` class out of a `client-output-buffer-limit` value.
    pub fn from_config(value: &str) -> Limits {
        Limits::of_class(value, "pubsub", Limits { hard: 32 << 20, soft: 8 << 20, soft_secs: 60 })
    }

    /// Limits for MONITOR clients: Redis gives them the `normal` class, unlimited by default;
    /// Shale then caps them at the `replica` class's default (256 MB hard, 64 MB for 60 s), so a
    /// monitor that stops reading cannot grow the server's memory without bound.
    pub fn for_monitors(value: &str) -> Limits {
        let capped = Limits { hard: 256 << 20, soft: 64 << 20, soft_secs: 60 };
        match Limits::of_class(value, "normal", capped) {
            Limits { hard: 0, soft: 0, .. } => capped,
            set => set,
        }
    }

    /// The limits of `class` in a `client-output-buffer-limit` value (`default` if absent).
    fn of_class(value: &str, wanted: &str, default: Limits) -> Limits {
        let words: Vec<&str> = value.split_whitespace().collect();
        let mut limits = default;
        for w in words.chunks(4) {
            if let [class, hard, soft, secs] = w {
                if *class == wanted {
                    let mem = |v: &str| crate::config::parse_memory(v).unwrap_or(0) as usize;
                    limits = Limits { hard: mem(hard), soft: mem(soft), soft_secs: secs.parse().unwrap_or(0) };
                }
            }
        }
        limits
    }
}

type Subscribers = HashMap<Bytes, HashMap<u64, Arc<Subscriber>>>;

/// Every channel, pattern and shard channel with its subscribers.
#[derive(Debug, Default)]
pub struct Hub {
    channels: Mutex<Subscribers>,
    patterns: Mutex<Subscribers>,
    shard_channels: Mutex<Subscribers>,
    /// MONITOR clients, by client id.
    monitors: Mutex<HashMap<u64, Arc<Subscriber>>>,
    /// How many there are (every command checks this, not the mutex).
    monitor_count: AtomicUsize,
}

/// Which namespace a subscription is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// SUBSCRIBE.
    Channel,
    /// PSUBSCRIBE.
    Pattern,
    /// SSUBSCRIBE.
    Shard,
}

fn lock(m: &Mutex<Subscribers>) -> std::sync::MutexGuard<'_, Subscribers> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Hub {
    fn table(&self, kind: Kind) -> &Mutex<Subscribers> {
        match kind {
            Kind::Channel => &self.channels,
            Kind::Pattern => &self.patterns,
            Kind::Shard => &self.shard_channels,
        }
    }

    /// Makes client `id` a MONITOR client.
    pub fn add_monitor(&self, id: u64, sub: &Arc<Subscriber>) {
        let mut monitors = self.monitors.lock().unwrap_or_else(|e| e.into_inner());
        monitors.insert(id, Arc::clone(sub));
        self.monitor_count.store(monitors.len(), Ordering::Release);
    }

    /// Client `id` no longer monitors (if it did).
    pub fn remove_monitor(&self, id: u64) {
        if self.monitor_count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut monitors = self.monitors.lock().unwrap_or_else(|e| e.into_inner());
        monitors.remove(&id);
        self.monitor_count.store(monitors.len(), Ordering::Release);
    }

    /// True if any client monitors.
    pub fn has_monitors(&self) -> bool {
        self.monitor_count.load(Ordering::Acquire) > 0
    }

    /// Sends `line` (one command, MONITOR's format) to every monitor.
    pub fn feed_monitors(&self, line: &str, limits: Limits) {
        let monitors: Vec<Arc<Subscriber>> =
            self.monitors.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        for m in monitors {
            let msg = Reply::Simple(line.to_string());
            let size = message_size(&msg);
            deliver(&m, msg, size, limits);
        }
    }

    /// Subscribes client `id` to `name`.
    pub fn subscribe(&self, kind: Kind, name: &Bytes, id: u64, sub: &Arc<Subscriber>) {
        lock(self.table(kind)).entry(name.clone()).or_default().insert(id, Arc::clone(sub));
    }

    /// Unsubscribes client `id` from `name`.
    pub fn unsubscribe(&self, kind: Kind, name: &Bytes, id: u64) {
        let mut t = lock(self.table(kind));
        if let Some(subs) = t.get_mut(name) {
            subs.remove(&id);
            if subs.is_empty() {
                t.remove(name);
            }
        }
    }

    /// Delivers `message` on `channel`; returns how many subscriptions received it.
    pub fn publish(&self, kind: Kind, channel: &Bytes, message: &Bytes, limits: Limits) -> usize {
        let mut receivers = 0;
        let (label, table) =
            if kind == Kind::Shard { ("smessage", &self.shard_channels) } else { ("message", &self.channels) };
        let direct: Vec<Arc<Subscriber>> =
            lock(table).get(channel).map(|s| s.values().cloned().collect()).unwrap_or_default();
        for sub in direct {
            let msg = Reply::Push(vec![
                Reply::bulk(label.as_bytes()),
                Reply::Bulk(channel.clone()),
                Reply::Bulk(message.clone()),
            ]);
            let size = message_size(&msg);
            receivers += usize::from(deliver(&sub, msg, size, limits));
        }
        if kind == Kind::Channel {
            let matching: Vec<(Bytes, Arc<Subscriber>)> = lock(&self.patterns)
                .iter()
                .filter(|(p, _)| glob::matches(p, channel, false))
                .flat_map(|(p, subs)| subs.values().map(move |s| (p.clone(), Arc::clone(s))))
                .collect();
            for (pattern, sub) in matching {
                let msg = Reply::Push(vec![
                    Reply::bulk(&b"pmessage"[..]),
                    Reply::Bulk(pattern),
                    Reply::Bulk(channel.clone()),
                    Reply::Bulk(message.clone()),
                ]);
                let size = message_size(&msg);
                receivers += usize::from(deliver(&sub, msg, size, limits));
            }
        }
        receivers
    }

    /// Channels (or shard channels) with at least one subscriber, matching `pattern` if given.
    pub fn channels(&self, kind: Kind, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let mut out: Vec<Bytes> = lock(self.table(kind))
            .keys()
            .filter(|c| pattern.is_none_or(|p| glob::matches(p, c, false)))
            .cloned()
            .collect();
        out.sort();
        out
    }

    /// Subscribers of `name`.
    pub fn count(&self, kind: Kind, name: &Bytes) -> usize {
        lock(self.table(kind)).get(name).map_or(0, HashMap::len)
    }

    /// Every subscription of client `id` (a scan of all channels: for ACL changes, not hot paths).
    pub fn subscriptions_of(&self, id: u64) -> Vec<(Kind, Bytes)> {
        let mut out = Vec::new();
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            let t = lock(self.table(kind));
            out.extend(t.iter().filter(|(_, subs)| subs.contains_key(&id)).map(|(name, _)| (kind, name.clone())));
        }
        out
    }

    /// Distinct patterns subscribed to (PUBSUB NUMPAT).
    pub fn pattern_count(&self) -> usize {
        lock(&self.patterns).len()
    }
}

/// The bytes a message takes in an output buffer (roughly its encoding).
pub fn message_size(msg: &Reply) -> usize {
    match msg {
        Reply::Push(items) | Reply::Array(items) => 8 + items.iter().map(message_size).sum::<usize>(),
        Reply::Bulk(b) => 8 + b.len(),
        Reply::Simple(s) => 8 + s.len(),
        _ => 8,
    }
}

/// Queues `msg` for `sub`, enforcing the output-buffer limits. False if the subscriber is gone.
fn deliver(sub: &Subscriber, msg: Reply, size: usize, limits: Limits) -> bool {
    let pending = sub.pending.fetch_add(size, Ordering::Relaxed) + size;
    let now = crate::storage::now_ms();
    let over_hard = limits.hard > 0 && pending > limits.hard;
    let over_soft = limits.soft > 0 && pending > limits.soft;
    if over_soft {
        let since = sub.soft_since.load(Ordering::Relaxed);
        if since == 0 {
            sub.soft_since.store(now, Ordering::Relaxed);
        }
    } else {
        sub.soft_since.store(0, Ordering::Relaxed);
    }
    let since = sub.soft_since.load(Ordering::Relaxed);
    let soft_expired = over_soft && since != 0 && now.saturating_sub(since) >= limits.soft_secs * 1000;
    if over_hard || soft_expired {
        tracing::warn!(target: "shale::pubsub", client = sub.handle.id, pending, "subscriber over the pubsub output buffer limit; closing it");
        sub.handle.kill();
        return false;
    }
    sub.tx.send(msg).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_from_the_redis_setting() {
        let l = Limits::from_config("normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60");
        assert_eq!((l.hard, l.soft, l.soft_secs), (32 << 20, 8 << 20, 60));
        let l = Limits::from_config("pubsub 1mb 0 0");
        assert_eq!((l.hard, l.soft), (1 << 20, 0));
    }
}
