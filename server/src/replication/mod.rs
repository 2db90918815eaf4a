//! Replication by shipping the engine's WAL records.
//!
//! A replica connects to its primary like a client (`AUTH`, `REPLCONF listening-port`), then
//! asks `PSYNC <replid> <offset>`. **Offsets are engine sequence numbers**: a node's
//! `master_repl_offset` is its engine's last sequence number, and the offset a replica asks for
//! is the first sequence it does not have. The primary answers
//!
//! - `+CONTINUE <replid>` when the replica's history is a prefix of its own (same replication
//!   id, or its previous id `replid2` up to `second_repl_offset`) and the WAL from that offset is
//!   still on disk (`repl-backlog-size` decides how much flushed WAL is kept), then streams the
//!   WAL's batches from there;
//! - `+FULLRESYNC <replid> <seq>` otherwise: it writes a checkpoint (its tables, hard-linked),
//!   streams the files, and the replica installs them in place of its data
//!   ([`lsm::Db::install_checkpoint`]); then the WAL stream from `seq + 1`.
//!
//! The replica applies the batches with the primary's sequence numbers
//! ([`lsm::Db::write_replicated`]), so its engine holds, update for update, its primary's:
//! after a restart it asks for its own last sequence + 1, and a chained replica streams its
//! WAL on. Batches already queued behind one another whose numbers follow on are applied as
//! one write ([`lsm::WriteBatch::append_following`]; under load the link brings one batch per
//! client pipeline), so a replica's WAL batches can span several of its primary's. A node
//! resuming from it may then ask for a sequence inside one of them: the feed cuts that batch
//! to start exactly there ([`lsm::WriteBatch::from_sequence`]), and nothing is applied twice.
//! The replica acknowledges with `REPLCONF ACK <seq>` after applying (WAIT, INFO's
//! `offset=`/`lag=`).
//!
//! The replication id and the previous id are kept in [`STATE_FILE`] in the data directory.
//! A promoted replica (`REPLICAOF NO ONE`) takes a new id and keeps its primary's as `replid2`
//! with `second_repl_offset` = its next sequence, so the other replicas, and the old primary
//! once it follows it, continue partially. A node whose history went further under the old
//! id (writes the new primary never saw — say the old primary, killed right after a write it
//! had not shipped yet) is answered `+REWIND <seq>`: it drops its writes after `seq`
//! ([`lsm::Db::rewind_to`], possible while they are not compacted below L0) and asks again,
//! continuing partially; if it cannot, it asks for a full sync. Either way those writes are
//! gone, never mixed into the new primary's history (the log says how many). A primary that
//! restarts after a crash also takes a new id (it may have lost the tail of a WAL its replicas
//! already have) and keeps the old one as `replid2`.
//!
//! Only shale-server replicas can follow (they say `REPLCONF capa shale`; a Redis replica would
//! wait for an RDB file). The frames after PSYNC's answer are described in `wire.rs`.
//!
//! Threads: the link to a primary and each replica's connection are tokio tasks doing network
//! I/O only; applying batches, writing received files, checkpoints and reading the WAL run on
//! a dedicated thread per link ([`primary`], [`replica`]). `REPLICAOF` and the applier share a
//! lock, so a frame is never half-applied when the upstream changes, and none of the old
//! upstream's applies after.

pub mod primary;
pub mod replica;
mod wire;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use bytes::Bytes;

/// The file in the data directory holding the replication ids (text, one `name value` per line).
pub const STATE_FILE: &str = "REPLICATION";

/// An id that means "none" (Redis prints forty zeros).
const NO_ID: &str = "0000000000000000000000000000000000000000";

/// A node's replication identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ids {
    /// The history this node's data belongs to (its own as a primary, its primary's as a replica).
    pub replid: String,
    /// The history it belonged to before (after a promotion or a crash restart).
    pub replid2: String,
    /// First sequence number not shared with `replid2`'s history (0: none).
    pub second_offset: u64,
}

