//! One client's task: read, parse the complete requests in the buffer, run the leading ones
//! that need no waiting here (reads memory answers, with memory-only engine reads; runs of plain
//! SETs, queued with the engine's async commit, which the task awaits) — unless the round is
//! long and other connections wait for this thread ([`super::round`]) —, hand the rest with
//! the session to an executor thread, write the replies with one write (pipelining), repeat. The
//! task never blocks: besides that it only waits — for a commit, the executor, the socket, a
//! blocked command's wake-up, `CLIENT PAUSE`, `CLIENT KILL`, the idle `timeout` or a server
//! shutdown.
//!
//! Backpressure: at most [`MAX_BATCH`] requests are parsed per round, the executor stops once
//! the round's replies pass [`OUTPUT_BOUND`], and the socket is read again only after every
//! reply produced so far is written. A client that pipelines without reading its replies
//! therefore holds at most one bound of replies in this server, however much it sends.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::query_buffer::{self, QueryBuffer};
use super::round;
use crate::commands::flag;
use crate::exec::combine::on_task;
use crate::exec::{run_batch, BatchEnd, BlockRequest, Session};
use crate::resp::{parse_request, Limits, Reply};
use crate::services::announced::Announcement;
use crate::state::ServerState;

/// Most requests parsed from one connection per round.
pub const MAX_BATCH: usize = 1024;
/// Once a round's replies pass this many bytes, they are written before more commands run.
pub const OUTPUT_BOUND: usize = 1 << 20;

/// The client's socket: plain TCP or TLS over it.
pub(crate) trait Socket: AsyncRead + AsyncWrite + Unpin + Send {
    /// The client's address and ours.
    fn addresses(&self) -> (String, String);
}

impl Socket for tokio::net::TcpStream {
    fn addresses(&self) -> (String, String) {
        let addr = self.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        (addr, self.local_addr().map(|a| a.to_string()).unwrap_or_default())
    }
}

impl Socket for tokio_rustls::server::TlsStream<tokio::net::TcpStream> {
    fn addresses(&self) -> (String, String) {
        self.get_ref().0.addresses()
    }
}

