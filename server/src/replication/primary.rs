//! The primary's side: answering `PSYNC`, then feeding the replica.
//!
//! The PSYNC command (on an executor thread) decides between a partial and a full resync and
//! opens the WAL tail; the connection then becomes a replica link ([`serve`], a tokio task that
//! only moves bytes: frames out, `REPLCONF ACK`s in) fed by a thread of its own ([`feed`]):
//! it writes the checkpoint, reads its files and the WAL, and blocks on the bounded channel
//! to the task when the replica is slower than the primary — never on a runtime worker.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, watch};

use super::wire::{self, frame};
use super::ReplicaLink;
use crate::exec::Session;
use crate::net::Socket;
use crate::resp::{parse_request, Limits};
use crate::state::ServerState;

/// How the replica is brought up to date.
pub enum Plan {
    /// `+CONTINUE`: stream this tail, from this sequence number on.
    Continue(lsm::WalTail, u64),
    /// `+FULLRESYNC`: checkpoint, files, then the tail.
    Full,
    /// `+REWIND <seq>`: the replica's history left ours after `seq`; it drops the rest and asks
    /// again (the connection stays an ordinary client).
    Rewind(u64),
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Plan::Continue(..) => "Continue",
            Plan::Full => "Full",
            Plan::Rewind(_) => "Rewind",
        })
    }
}

/// What the PSYNC command hands to the connection.
#[derive(Debug)]
pub struct Handoff {
    /// Partial or full.
    pub plan: Plan,
    /// The replica's `REPLCONF listening-port`.
    pub port: u16,
    /// The replica's `REPLCONF ip-address`, if it announced one.
    pub ip: Option<String>,
}

/// Answers `PSYNC replid offset` (on an executor thread): a partial resync if the replica's
/// history is ours and the WAL from its offset is still here, a full one otherwise.
pub fn psync(state: &ServerState, replid: &str, offset: i64) -> lsm::Result<Plan> {
    let engine = state.storage.engine();
    let latest = engine.latest_sequence();
    let repl = &state.replication;
    if offset > 0 && repl.can_continue(replid, offset as u64, latest) {
        match engine.updates_since(offset as u64) {
            Ok(tail) => {
                repl.sync_partial_ok.fetch_add(1, Ordering::Relaxed);
                return Ok(Plan::Continue(tail, offset as u64));
            }
            Err(lsm::Error::WalGone(_)) => {
                tracing::info!(target: "shale::replication", offset, "partial resync impossible: that WAL is no longer kept (raise repl-backlog-size)");
            }
            Err(e) => return Err(e),
        }
    }
    if offset > 0 {
        if let Some(seq) = repl.diverged_at(replid, offset as u64) {
            tracing::info!(target: "shale::replication", offset, rewind_to = seq, "the replica has writes this primary never saw: asking it to rewind");
            return Ok(Plan::Rewind(seq));
        }
    }
    if replid != "?" {
        repl.sync_partial_err.fetch_add(1, Ordering::Relaxed);
    }
    repl.sync_full.fetch_add(1, Ordering::Relaxed);
    Ok(Plan::Full)
}

/// Frames waiting for the socket, per replica.
const QUEUE: usize = 16;
/// A WAL frame grows to about this size before it is queued.
const FRAME_BYTES: usize = 256 << 10;