impl Ids {
    fn fresh() -> Ids {
        Ids { replid: new_id(), replid2: NO_ID.into(), second_offset: 0 }
    }

    /// Starts a new history at `next_seq`, remembering the current one as the previous.
    fn shift(&mut self, next_seq: u64) {
        self.replid2 = std::mem::replace(&mut self.replid, new_id());
        self.second_offset = next_seq;
    }

    fn encode(&self) -> String {
        format!("replid {}\nreplid2 {}\nsecond-offset {}\n", self.replid, self.replid2, self.second_offset)
    }

    fn decode(text: &str) -> Option<Ids> {
        let mut ids = Ids { replid: String::new(), replid2: NO_ID.into(), second_offset: 0 };
        for line in text.lines() {
            let (k, v) = line.split_once(' ')?;
            match k {
                "replid" => ids.replid = v.to_string(),
                "replid2" => ids.replid2 = v.to_string(),
                "second-offset" => ids.second_offset = v.parse().ok()?,
                _ => {}
            }
        }
        (ids.replid.len() == 40).then_some(ids)
    }
}

/// 40 random hex characters.
pub fn new_id() -> String {
    (0..40).map(|_| char::from(b"0123456789abcdef"[rand::random::<u8>() as usize % 16])).collect()
}

/// The state of a replica's link to its primary (`ROLE`'s words).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Not connected; will try.
    Connect,
    /// Connecting and handshaking.
    Connecting,
    /// Receiving a full sync.
    Sync,
    /// Streaming.
    Connected,
}

impl LinkState {
    /// The word ROLE uses.
    pub fn word(self) -> &'static str {
        match self {
            LinkState::Connect => "connect",
            LinkState::Connecting => "connecting",
            LinkState::Sync => "sync",
            LinkState::Connected => "connected",
        }
    }
}

/// Where this node replicates from (None: it is a primary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// The primary's host.
    pub host: String,
    /// The primary's port.
    pub port: u16,
}

impl Upstream {
    /// `host port` (the `replicaof` directive); None for "" or `no one`.
    pub fn parse(text: &str) -> Result<Option<Upstream>, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        match words.as_slice() {
            [] => Ok(None),
            [no, one] if no.eq_ignore_ascii_case("no") && one.eq_ignore_ascii_case("one") => Ok(None),
            [host, port] => match port.parse::<u16>() {
                Ok(port) if port > 0 => Ok(Some(Upstream { host: host.to_string(), port })),
                _ => Err("Invalid master port".into()),
            },
            _ => Err("replicaof takes a host and a port".into()),
        }
    }
}

/// A replica's link to its primary, as INFO and ROLE show it.
#[derive(Debug)]
struct Link {
    state: LinkState,
    /// Last time anything arrived from the primary.
    last_io: Option<Instant>,
    /// Since when the link is down (None while up).
    down_since: Option<Instant>,
}

/// One replica connected to this node, as the primary sees it.
#[derive(Debug)]
pub struct ReplicaLink {
    /// Its client id.
    pub client_id: u64,
    /// Its address.
    pub ip: String,
    /// Its `REPLCONF listening-port`.
    pub port: AtomicU16,
    /// The last sequence it acknowledged.
    pub acked: AtomicU64,
    /// When it last acknowledged (coarse ms).
    pub last_ack_ms: AtomicU64,
    /// 0 waiting for the checkpoint, 1 receiving files, 2 online.
    pub phase: AtomicU8,
    /// Extra frames for it (PUBLISH), beside the WAL stream.
    pub extra: tokio::sync::mpsc::UnboundedSender<Bytes>,
    /// Closes its connection.
    pub handle: Arc<crate::services::clients::ClientHandle>,
}

impl ReplicaLink {
    /// Seconds since its last acknowledgement.
    pub fn lag_secs(&self) -> u64 {
        crate::services::clients::coarse_now_ms().saturating_sub(self.last_ack_ms.load(Ordering::Relaxed)) / 1000
    }