pub(super) async fn handle<S: Socket>(mut socket: S, state: Arc<ServerState>, mut stop: watch::Receiver<bool>) {
    let (addr, laddr) = socket.addresses();
    // Boxed: the session travels to an executor thread and back with every round handed off
    // (864 bytes copied at each of half a dozen moves, measured 5 % of an INCR's CPU).
    let mut session = Box::new(Session::connected(Arc::clone(&state), addr, laddr));
    session.open_inbox();
    let handle = Arc::clone(&session.handle);
    let mut input = BytesMut::with_capacity(query_buffer::INITIAL);
    let mut query_buf = QueryBuffer::default();
    let mut output = BytesMut::with_capacity(16 * 1024);
    let mut requests: VecDeque<Vec<Bytes>> = VecDeque::new();
    let mut protocol_error = None;
    // What the connection waits for besides input lives as long as the connection: a round of
    // requests then costs a poll of each, not a registration with the kill signal, the server's
    // stop flag and the timer wheel every time (measurable at one request per round).
    let killed = handle.kill_signal.notified();
    tokio::pin!(killed);
    let mut stop_watch = stop.clone();
    let stopping = async move {
        let _ = stop_watch.changed().await;
    };
    tokio::pin!(stopping);
    let mut stop_seen = false;
    let runtime = tokio::runtime::Handle::current().metrics();
    let mut round_cost = round::RoundCost::default();
    let resize_timer = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(resize_timer);
    let mut resize_armed = false;
    loop {
        // CLIENT KILL (or a subscriber over its output limit): close, whatever is pending.
        if handle.killed.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let (limits, query_limit, timeout) = {
            let cfg = state.config();
            let limits = Limits {
                max_bulk_len: usize::try_from(cfg.proto_max_bulk_len).unwrap_or(usize::MAX),
                unauthenticated: !session.authenticated,
                ..Limits::default()
            };
            (limits, usize::try_from(cfg.client_query_buffer_limit).unwrap_or(usize::MAX), cfg.timeout)
        };
        // Messages queued for this connection (invalidations, pub/sub) go before the replies
        // to requests read after them, as on Redis's single thread.
        take_messages(&mut session, &mut output);
        QueryBuffer::publish(&input, &handle);
        // Parse what is buffered (a protocol error ends parsing: the requests before it still
        // run). `more` stays true if complete requests may be left in `input`.
        let mut more = true;
        // Until it authenticates, a client's requests are parsed one at a time: the limits for
        // unauthenticated clients apply to exactly the requests sent before AUTH succeeded.
        let batch = if session.authenticated { MAX_BATCH } else { 1 };
        while protocol_error.is_none() && requests.len() < batch {
            match parse_request(&mut input, &limits) {
                Ok(Some(args)) if args.is_empty() => continue,
                Ok(Some(args)) => requests.push_back(args),
                Ok(None) => {
                    more = false;
                    break;
                }
                Err(e) => protocol_error = Some(e),
            }
        }
        more &= protocol_error.is_none();
        let mut close = false;
        // Blocking commands are announced before anything of the round runs: another client's
        // write that arrived later cannot overtake them (services/announced.rs).
        let mut announced = announce_blocking(&state, &session, &requests);
        crate::exec::prefetch_keys(&session, &requests);
        // Reads that memory answers and plain SETs run right here, unless the round is long
        // and other connections wait for this thread; the rest go to an executor.
        let left = if round_cost.hand_off_whole(&runtime, &requests) {
            round::Left::Rest
        } else {
            round::run_here(&state, &mut session, &mut requests, &mut output, &mut round_cost).await
        };
        if !requests.is_empty() && left != round::Left::OutputFull {
            round_cost.waited = true;
            // Waits on the task for a queued write (`Some(ticket)`), or for nothing: a hot key's
            // round, found eligible by `joins_hot_key`, which left it unrun.
            let waits_here = match left {
                round::Left::Waits(ticket) if on_task::eligible(&session, &requests) => Some(Some(ticket)),
                round::Left::Hot => Some(None),
                _ => None,
            };
            let round = if let Some(ticket) = waits_here {
                on_task::run(&state, session, std::mem::take(&mut requests), output, ticket, OUTPUT_BOUND).await
            } else if crate::exec::combine::eligible(&session, &requests) {
                crate::exec::combine::run(&state, session, std::mem::take(&mut requests), output).await
            } else {
                execute(&state, session, std::mem::take(&mut requests), output).await
            };
            let (s, rest, out, end) = match round {
                Some(done) => done,
                None => return,
            };
            (session, requests, output) = (s, rest, out);
            match end {
                BatchEnd::Drained | BatchEnd::OutputFull => {}
                BatchEnd::Close => close = true,
                BatchEnd::SendFile(path) => {
                    if write_out(&mut socket, &mut output, &handle).await {
                        send_file(&mut socket, &path).await;
                    }
                    let _ = tokio::fs::remove_file(&path).await;
                    return;
                }
                BatchEnd::Replica(handoff) => {
                    if !write_out(&mut socket, &mut output, &handle).await {
                        return;
                    }
                    return crate::replication::primary::serve(socket, *session, handoff, input, stop).await;
                }
                BatchEnd::Paused(wait) => {
                    // Nothing runs while paused: nobody waits for this round's announcement.
                    announced.take();
                    // Replies already produced go out before the client waits.
                    if !write_out(&mut socket, &mut output, &handle).await {
                        return;
                    }
                    if !wait_for_pause(&session.state, &session.handle.kill_signal, wait, &mut stop).await {
                        return;
                    }
                    continue;
                }
                BatchEnd::Blocked(req) => {
                    if !write_out(&mut socket, &mut output, &handle).await {
                        return;
                    }
                    let registered = announced.take();
                    let reply =
                        match wait_blocked(&mut socket, &mut session, req, registered, &mut input, &mut stop).await {
                            Some(r) => r,
                            None => return,
                        };
                    more = true; // input read while blocked
                                 // An error that ends the wait (a stream or group gone) is the command's failure.
                    if let (Some(id), Reply::Error(why)) = (session.blocked_stats.take(), &reply) {
                        state.command_stats.failed(id, why);
                    }
                    if let Some((args, micros)) = session.blocked_log.take() {
                        crate::exec::log_slow(&session, &args, micros);
                    }
                    if session.take_reply_permission() {
                        reply.encode(session.protocol, &mut output);
                    }
                }
            }
        }
        drop(announced);
        if requests.is_empty() && !close {
            if let Some(e) = protocol_error.take() {
                tracing::debug!(target: "shale::net", client = session.id, error = %e, "protocol error; closing");
                Reply::error(format!("ERR {e}")).encode(session.protocol, &mut output);
                close = true;
            }
        }
        if close {
            // Gone for everyone before its last reply is out (as Redis frees a QUIT client
            // before it reads anyone else's next command): a client that redirected its
            // invalidations here and sees the QUIT reply already finds the redirect broken.
            session.state.storage.tracking.disconnect(session.id);
        }
        // Costly replies wait for the other ready connections' rounds (round::REPLIES_WAIT_AT).
        if !output.is_empty() && round_cost.replies_wait() && round::others_wait(&runtime) {
            tokio::task::yield_now().await;
        }
        if !write_out(&mut socket, &mut output, &handle).await {
            return;
        }
        if close || *stop.borrow() {
            let _ = socket.shutdown().await;
            return;
        }
        query_buf.after_round(&mut input);
        QueryBuffer::publish(&input, &handle);
        if !requests.is_empty() || more {
            continue;
        }
        if input.len() > query_limit {
            tracing::warn!(target: "shale::net", client = session.id, bytes = input.len(), "query buffer limit reached; closing");
            return;
        }
        // Subscribers are exempt from the idle timeout (they wait for messages, as in Redis).
        let timeout = if session.subscribed() { 0 } else { timeout };
        let idle = async {
            if timeout == 0 {
                std::future::pending::<()>().await
            } else {
                tokio::time::sleep(Duration::from_secs(timeout)).await
            }
        };
        // The resize check is armed once and left running while input comes in: firing before
        // the buffer has been idle long enough only re-runs the check, which is harmless.
        let resize_check = query_buf.idle_check_in(&input);
        if let (Some(d), false) = (resize_check, resize_armed) {
            resize_timer.as_mut().reset(tokio::time::Instant::now() + d);
            resize_armed = true;
        }
        let mut resize_due = false;
        tokio::select! {
            read = socket.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => session.arrival = state.blocking.next_arrival(),
            },
            _ = &mut resize_timer, if resize_armed && resize_check.is_some() => {
                resize_armed = false;
                resize_due = true;
            }
            _ = &mut killed => {}
            msg = next_message(&mut session.messages) => {
                // Pub/sub messages: this one and whatever else is queued, in one write.
                if let Some(m) = msg {
                    let taken = crate::services::pubsub::message_size(&m);
                    m.encode(session.protocol, &mut output);
                    if let Some(sub) = &session.subscriber {
                        sub.written(taken);
                    }
                }
            }
            _ = idle => {
                tracing::debug!(target: "shale::net", client = session.id, "idle timeout; closing");
                return;
            }
            _ = &mut stopping, if !stop_seen => {
                // Shutting down: finish what is already buffered (the loop above), then close.
                stop_seen = true;
                if input.is_empty() {
                    return;
                }
            }
        }
        if resize_due {
            query_buf.check(&mut input);
            QueryBuffer::publish(&input, &handle);
        } else {
            query_buf.read(&input);
        }
    }
}

