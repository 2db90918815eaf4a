//! The replica's side: the link to the primary.
//!
//! A tokio task connects (TLS with `tls-replication yes`), authenticates with `masteruser` /
//! `masterauth`, announces its port, asks `PSYNC`, then reads frames and hands them, through a
//! bounded channel, to an applier thread that writes the received checkpoint files, installs
//! them, and applies each WAL batch with the primary's sequence number. The task acknowledges
//! what the applier applied (`REPLCONF ACK`). If the link breaks, it reconnects after a second
//! and asks again from its last applied sequence, until `REPLICAOF` points elsewhere.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, Notify};

use super::wire::{self, Frame};
use super::{LinkState, Upstream};
use crate::resp::{parse_request, Limits};
use crate::services::clients::{ClientHandle, Kind};
use crate::state::ServerState;

/// How long connecting and each handshake reply may take.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Follows `up` until the upstream changes (`generation` is no longer current).
pub(crate) async fn run(state: Arc<ServerState>, up: Upstream, generation: u64) {
    let repl = &state.replication;
    while repl.current(generation) {
        match link_once(&state, &up, generation).await {
            Ok(()) => {}
            Err(why) => {
                tracing::warn!(target: "shale::replication", primary = %format!("{}:{}", up.host, up.port), error = %why, "replication link down; retrying in 1 s")
            }
        }
        if !repl.current(generation) {
            break;
        }
        repl.set_link_state(LinkState::Connect);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn link_once(state: &Arc<ServerState>, up: &Upstream, generation: u64) -> Result<(), String> {
    let repl = &state.replication;
    repl.set_link_state(LinkState::Connecting);
    let tcp = tokio::time::timeout(HANDSHAKE, tokio::net::TcpStream::connect((up.host.as_str(), up.port)))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| format!("connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let local = tcp.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let peer = tcp.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let tls = (state.config().get("tls-replication") == Some("yes"))
        .then(|| crate::net::tls::client_config(&state.config()))
        .transpose()?;
    match tls {
        None => follow(state, generation, tcp, peer, local).await,
        Some(config) => {
            let name = rustls_pki_types::ServerName::try_from(up.host.clone())
                .map_err(|e| format!("primary host {:?} as a TLS name: {e}", up.host))?;
            let stream = tokio::time::timeout(HANDSHAKE, tokio_rustls::TlsConnector::from(config).connect(name, tcp))
                .await
                .map_err(|_| "TLS handshake timed out".to_string())?
                .map_err(|e| format!("TLS handshake: {e}"))?;
            follow(state, generation, stream, peer, local).await
        }
    }
}

/// Handshake, PSYNC, then the stream, over an established connection.
async fn follow<S: AsyncRead + AsyncWrite + Unpin>(
    state: &Arc<ServerState>,
    generation: u64,
    mut sock: S,
    peer: String,
    local: String,
) -> Result<(), String> {
    let repl = &state.replication;
    // A link the upstream has moved away from changes nothing any more.
    let set_state = |s: LinkState| {
        if repl.current(generation) {
            repl.set_link_state(s);
        }
    };
    let mut buf = BytesMut::with_capacity(64 << 10);
    let pong = request(&mut sock, &mut buf, &[b"PING"]).await?;
    if pong.starts_with('-') && !pong.starts_with("-NOAUTH") {
        return Err(format!("the primary answered PING with {pong}"));
    }
    let (user, pass, port, announce_ip) = {
        let cfg = state.config();
        let get = |k: &str| cfg.get(k).unwrap_or_default().to_string();
        let port = match get("replica-announce-port").as_str() {
            "0" | "" => cfg.port.to_string(),
            p => p.to_string(),
        };
        (get("masteruser"), get("masterauth"), port, get("replica-announce-ip"))
    };
    if !pass.is_empty() {
        let mut auth: Vec<&[u8]> = vec![b"AUTH"];
        if !user.is_empty() {
            auth.push(user.as_bytes());
        }
        auth.push(pass.as_bytes());
        let answer = request(&mut sock, &mut buf, &auth).await?;
        if !answer.starts_with("+OK") {
            return Err(format!("the primary refused AUTH: {answer}"));
        }
    }
    // Older or other servers may not know these: their answers do not matter.
    request(&mut sock, &mut buf, &[b"REPLCONF", b"listening-port", port.as_bytes()]).await?;
    if !announce_ip.is_empty() {
        request(&mut sock, &mut buf, &[b"REPLCONF", b"ip-address", announce_ip.as_bytes()]).await?;
    }
    let capa =
        request(&mut sock, &mut buf, &[b"REPLCONF", b"capa", b"eof", b"capa", b"psync2", b"capa", b"shale"]).await?;
    if !capa.starts_with("+OK") {
        return Err(format!("the primary answered REPLCONF capa with {capa}"));
    }
    // PSYNC; after a `+REWIND`, once more (or for a full sync if we could not rewind).
    let mut force_full = false;
    let mut rewound = false;
    let (latest, replid, offset, answer) = loop {
        let latest = state.storage.engine().latest_sequence();
        let (replid, offset) = if force_full { ("?".to_string(), 0) } else { repl.psync_identity(latest) };
        let offset_arg = if force_full { "-1".to_string() } else { offset.to_string() };
        let answer = request(&mut sock, &mut buf, &[b"PSYNC", replid.as_bytes(), offset_arg.as_bytes()]).await?;
        let rewind_to = answer.strip_prefix("+REWIND ").and_then(|s| s.trim().parse::<u64>().ok());
        match rewind_to {
            Some(seq) if !rewound && !force_full => {
                rewound = true;
                force_full = !rewind(state, generation, seq, latest).await?;
            }
            Some(_) => return Err("the primary asked to rewind twice".into()),
            None => break (latest, replid, offset, answer),
        }
    };
    let words: Vec<&str> = answer.split_whitespace().collect();
    let full = match words.as_slice() {
        ["+FULLRESYNC", id, seq] if id.len() == 40 && seq.parse::<u64>().is_ok() => {
            tracing::info!(target: "shale::replication", primary = %peer, sequence = seq, "full resync");
            set_state(LinkState::Sync);
            repl.sync_bytes.store(0, Ordering::Relaxed);
            Some(id.to_string())
        }
        ["+CONTINUE", rest @ ..] => {
            if let Some(id) = rest.first().filter(|id| id.len() == 40) {
                repl.continue_as(&replid, id, offset).map_err(|e| format!("saving the replication id: {e}"))?;
            }
            tracing::info!(target: "shale::replication", primary = %peer, from = offset, "partial resync");
            set_state(LinkState::Connected);
            None
        }
        _ => return Err(format!("the primary answered PSYNC with {answer}")),
    };
    repl.heard_from_primary();

    let handle = Arc::new(ClientHandle::new(state.next_client_id.fetch_add(1, Ordering::Relaxed), peer, local));
    handle.set_kind(Kind::Master);
    state.registry.register(Arc::clone(&handle));
    repl.set_master_handle(Arc::clone(&handle));
    // During a full sync our data is not the primary's yet: acknowledge nothing (0) until the
    // checkpoint is installed, or WAIT could count us for writes we do not have.
    let applied = Arc::new(AtomicU64::new(if full.is_some() { 0 } else { latest }));
    let notify = Arc::new(Notify::new());
    let (tx, rx) = mpsc::channel::<Frame>(64);
    let (done_tx, done_rx) = oneshot::channel();
    {
        let (applier_state, applied, notify) = (Arc::clone(state), Arc::clone(&applied), Arc::clone(&notify));
        let spawned = std::thread::Builder::new().name("shale-repl-apply".into()).spawn(move || {
            let mut applier = Applier { state: applier_state, generation, full, incoming: None, applied, notify };
            let result = applier.run(rx);
            let _ = done_tx.send(result);
        });
        if let Err(e) = spawned {
            state.registry.unregister(handle.id);
            return Err(format!("cannot start the applier thread: {e}"));
        }
    }
    let streamed = stream(state, generation, &mut sock, &mut buf, &handle, tx, &applied, &notify).await;
    state.registry.unregister(handle.id);
    repl.clear_master_handle(handle.id);
    // The applier finishes what it holds before the next link may start.
    let applied_result = done_rx.await.unwrap_or_else(|_| Err("the applier thread died".into()));
    applied_result.and(streamed)
}

/// Drops our writes after `seq`, which the primary never saw (on a blocking thread, under the
/// apply lock). False if they can no longer be dropped (compacted): ask for a full sync.
async fn rewind(state: &Arc<ServerState>, generation: u64, seq: u64, latest: u64) -> Result<bool, String> {
    let st = Arc::clone(state);
    let done = tokio::task::spawn_blocking(move || {
        let _applying = st.replication.apply_lock();
        if !st.replication.current(generation) {
            return Err("the upstream changed".to_string());
        }
        Ok(st.storage.rewind_to(seq).and_then(|()| {
            st.scripting
                .load_saved_functions(st.storage.engine())
                .map_err(|e| lsm::Error::InvalidArgument(e.to_string()))
        }))
    })
    .await
    .map_err(|e| format!("rewind: {e}"))??;
    match done {
        Ok(()) => {
            tracing::warn!(target: "shale::replication", sequence = seq, dropped_sequences = latest.saturating_sub(seq), "dropped writes the new primary never saw; continuing from it");
            Ok(true)
        }
        Err(e) => {
            tracing::warn!(target: "shale::replication", sequence = seq, error = %e, "cannot drop the writes the new primary never saw; asking for a full sync");
            Ok(false)
        }
    }
}

/// Reads frames and acknowledges applied sequences until the link breaks or the upstream changes.
#[allow(clippy::too_many_arguments)]
async fn stream<S: AsyncRead + AsyncWrite + Unpin>(
    state: &ServerState,
    generation: u64,
    sock: &mut S,
    buf: &mut BytesMut,
    handle: &ClientHandle,
    tx: mpsc::Sender<Frame>,
    applied: &AtomicU64,
    notify: &Notify,
) -> Result<(), String> {
    let repl = &state.replication;
    let limits = Limits { max_bulk_len: 1 << 30, ..Limits::default() };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut acked = u64::MAX;
    // The primary sends at least a PING a second; silence this long means the link is dead
    // (a vanished host sends no FIN).
    let timeout = Duration::from_secs(state.config().get("repl-timeout").and_then(|v| v.parse().ok()).unwrap_or(60));
    let mut heard = std::time::Instant::now();
    loop {
        let mut ack_now = false;
        // Frames already buffered (the PSYNC answer may have arrived with some).
        loop {
            let args = match parse_request(buf, &limits) {
                Ok(Some(args)) if args.is_empty() => continue,
                Ok(Some(args)) => args,
                Ok(None) => break,
                Err(e) => return Err(format!("malformed replication stream: {e}")),
            };
            match Frame::parse(args)? {
                Frame::Ping => {}
                Frame::GetAck => ack_now = true,
                frame => {
                    if let Frame::Chunk(c) = &frame {
                        repl.sync_bytes.fetch_add(c.len() as u64, Ordering::Relaxed);
                    }
                    tx.send(frame).await.map_err(|_| "the applier stopped".to_string())?;
                }
            }
        }
        let seq = applied.load(Ordering::Acquire);
        if ack_now || (seq != acked && !tx.is_closed()) {
            sock.write_all(&wire::ack(seq)).await.map_err(|e| format!("write: {e}"))?;
            sock.flush().await.map_err(|e| format!("write: {e}"))?;
            acked = seq;
        }
        if !repl.current(generation) {
            return Ok(());
        }
        tokio::select! {
            read = sock.read_buf(buf) => match read {
                Ok(0) => return Err("the primary closed the connection".into()),
                Err(e) => return Err(format!("read: {e}")),
                Ok(_) => {
                    heard = std::time::Instant::now();
                    repl.heard_from_primary();
                }
            },
            _ = notify.notified() => {}
            _ = tick.tick() => {
                acked = u64::MAX; // acknowledge at least once a second
                if heard.elapsed() > timeout {
                    return Err(format!("nothing from the primary for {} s (repl-timeout)", timeout.as_secs()));
                }
            }
            _ = handle.kill_signal.notified() => return Err("link closed (CLIENT KILL)".into()),
        }
        if tx.is_closed() {
            return Err("the applier stopped".into());
        }
    }
}

/// Sends one command and reads its one-line answer.
async fn request<S: AsyncRead + AsyncWrite + Unpin>(
    sock: &mut S,
    buf: &mut BytesMut,
    parts: &[&[u8]],
) -> Result<String, String> {
    let mut out = BytesMut::new();
    wire::frame(&mut out, parts);
    sock.write_all(&out).await.map_err(|e| format!("write: {e}"))?;
    sock.flush().await.map_err(|e| format!("write: {e}"))?;
    let read_line = async {
        loop {
            if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
                let line = buf.split_to(end + 2);
                return Ok(String::from_utf8_lossy(&line[..end]).into_owned());
            }
            if buf.len() > 64 << 10 {
                return Err("answer line too long".to_string());
            }
            match sock.read_buf(buf).await {
                Ok(0) => return Err("the primary closed the connection".to_string()),
                Err(e) => return Err(format!("read: {e}")),
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(HANDSHAKE, read_line).await.map_err(|_| "the primary did not answer in time".to_string())?
}

/// Batches queued behind one another are merged into writes of about this size.
const MERGED_BYTES: usize = 1 << 20;

/// A replicated batch, checked.
fn decode_batch(payload: Bytes) -> Result<lsm::WriteBatch, String> {
    lsm::WriteBatch::from_bytes(payload.to_vec()).map_err(|e| format!("damaged batch: {e}"))
}

/// Applies what the link receives, on its own thread.
struct Applier {
    state: Arc<ServerState>,
    generation: u64,
    /// The primary's id, during a full sync.
    full: Option<String>,
    /// The checkpoint file being received and the bytes it still lacks.
    incoming: Option<(std::fs::File, u64)>,
    applied: Arc<AtomicU64>,
    notify: Arc<Notify>,
}

impl Applier {
    fn run(&mut self, mut rx: mpsc::Receiver<Frame>) -> Result<(), String> {
        let dir = self.incoming_dir();
        if self.full.is_some() {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let result = (|| {
            // A frame a merge of batches took from the queue and did not use.
            let mut next = None;
            while let Some(frame) = next.take().or_else(|| rx.blocking_recv()) {
                // Under the apply lock: REPLICAOF changes the upstream between frames, never
                // during one, and no frame of an old upstream applies after the change.
                let state = Arc::clone(&self.state);
                let _applying = state.replication.apply_lock();
                if !state.replication.current(self.generation) {
                    return Ok(());
                }
                next = self.apply(frame, &dir, &mut rx)?;
            }
            Ok(())
        })();
        if self.full.is_some() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        result
    }

    fn incoming_dir(&self) -> PathBuf {
        self.state.storage.engine().path().join("replication").join("incoming")
    }

    /// Applies `frame`; a batch takes the batches queued behind it that follow on (see
    /// [`Self::merge_queued`]) and returns the frame that ended the run, to apply next.
    fn apply(
        &mut self,
        frame: Frame,
        dir: &std::path::Path,
        rx: &mut mpsc::Receiver<Frame>,
    ) -> Result<Option<Frame>, String> {
        let io = |e: std::io::Error| format!("receiving the full sync: {e}");
        match frame {
            Frame::File { name, size } => {
                self.finish_file()?;
                if self.full.is_none() {
                    return Err("a checkpoint file outside a full sync".into());
                }
                let file = std::fs::File::create(dir.join(&name)).map_err(io)?;
                self.incoming = Some((file, size));
            }
            Frame::Chunk(bytes) => {
                let Some((file, left)) = self.incoming.as_mut() else {
                    return Err("file data before any FILE frame".into());
                };
                if bytes.len() as u64 > *left {
                    return Err("a checkpoint file longer than announced".into());
                }
                file.write_all(&bytes).map_err(io)?;
                *left -= bytes.len() as u64;
            }
            Frame::Checkpoint(seq) => {
                self.finish_file()?;
                let Some(replid) = self.full.take() else {
                    return Err("a checkpoint outside a full sync".into());
                };
                let repl = &self.state.replication;
                // Our own replicas followed the data being replaced: they must resync too.
                repl.disconnect_replicas();
                let installed =
                    self.state.storage.install_checkpoint(dir).map_err(|e| format!("installing the full sync: {e}"))?;
                if installed != seq {
                    return Err(format!("the checkpoint holds sequence {installed}, announced {seq}"));
                }
                self.reload_functions()?;
                repl.adopt(&replid).map_err(|e| format!("saving the replication id: {e}"))?;
                let _ = std::fs::remove_dir_all(dir);
                repl.set_link_state(LinkState::Connected);
                tracing::info!(target: "shale::replication", sequence = seq, "full sync loaded");
                self.published(seq);
            }
            Frame::Batch(payload) => {
                // The queue is this link's alone: what is merged is the same upstream's.
                let (batch, after) = Self::merge_queued(decode_batch(payload)?, rx)?;
                self.apply_batch(batch)?;
                return Ok(after);
            }
            Frame::Publish(channel, message) => {
                self.state.replication.propagate_publish(&channel, &message);
                let limits = crate::services::pubsub::Limits::from_config(
                    self.state.config().get("client-output-buffer-limit").unwrap_or_default(),
                );
                self.state.pubsub.publish(crate::services::pubsub::Kind::Channel, &channel, &message, limits);
            }
            Frame::Ping | Frame::GetAck => {}
        }
        Ok(None)
    }

    /// `first` with the batches already queued behind it whose sequence numbers follow on,
    /// up to [`MERGED_BYTES`], and the frame that ended the run, if one was taken. Under load
    /// the link delivers one batch per client pipeline (16 SETs at `-P 16`); applied as one
    /// write they pay the commit, the WAL write, the count bookkeeping and the wake-ups once.
    fn merge_queued(
        mut first: lsm::WriteBatch,
        rx: &mut mpsc::Receiver<Frame>,
    ) -> Result<(lsm::WriteBatch, Option<Frame>), String> {
        while first.size_in_bytes() < MERGED_BYTES {
            match rx.try_recv() {
                Ok(Frame::Batch(payload)) => {
                    let batch = decode_batch(payload.clone())?;
                    if !first.append_following(&batch) {
                        return Ok((first, Some(Frame::Batch(payload))));
                    }
                }
                Ok(other) => return Ok((first, Some(other))),
                Err(_) => break,
            }
        }
        Ok((first, None))
    }

    /// Applies one batch (or several merged) with the primary's sequence numbers.
    fn apply_batch(&mut self, batch: lsm::WriteBatch) -> Result<(), String> {
        let (seq, last) = (batch.sequence(), batch.last_sequence().unwrap_or(batch.sequence()));
        let functions = crate::scripting::Scripting::touches_functions(&batch);
        self.state.storage.apply_replicated(seq, batch).map_err(|e| format!("applying sequence {seq}: {e}"))?;
        if functions {
            self.reload_functions()?;
        }
        self.published(last);
        Ok(())
    }

    /// Loads the primary's function libraries from the records just applied.
    fn reload_functions(&self) -> Result<(), String> {
        self.state
            .scripting
            .load_saved_functions(self.state.storage.engine())
            .map_err(|e| format!("loading the primary's function libraries: {e}"))
    }

    fn published(&self, seq: u64) {
        self.applied.store(seq, Ordering::Release);
        self.notify.notify_one();
    }

    /// Completes the file being received: all its bytes, durably.
    fn finish_file(&mut self) -> Result<(), String> {
        if let Some((file, left)) = self.incoming.take() {
            if left != 0 {
                return Err(format!("a checkpoint file ended {left} bytes short"));
            }
            file.sync_all().map_err(|e| format!("receiving the full sync: {e}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::primary::tests::numbered;

    fn batch_frame(b: &lsm::WriteBatch) -> Frame {
        Frame::Batch(Bytes::copy_from_slice(b.as_bytes()))
    }

    #[test]
    fn queued_batches_merge_while_their_numbers_follow_on() {
        let (tx, mut rx) = mpsc::channel(8);
        for b in [numbered(3, &["c"]), numbered(4, &["d", "e"]), numbered(9, &["x"]), numbered(10, &["y"])] {
            tx.try_send(batch_frame(&b)).unwrap();
        }
        let (merged, next) = Applier::merge_queued(numbered(1, &["a", "b"]), &mut rx).unwrap();
        assert_eq!((merged.sequence(), merged.last_sequence()), (1, Some(5)));
        let keys: Vec<_> = merged.iter().map(|e| e.unwrap().key.to_vec()).collect();
        assert_eq!(keys, [b"a", b"b", b"c", b"d", b"e"].map(|k| k.to_vec()));
        // The batch after the gap comes back whole, and the one behind it is still queued.
        let Some(Frame::Batch(p)) = next else { panic!("the batch after the gap was lost") };
        assert_eq!(decode_batch(p).unwrap().sequence(), 9);
        assert!(matches!(rx.try_recv(), Ok(Frame::Batch(_))));

        // Any other frame ends the run and keeps its place.
        tx.try_send(Frame::Ping).unwrap();
        tx.try_send(batch_frame(&numbered(21, &["z"]))).unwrap();
        let (merged, next) = Applier::merge_queued(numbered(20, &["w"]), &mut rx).unwrap();
        assert_eq!(merged.len(), 1);
        assert!(matches!(next, Some(Frame::Ping)));
        // An empty queue ends it too.
        let (merged, next) = Applier::merge_queued(numbered(21, &["z"]), &mut mpsc::channel(1).1).unwrap();
        assert!(merged.len() == 1 && next.is_none());
    }
}