/// Runs a replica's connection after PSYNC until it closes: frames from the feeder go out,
/// acknowledgements come in.
pub(crate) async fn serve<S: Socket>(
    mut socket: S,
    session: Session,
    handoff: Handoff,
    mut input: BytesMut,
    mut stop: watch::Receiver<bool>,
) {
    let state = Arc::clone(&session.state);
    let handle = Arc::clone(&session.handle);
    handle.set_kind(crate::services::clients::Kind::Replica);
    let (extra_tx, mut extra) = mpsc::unbounded_channel();
    let ip = handoff.ip.clone().unwrap_or_else(|| {
        handle.addr.parse::<std::net::SocketAddr>().map(|a| a.ip().to_canonical().to_string()).unwrap_or_default()
    });
    let link = Arc::new(ReplicaLink {
        client_id: session.id,
        ip,
        port: std::sync::atomic::AtomicU16::new(handoff.port),
        acked: std::sync::atomic::AtomicU64::new(0),
        last_ack_ms: std::sync::atomic::AtomicU64::new(crate::services::clients::coarse_now_ms()),
        phase: std::sync::atomic::AtomicU8::new(0),
        extra: extra_tx,
        handle: Arc::clone(&handle),
    });
    state.replication.add_replica(Arc::clone(&link));
    let (tx, mut rx) = mpsc::channel::<Bytes>(QUEUE);
    {
        let (feeder_state, feeder_link) = (Arc::clone(&state), Arc::clone(&link));
        let spawned = std::thread::Builder::new()
            .name("shale-repl-feed".into())
            .spawn(move || feed(&feeder_state, handoff.plan, &feeder_link, &tx));
        if let Err(e) = spawned {
            tracing::error!(target: "shale::replication", error = %e, "cannot start a replica feeder thread");
            state.replication.remove_replica(session.id);
            return;
        }
    }
    tracing::info!(target: "shale::replication", replica = %handle.addr, "replica connected");
    let limits = Limits { max_bulk_len: 1 << 20, ..Limits::default() };
    let mut out = BytesMut::new();
    // A replica acknowledges at least once a second; one silent for repl-timeout is gone.
    let timeout = state.config().get("repl-timeout").and_then(|v| v.parse::<u64>().ok()).unwrap_or(60);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        if handle.killed.load(Ordering::Acquire) {
            break;
        }
        tokio::select! {
            next = rx.recv() => match next {
                Some(bytes) => {
                    out.extend_from_slice(&bytes);
                    while out.len() < (1 << 20) {
                        match rx.try_recv() {
                            Ok(more) => out.extend_from_slice(&more),
                            Err(_) => break,
                        }
                    }
                }
                None => break, // the feeder stopped (it logged why)
            },
            Some(bytes) = extra.recv() => out.extend_from_slice(&bytes),
            read = socket.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => break,
                Ok(_) => loop {
                    match parse_request(&mut input, &limits) {
                        Ok(Some(args)) => acknowledged(&state, &link, &args),
                        Ok(None) => break,
                        Err(e) => {
                            tracing::warn!(target: "shale::replication", replica = %handle.addr, error = %e, "malformed input from a replica; disconnecting");
                            handle.kill();
                            break;
                        }
                    }
                },
            },
            _ = handle.kill_signal.notified() => break,
            _ = stop.changed() => break,
            _ = tick.tick() => {
                if link.lag_secs() > timeout {
                    tracing::warn!(target: "shale::replication", replica = %handle.addr, "no acknowledgement for repl-timeout; disconnecting");
                    break;
                }
            }
        }
        // A replica that stops reading for repl-timeout is dropped, not waited for forever.
        let written =
            tokio::time::timeout(Duration::from_secs(timeout), crate::net::write_out(&mut socket, &mut out, &handle));
        if !matches!(written.await, Ok(true)) {
            break;
        }
    }
    state.replication.remove_replica(session.id);
    tracing::info!(target: "shale::replication", replica = %handle.addr, "replica disconnected");
    drop(session);
}

/// Handles what a replica sends on its link (`REPLCONF ACK <seq>`; anything else is ignored).
fn acknowledged(state: &ServerState, link: &ReplicaLink, args: &[Bytes]) {
    if args.len() >= 3 && args[0].eq_ignore_ascii_case(b"REPLCONF") && args[1].eq_ignore_ascii_case(b"ACK") {
        if let Some(seq) = std::str::from_utf8(&args[2]).ok().and_then(|s| s.parse::<u64>().ok()) {
            link.acked.fetch_max(seq, Ordering::AcqRel);
            link.last_ack_ms.store(crate::services::clients::coarse_now_ms(), Ordering::Relaxed);
            state.replication.acks.notify_waiters();
        }
    }
}