/// Announces the blocking commands among `requests` (their keys, in the session's database).
fn announce_blocking<'a>(
    state: &'a ServerState,
    session: &Session,
    requests: &VecDeque<Vec<Bytes>>,
) -> Option<Announcement<'a>> {
    let mut keys = Vec::new();
    for args in requests {
        // Every blocking command's name starts with B or X: most requests stop here.
        if !matches!(args.first().and_then(|n| n.first()).map(u8::to_ascii_lowercase), Some(b'b' | b'x')) {
            continue;
        }
        let Some(spec) = crate::commands::lookup(&args[0]).filter(|c| c.has(flag::BLOCKING)) else {
            continue;
        };
        if matches!(spec.name, "xread" | "xreadgroup") && !crate::commands::read_may_block(args) {
            continue;
        }
        keys.extend(crate::commands::meta::keys(spec, args).into_iter().map(|k| (session.db, args[k.pos].clone())));
    }
    (!keys.is_empty()).then(|| state.blocking.announced.announce(session.id, session.arrival, keys))
}

/// What an executor round gives back: the session, the requests it did not run, the replies,
/// and why it stopped.
type Round = (Box<Session>, VecDeque<Vec<Bytes>>, BytesMut, BatchEnd);

/// Runs `requests` for `session` on an executor thread. `None` if the job was lost (the pool
/// is gone or the job panicked outside a command, which is logged): the connection closes.
async fn execute(
    state: &ServerState,
    mut session: Box<Session>,
    mut requests: VecDeque<Vec<Bytes>>,
    mut output: BytesMut,
) -> Option<Round> {
    let round = state.executor.run(move || {
        let end = run_batch(&mut session, &mut requests, &mut output, OUTPUT_BOUND);
        (session, requests, output, end)
    });
    round.await.ok()
}