    /// Its state as INFO shows it.
    pub fn state_word(&self) -> &'static str {
        match self.phase.load(Ordering::Relaxed) {
            0 => "wait_bgsave",
            1 => "send_bulk",
            _ => "online",
        }
    }
}

/// Replication state of the server.
#[derive(Debug)]
pub struct Replication {
    dir: PathBuf,
    ids: Mutex<Ids>,
    upstream: Mutex<Option<Upstream>>,
    /// True while this node is a replica (read by every write command's gate check).
    is_replica: AtomicBool,
    link: Mutex<Link>,
    /// Bumped when the upstream changes: an older link task sees it and stops.
    generation: AtomicU64,
    /// Replicas connected to this node.
    replicas: Mutex<Vec<Arc<ReplicaLink>>>,
    /// Signalled when a replica acknowledges (WAIT).
    pub acks: tokio::sync::Notify,
    /// The runtime link tasks run on (set when the server starts serving).
    runtime: OnceLock<tokio::runtime::Handle>,
    /// Full syncs served.
    pub sync_full: AtomicU64,
    /// Partial resyncs accepted.
    pub sync_partial_ok: AtomicU64,
    /// Partial resyncs refused (a full sync followed).
    pub sync_partial_err: AtomicU64,
    /// Bytes of the full sync being received (replica).
    pub sync_bytes: AtomicU64,
    /// Held while a received frame is applied, and while the upstream changes.
    apply: Mutex<()>,
    /// The link to the primary, as a client (CLIENT KILL TYPE master closes it).
    master_handle: Mutex<Option<Arc<crate::services::clients::ClientHandle>>>,
    /// `min-replicas-to-write` and `min-replicas-max-lag`, read by every write's gate check
    /// (kept here so writes do not take the configuration lock).
    min_replicas: (AtomicU64, AtomicU64),
}

impl Replication {
    /// The replication state kept in `dir` (the data directory). A primary that did not stop
    /// cleanly starts a new history (see the module docs); `next_seq` is its engine's next
    /// sequence number.
    pub fn open(dir: PathBuf, upstream: Option<Upstream>, next_seq: u64) -> std::io::Result<Replication> {
        let path = dir.join(STATE_FILE);
        let (mut ids, clean) = match std::fs::read_to_string(&path) {
            Ok(text) => match Ids::decode(&text) {
                Some(ids) => (ids, text.lines().any(|l| l == "clean-shutdown yes")),
                None => {
                    tracing::warn!(target: "shale::replication", file = %path.display(), "unreadable replication state; starting a new history");
                    (Ids::fresh(), false)
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Ids::fresh(), true),
            Err(e) => return Err(e),
        };
        if !clean && upstream.is_none() {
            ids.shift(next_seq);
            tracing::info!(target: "shale::replication", replid = %ids.replid, previous = %ids.replid2, "not stopped cleanly: new replication id");
        }
        let r = Replication {
            dir,
            ids: Mutex::new(ids),
            is_replica: AtomicBool::new(upstream.is_some()),
            upstream: Mutex::new(upstream),
            link: Mutex::new(Link { state: LinkState::Connect, last_io: None, down_since: Some(Instant::now()) }),
            generation: AtomicU64::new(0),
            replicas: Mutex::new(Vec::new()),
            acks: tokio::sync::Notify::new(),
            runtime: OnceLock::new(),
            sync_full: AtomicU64::new(0),
            sync_partial_ok: AtomicU64::new(0),
            sync_partial_err: AtomicU64::new(0),
            sync_bytes: AtomicU64::new(0),
            apply: Mutex::new(()),
            master_handle: Mutex::new(None),
            min_replicas: (AtomicU64::new(0), AtomicU64::new(10)),
        };
        r.persist(false)?;
        Ok(r)
    }

    /// Writes the ids (and whether this is a clean shutdown) durably.
    fn persist(&self, clean: bool) -> std::io::Result<()> {
        let mut text = lock(&self.ids).encode();
        text.push_str(if clean { "clean-shutdown yes\n" } else { "clean-shutdown no\n" });
        let tmp = self.dir.join(format!("{STATE_FILE}.tmp"));
        std::fs::write(&tmp, text)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, self.dir.join(STATE_FILE))?;
        std::fs::File::open(&self.dir)?.sync_all()
    }