/// The feeder thread: the answer line, the checkpoint's files for a full sync, then the WAL.
fn feed(state: &ServerState, plan: Plan, link: &ReplicaLink, tx: &mpsc::Sender<Bytes>) {
    match run_feed(state, plan, link, tx) {
        Err(Stop::Closed) => {}
        Err(Stop::Failed(why)) => {
            tracing::warn!(target: "shale::replication", replica = %link.handle.addr, error = %why, "replica feed stopped; the replica will resync");
            link.handle.kill();
        }
        Ok(()) => {}
    }
}

enum Stop {
    /// The connection went away.
    Closed,
    Failed(String),
}

impl From<lsm::Error> for Stop {
    fn from(e: lsm::Error) -> Self {
        Stop::Failed(e.to_string())
    }
}

impl From<std::io::Error> for Stop {
    fn from(e: std::io::Error) -> Self {
        Stop::Failed(e.to_string())
    }
}

fn run_feed(state: &ServerState, plan: Plan, link: &ReplicaLink, tx: &mpsc::Sender<Bytes>) -> Result<(), Stop> {
    let send = |b: Bytes| tx.blocking_send(b).map_err(|_| Stop::Closed);
    let engine = state.storage.engine();
    let (mut tail, mut wanted) = match plan {
        Plan::Rewind(_) => return Ok(()), // answered by the PSYNC command itself
        Plan::Continue(tail, from) => {
            let replid = state.replication.ids().replid;
            send(Bytes::from(format!("+CONTINUE {replid}\r\n")))?;
            link.phase.store(2, Ordering::Relaxed);
            (tail, from)
        }
        Plan::Full => {
            let dir = engine.path().join("replication").join(format!("checkpoint-{}", link.client_id));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.parent().unwrap_or(&dir))?;
            let seq = engine.checkpoint(&dir)?;
            // Opened at once: the WAL after the checkpoint is read as the files go out.
            let tail = engine.updates_since(seq + 1);
            let replid = state.replication.ids().replid;
            tracing::info!(target: "shale::replication", replica = %link.handle.addr, sequence = seq, "full resync: sending a checkpoint");
            let sent = send(Bytes::from(format!("+FULLRESYNC {replid} {seq}\r\n"))).and_then(|()| {
                link.phase.store(1, Ordering::Relaxed);
                let rate = state.config().get("full-sync-rate-limit").and_then(|v| v.parse().ok()).unwrap_or(0);
                send_files(&dir, rate, &send)
            });
            let _ = std::fs::remove_dir_all(&dir);
            sent?;
            let mut out = BytesMut::new();
            frame(&mut out, &[b"CHECKPOINT", seq.to_string().as_bytes()]);
            send(out.freeze())?;
            link.phase.store(2, Ordering::Relaxed);
            (tail?, seq + 1)
        }
    };
    loop {
        let mut out = BytesMut::new();
        match tail.next_timeout(Duration::from_secs(1))? {
            None => frame(&mut out, &[b"PING"]),
            Some((_, batch)) => {
                push_batch(&mut out, &batch, &mut wanted);
                while out.len() < FRAME_BYTES {
                    match tail.try_next()? {
                        Some((_, batch)) => push_batch(&mut out, &batch, &mut wanted),
                        None => break,
                    }
                }
            }
        }
        send(out.freeze())?;
    }
}

/// Frames the updates of `batch` numbered `wanted` and after, and moves `wanted` past them. A
/// WAL batch can start before the replica's resume point: a replica applies several batches of
/// its primary as one write, so after it is promoted its WAL batches span several of the old
/// primary's, at whose ends the other replicas stopped.
fn push_batch(out: &mut BytesMut, batch: &lsm::WriteBatch, wanted: &mut u64) {
    let Some(last) = batch.last_sequence() else { return };
    if batch.sequence() >= *wanted {
        frame(out, &[b"BATCH", batch.as_bytes()]);
    } else if let Some(cut) = batch.from_sequence(*wanted) {
        frame(out, &[b"BATCH", cut.as_bytes()]);
    } else {
        return;
    }
    *wanted = last + 1;
}