/// Writes and clears `output`; false if the connection is gone. A client that stops reading
/// cannot hold this task forever once it is killed (e.g. a subscriber over its output limit).
pub(crate) async fn write_out(
    socket: &mut impl Socket,
    output: &mut BytesMut,
    handle: &crate::services::clients::ClientHandle,
) -> bool {
    if output.is_empty() {
        return true;
    }
    if handle.killed.load(std::sync::atomic::Ordering::Acquire) {
        return false;
    }
    // The write first: when it completes at once (the usual case), the kill signal is never
    // polled and costs no registration.
    let written = tokio::select! {
        biased;
        r = async { socket.write_all(output).await?; socket.flush().await } => r.is_ok(),
        _ = handle.kill_signal.notified() => false,
    };
    output.clear();
    written
}

/// Waits for a blocking command's reply: served by a pusher, the timeout, `CLIENT UNBLOCK`. Input
/// arriving meanwhile is buffered for afterwards. `None` if the connection must close (the
/// client went away, was killed, or the server is stopping).
/// `announced` (the round's announcement of its blocking commands) is withdrawn once the client
/// is registered as a waiter.
async fn wait_blocked(
    socket: &mut impl Socket,
    session: &mut Session,
    req: BlockRequest,
    mut announced: Option<Announcement<'_>>,
    input: &mut BytesMut,
    stop: &mut watch::Receiver<bool>,
) -> Option<Reply> {
    let state = Arc::clone(&session.state);
    if req.lock.is_some() || req.replicas.is_some() {
        announced.take();
    }
    if let Some((name, rx)) = req.lock {
        return wait_lock(socket, session, name, rx, req.timeout, input, stop).await;
    }
    if let Some((seq, wanted)) = req.replicas {
        return wait_replicas(socket, session, seq, wanted, req.timeout, input, stop).await;
    }
    let keys = req.keys.clone();
    let db = session.db;
    let (registration, mut rx) =
        state.blocking.block(session.id, session.arrival, db, req.keys, req.attempt, req.timeout_reply.clone());
    drop(announced);
    // An element pushed between the command's own attempt and the registration would otherwise
    // wake nobody: serve our keys once now that we are registered (on an executor: it reads).
    let serving = Arc::clone(&state);
    let served = state.executor.run(move || {
        for key in &keys {
            serving.blocking.serve(db, key);
        }
    });
    if served.await.is_err() {
        return None;
    }
    let deadline = req.timeout.map(|t| tokio::time::Instant::now() + t);
    let handle = Arc::clone(&session.handle);
    loop {
        let timeout = until(deadline);
        tokio::select! {
            reply = &mut rx => return Some(reply.unwrap_or(req.timeout_reply)),
            _ = timeout => {
                // Withdraw, unless a pusher is serving us this very moment: then take its answer.
                loop {
                    if registration.cancel() {
                        return Some(req.timeout_reply);
                    }
                    if let Ok(reply) = rx.try_recv() {
                        return Some(reply);
                    }
                    tokio::task::yield_now().await;
                }
            }
            read = socket.read_buf(input) => match read {
                Ok(0) | Err(_) => return None,
                Ok(_) => session.arrival = session.state.blocking.next_arrival(),
            },
            _ = handle.kill_signal.notified() => return None,
            _ = stop.changed() => return None,
        }
    }
}

/// WAIT: until `wanted` replicas acknowledged sequence `seq` or the timeout passes; the reply
/// is how many did. `None` if the connection must close.
async fn wait_replicas(
    socket: &mut impl Socket,
    session: &mut Session,
    seq: u64,
    wanted: usize,
    timeout: Option<Duration>,
    input: &mut BytesMut,
    stop: &mut watch::Receiver<bool>,
) -> Option<Reply> {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let state = Arc::clone(&session.state);
    let handle = Arc::clone(&session.handle);
    loop {
        // Registered before counting, so an acknowledgement in between is not missed.
        let acked = state.replication.acks.notified();
        tokio::pin!(acked);
        acked.as_mut().enable();
        let count = state.replication.acked_count(seq);
        if count >= wanted {
            return Some(Reply::Integer(count as i64));
        }
        let timeout = until(deadline);
        tokio::select! {
            _ = &mut acked => {}
            _ = timeout => return Some(Reply::Integer(state.replication.acked_count(seq) as i64)),
            read = socket.read_buf(input) => match read {
                Ok(0) | Err(_) => return None,
                Ok(_) => session.arrival = session.state.blocking.next_arrival(),
            },
            _ = handle.kill_signal.notified() => return None,
            _ = stop.changed() => return None,
        }
    }
}