    /// Records a clean shutdown (the next start keeps the replication id).
    pub fn close(&self) -> std::io::Result<()> {
        self.persist(true)
    }

    /// The current ids.
    pub fn ids(&self) -> Ids {
        lock(&self.ids).clone()
    }

    /// True while this node replicates from a primary.
    pub fn is_replica(&self) -> bool {
        self.is_replica.load(Ordering::Acquire)
    }

    /// The primary this node follows.
    pub fn upstream(&self) -> Option<Upstream> {
        lock(&self.upstream).clone()
    }

    /// The link's state and seconds since the primary was last heard from (replicas).
    pub fn link_status(&self) -> (LinkState, Option<u64>, Option<u64>) {
        let link = lock(&self.link);
        (link.state, link.last_io.map(|t| t.elapsed().as_secs()), link.down_since.map(|t| t.elapsed().as_secs()))
    }

    fn set_link_state(&self, state: LinkState) {
        let mut link = lock(&self.link);
        link.state = state;
        match state {
            LinkState::Connected => link.down_since = None,
            LinkState::Connect | LinkState::Connecting => {
                link.down_since.get_or_insert_with(Instant::now);
            }
            LinkState::Sync => {}
        }
    }

    fn heard_from_primary(&self) {
        lock(&self.link).last_io = Some(Instant::now());
    }

    /// Remembers the runtime link tasks are spawned on (call once the server runs).
    pub fn set_runtime(&self, handle: tokio::runtime::Handle) {
        let _ = self.runtime.set(handle);
    }

    /// The `(replid, offset)` this node asks its primary for: the first sequence it lacks, in
    /// the history its data belongs to (the previous one if nothing was written under the
    /// current id since it began).
    pub fn psync_identity(&self, latest: u64) -> (String, u64) {
        let ids = lock(&self.ids);
        let next = latest + 1;
        if ids.replid2 != NO_ID && ids.second_offset != 0 && next <= ids.second_offset {
            (ids.replid2.clone(), next)
        } else {
            (ids.replid.clone(), next)
        }
    }

    /// Whether a replica asking for `(replid, offset)` shares this node's history up to it:
    /// same id (and not ahead of us), or our previous id no further than where we left it.
    pub fn can_continue(&self, replid: &str, offset: u64, latest: u64) -> bool {
        let ids = lock(&self.ids);
        (replid == ids.replid && offset <= latest + 1)
            || (replid == ids.replid2 && ids.replid2 != NO_ID && offset <= ids.second_offset && offset <= latest + 1)
    }

    /// Where a replica asking for `(replid, offset)` left our history: it followed our previous
    /// id further than we did (writes we never saw). Its data matches ours up to the returned
    /// sequence.
    pub fn diverged_at(&self, replid: &str, offset: u64) -> Option<u64> {
        let ids = lock(&self.ids);
        (replid == ids.replid2 && ids.replid2 != NO_ID && ids.second_offset > 0 && offset > ids.second_offset)
            .then(|| ids.second_offset - 1)
    }

    /// After a full sync: this node's data is now `replid`'s history.
    pub fn adopt(&self, replid: &str) -> std::io::Result<()> {
        *lock(&self.ids) = Ids { replid: replid.to_string(), replid2: NO_ID.into(), second_offset: 0 };
        self.persist(false)
    }