/// Sends every file of the checkpoint in `dir`: tables first, `CURRENT` last; at most `rate`
/// bytes a second if it is not 0 (`full-sync-rate-limit`, so a full sync leaves the primary's
/// disk and CPU to its clients).
fn send_files(dir: &std::path::Path, rate: u64, send: &impl Fn(Bytes) -> Result<(), Stop>) -> Result<(), Stop> {
    let started = std::time::Instant::now();
    let mut sent = 0u64;
    use std::io::Read;
    let mut files: Vec<(u8, String)> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .map(|name| {
            (
                if name == "CURRENT" {
                    2
                } else if name.starts_with("MANIFEST") {
                    1
                } else {
                    0
                },
                name,
            )
        })
        .collect();
    files.sort();
    for (_, name) in files {
        let path = dir.join(&name);
        let mut file = std::fs::File::open(&path)?;
        let size = file.metadata()?.len();
        let mut out = BytesMut::new();
        frame(&mut out, &[b"FILE", name.as_bytes(), size.to_string().as_bytes()]);
        send(out.freeze())?;
        let mut left = size;
        let mut buf = vec![0u8; wire::CHUNK];
        while left > 0 {
            let n = (left as usize).min(wire::CHUNK);
            file.read_exact(&mut buf[..n])?;
            let mut out = BytesMut::with_capacity(n + 32);
            frame(&mut out, &[b"CHUNK", &buf[..n]]);
            send(out.freeze())?;
            left -= n as u64;
            sent += n as u64;
            if rate > 0 {
                let due = Duration::from_secs_f64(sent as f64 / rate as f64);
                if let Some(early) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(early);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::replication::wire::Frame;

    /// A batch of `keys` whose first update is numbered `seq`.
    pub(crate) fn numbered(seq: u64, keys: &[&str]) -> lsm::WriteBatch {
        let mut b = lsm::WriteBatch::new();
        for k in keys {
            b.put(k, "v");
        }
        let mut raw = b.as_bytes().to_vec();
        raw[..8].copy_from_slice(&seq.to_le_bytes());
        lsm::WriteBatch::from_bytes(raw).unwrap()
    }

    fn sent(out: &mut BytesMut) -> Vec<lsm::WriteBatch> {
        let mut batches = Vec::new();
        while let Some(args) = parse_request(out, &Limits::default()).unwrap() {
            let Frame::Batch(payload) = Frame::parse(args).unwrap() else { panic!("not a batch") };
            batches.push(lsm::WriteBatch::from_bytes(payload.to_vec()).unwrap());
        }
        batches
    }

    #[test]
    fn the_feed_starts_exactly_at_the_wanted_sequence_number() {
        let mut out = BytesMut::new();
        let mut wanted = 12;
        push_batch(&mut out, &numbered(7, &["a", "b"]), &mut wanted); // all before: skipped
        push_batch(&mut out, &lsm::WriteBatch::new(), &mut wanted); // empty: skipped
        push_batch(&mut out, &numbered(10, &["c", "d", "e"]), &mut wanted); // straddles: cut
        push_batch(&mut out, &numbered(13, &["f", "g"]), &mut wanted);
        assert_eq!(wanted, 15);
        let batches = sent(&mut out);
        let keys = |b: &lsm::WriteBatch| b.iter().map(|e| e.unwrap().key.to_vec()).collect::<Vec<_>>();
        assert_eq!(batches.len(), 2);
        assert_eq!((batches[0].sequence(), keys(&batches[0])), (12, vec![b"e".to_vec()]));
        assert_eq!((batches[1].sequence(), keys(&batches[1])), (13, vec![b"f".to_vec(), b"g".to_vec()]));
    }
}