/// Holds a client back while `CLIENT PAUSE` lasts (at most `wait`), counted in INFO
/// `blocked_clients` as Redis counts its postponed clients; an unpause or a change of the pause
/// wakes it at once (the caller checks again). False if the connection must close.
async fn wait_for_pause(
    state: &ServerState,
    kill: &tokio::sync::Notify,
    wait: Duration,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let changed = state.pause_changed.notified();
    tokio::pin!(changed);
    // Registered before the check: an unpause between the caller's check and this wait still
    // wakes it.
    changed.as_mut().enable();
    if !state.pause_in_force() {
        return true;
    }
    state.paused_clients.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let go_on = tokio::select! {
        _ = tokio::time::sleep(wait) => true,
        _ = &mut changed => true,
        _ = kill.notified() => false,
        _ = stop.changed() => false,
    };
    state.paused_clients.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    go_on
}

/// Sleeps until `deadline` (forever without one).
async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Encodes every message queued for the connection (pub/sub, MONITOR, tracking) into `output`.
fn take_messages(session: &mut Session, output: &mut BytesMut) {
    let Some(rx) = session.messages.as_mut() else { return };
    let mut taken = 0;
    while let Ok(m) = rx.try_recv() {
        taken += crate::services::pubsub::message_size(&m);
        m.encode(session.protocol, output);
    }
    if let Some(sub) = &session.subscriber {
        sub.written(taken);
    }
}

/// The next pub/sub message for this connection (never, if it has no subscriptions).
async fn next_message(rx: &mut Option<tokio::sync::mpsc::UnboundedReceiver<Reply>>) -> Option<Reply> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Waits for a LOCK to be handed over (or the timeout). `None` if the connection must close.
async fn wait_lock(
    socket: &mut impl Socket,
    session: &mut Session,
    name: bytes::Bytes,
    mut rx: tokio::sync::oneshot::Receiver<()>,
    timeout: Option<Duration>,
    input: &mut BytesMut,
    stop: &mut watch::Receiver<bool>,
) -> Option<Reply> {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let handle = Arc::clone(&session.handle);
    loop {
        let timeout = until(deadline);
        tokio::select! {
            got = &mut rx => return Some(if got.is_ok() { Reply::ok() } else { Reply::error("ERR lock wait cancelled") }),
            _ = timeout => {
                // Handed over just now? Then we hold it after all.
                return Some(if session.state.locks.cancel_wait(&name, session.id) {
                    Reply::ok()
                } else {
                    Reply::error(format!("TIMEOUT lock '{}' was not acquired in time", String::from_utf8_lossy(&name)))
                });
            }
            read = socket.read_buf(input) => match read {
                Ok(0) | Err(_) => return None,
                Ok(_) => session.arrival = session.state.blocking.next_arrival(),
            },
            _ = handle.kill_signal.notified() => return None,
            _ = stop.changed() => return None,
        }
    }
}

/// Sends the file at `path` as one bulk string (`$len`, the bytes, CRLF), streamed from disk.
async fn send_file<S: Socket>(socket: &mut S, path: &std::path::Path) {
    let sent = async {
        let mut file = tokio::fs::File::open(path).await?;
        let len = file.metadata().await?.len();
        // Gone from the directory before the first byte goes out (the open handle still reads
        // it): a client that has the whole snapshot never finds it left behind.
        tokio::fs::remove_file(path).await?;
        socket.write_all(format!("${len}\r\n").as_bytes()).await?;
        let copied = tokio::io::copy(&mut file, socket).await?;
        if copied != len {
            return Err(std::io::Error::other("the snapshot file changed while it was sent"));
        }
        socket.write_all(b"\r\n").await?;
        socket.flush().await
    };
    if let Err(e) = sent.await {
        tracing::warn!(target: "shale::replication", error = %e, "sending an RDB snapshot failed");
    }
}