    /// `REPLICAOF host port` (Some) or `REPLICAOF NO ONE` (None). A promotion starts a new
    /// history at the engine's next sequence. Replicas of this node are disconnected (they
    /// reconnect and continue partially where they can). Returns whether anything changed.
    pub fn set_upstream(&self, state: &Arc<crate::state::ServerState>, new: Option<Upstream>) -> std::io::Result<bool> {
        // No received frame is half-applied while the upstream changes, and none of the old
        // upstream's applies afterwards (the applier re-checks the generation under this lock).
        let _applying = self.apply_lock();
        let mut upstream = lock(&self.upstream);
        if *upstream == new {
            return Ok(false);
        }
        let was_replica = upstream.is_some();
        *upstream = new.clone();
        self.is_replica.store(new.is_some(), Ordering::Release);
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        drop(upstream);
        if let Some(link) = lock(&self.master_handle).take() {
            link.kill();
        }
        if was_replica && new.is_none() {
            let next_seq = state.storage.engine().latest_sequence() + 1;
            lock(&self.ids).shift(next_seq);
            tracing::info!(target: "shale::replication", replid = %lock(&self.ids).replid, from = next_seq, "promoted to primary");
        }
        self.persist(false)?;
        {
            let mut link = lock(&self.link);
            link.state = LinkState::Connect;
            link.down_since = Some(Instant::now());
        }
        self.disconnect_replicas();
        if let Some(up) = new {
            self.start_link(state, up, generation);
        }
        Ok(true)
    }

    /// The lock a received frame is applied under.
    fn apply_lock(&self) -> MutexGuard<'_, ()> {
        lock(&self.apply)
    }

    fn set_master_handle(&self, handle: Arc<crate::services::clients::ClientHandle>) {
        *lock(&self.master_handle) = Some(handle);
    }

    /// Forgets the link to the primary if it is client `id` (not a newer link's).
    fn clear_master_handle(&self, id: u64) {
        let mut handle = lock(&self.master_handle);
        if handle.as_ref().is_some_and(|h| h.id == id) {
            *handle = None;
        }
    }

    /// After `+CONTINUE <primary>` to our `PSYNC <asked> <next_seq>`: our data is now the
    /// primary's history; if its id is not the one we asked with, its history continues
    /// `asked`'s from `next_seq` (PSYNC2), which we remember as our previous id.
    fn continue_as(&self, asked: &str, primary: &str, next_seq: u64) -> std::io::Result<()> {
        {
            let mut ids = lock(&self.ids);
            if ids.replid == primary {
                return Ok(());
            }
            if primary != asked {
                ids.replid2 = asked.to_string();
                ids.second_offset = next_seq;
            }
            ids.replid = primary.to_string();
        }
        self.persist(false)
    }

    /// Starts the link task to `up` (at startup with `replicaof`, or from REPLICAOF).
    pub fn start_link(&self, state: &Arc<crate::state::ServerState>, up: Upstream, generation: u64) {
        let Some(rt) = self.runtime.get() else { return };
        rt.spawn(replica::run(Arc::clone(state), up, generation));
    }

    /// Starts the link configured at startup (`replicaof`), once the runtime runs.
    pub fn start(&self, state: &Arc<crate::state::ServerState>) {
        if let Some(up) = self.upstream() {
            self.start_link(state, up, self.generation.load(Ordering::Acquire));
        }
    }

    /// True while `generation` is the current upstream's.
    fn current(&self, generation: u64) -> bool {
        self.generation.load(Ordering::Acquire) == generation
    }

    /// Registers a replica's connection.
    pub fn add_replica(&self, link: Arc<ReplicaLink>) {
        lock(&self.replicas).push(link);
    }

    /// Forgets a replica whose connection closed.
    pub fn remove_replica(&self, client_id: u64) {
        lock(&self.replicas).retain(|r| r.client_id != client_id);
        self.acks.notify_waiters();
    }

    /// Closes every replica's connection.
    pub fn disconnect_replicas(&self) {
        for r in lock(&self.replicas).iter() {
            r.handle.kill();
        }
    }

    /// The connected replicas.
    pub fn replicas(&self) -> Vec<Arc<ReplicaLink>> {
        lock(&self.replicas).clone()
    }

    /// Replicas that acknowledged sequence `seq` or later.
    pub fn acked_count(&self, seq: u64) -> usize {
        lock(&self.replicas).iter().filter(|r| r.acked.load(Ordering::Acquire) >= seq).count()
    }

    /// Takes `min-replicas-to-write` and `min-replicas-max-lag` from `cfg` (at startup and on
    /// every configuration change).
    pub fn configure(&self, cfg: &crate::config::Config) {
        let num = |k: &str| cfg.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        self.min_replicas.0.store(num("min-replicas-to-write"), Ordering::Relaxed);
        self.min_replicas.1.store(num("min-replicas-max-lag"), Ordering::Relaxed);
    }

    /// True if `min-replicas-to-write` is set and fewer online replicas acknowledged within
    /// `min-replicas-max-lag` seconds: writes are refused.
    pub fn too_few_replicas(&self) -> bool {
        let wanted = self.min_replicas.0.load(Ordering::Relaxed);
        if wanted == 0 {
            return false;
        }
        let max_lag = self.min_replicas.1.load(Ordering::Relaxed);
        let good = lock(&self.replicas)
            .iter()
            .filter(|r| r.phase.load(Ordering::Relaxed) == 2 && r.lag_secs() <= max_lag)
            .count();
        (good as u64) < wanted
    }

    /// Sends a PUBLISH to every replica (they deliver it to their own subscribers).
    pub fn propagate_publish(&self, channel: &Bytes, message: &Bytes) {
        let replicas = lock(&self.replicas);
        if replicas.is_empty() {
            return;
        }
        let frame = wire::publish(channel, message);
        for r in replicas.iter() {
            let _ = r.extra.send(frame.clone());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_shift_keeps_the_old_history() {
        let mut ids = Ids::fresh();
        assert_eq!(Ids::decode(&ids.encode()), Some(ids.clone()));
        let old = ids.replid.clone();
        ids.shift(42);
        assert_eq!((ids.replid2.as_str(), ids.second_offset), (old.as_str(), 42));
        assert_ne!(ids.replid, old);
        assert_eq!(Ids::decode("replid short\n"), None);
    }

    #[test]
    fn continue_only_within_a_shared_history() {
        let dir = tempfile::tempdir().unwrap();
        let r = Replication::open(dir.path().to_path_buf(), None, 1).unwrap();
        let ids = r.ids();
        assert!(r.can_continue(&ids.replid, 11, 10));
        assert!(!r.can_continue(&ids.replid, 12, 10), "a replica ahead of us has writes we never saw");
        assert!(!r.can_continue(&new_id(), 1, 10));
        lock(&r.ids).shift(8);
        assert!(r.can_continue(&ids.replid, 8, 10), "the previous history up to where it ended");
        assert!(!r.can_continue(&ids.replid, 9, 10), "diverged after the promotion point");
        // A node with nothing written under its new id asks in its previous history.
        assert_eq!(r.psync_identity(7), (ids.replid.clone(), 8));
        assert_eq!(r.psync_identity(8).0, r.ids().replid);
    }

    #[test]
    fn a_crashed_primary_takes_a_new_id_and_a_clean_one_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let first = Replication::open(dir.path().to_path_buf(), None, 1).unwrap().ids();
        let after_crash = Replication::open(dir.path().to_path_buf(), None, 50).unwrap();
        let ids = after_crash.ids();
        assert_eq!((ids.replid2.as_str(), ids.second_offset), (first.replid.as_str(), 50));
        after_crash.close().unwrap();
        assert_eq!(Replication::open(dir.path().to_path_buf(), None, 50).unwrap().ids(), ids);
        // A replica keeps its primary's id whatever happened.
        let up = Some(Upstream { host: "127.0.0.1".into(), port: 1 });
        let r = Replication::open(dir.path().to_path_buf(), up, 60).unwrap();
        assert_eq!(r.ids(), ids);
    }
}
