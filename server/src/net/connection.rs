//! One client: read, parse every complete request in the buffer, run them in order, write all
//! their replies with one write (pipelining), repeat. The loop also honours `CLIENT PAUSE`,
//! `CLIENT REPLY`, `CLIENT KILL`, the idle `timeout` and a server shutdown.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::commands::{dispatch, lookup, Session, WriteCoalescer};
use crate::resp::{parse_request, Limits, Reply};
use crate::state::ServerState;

pub(super) async fn handle(mut socket: TcpStream, state: Arc<ServerState>, mut stop: watch::Receiver<bool>) {
    let addr = socket.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let laddr = socket.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let mut session = Session::connected(Arc::clone(&state), addr, laddr);
    let handle = Arc::clone(&session.handle);
    let mut input = BytesMut::with_capacity(16 * 1024);
    let mut output = BytesMut::with_capacity(16 * 1024);
    let mut coalescer = WriteCoalescer::default();
    loop {
        let (limits, query_limit, timeout, fsync_always) = {
            let cfg = state.config();
            let limits = Limits {
                max_bulk_len: usize::try_from(cfg.proto_max_bulk_len).unwrap_or(usize::MAX),
                ..Limits::default()
            };
            let fsync_always = cfg.appendfsync == crate::config::AppendFsync::Always;
            (limits, usize::try_from(cfg.client_query_buffer_limit).unwrap_or(usize::MAX), cfg.timeout, fsync_always)
        };
        // Run every complete request already buffered.
        let mut close = false;
        loop {
            if handle.killed.load(std::sync::atomic::Ordering::Acquire) {
                close = true;
                break;
            }
            match parse_request(&mut input, &limits) {
                Ok(Some(args)) if args.is_empty() => continue,
                Ok(Some(args)) => {
                    if let Some(spec) = lookup(&args[0]).filter(|c| c.name != "client") {
                        let is_write = spec.flags.contains(&"write");
                        while let Some(wait) = state.pause_remaining(is_write) {
                            // Replies already produced go out before the client waits.
                            coalescer.flush(&session, &mut output).await;
                            if !output.is_empty() && socket.write_all(&output).await.is_err() {
                                return;
                            }
                            output.clear();
                            tokio::time::sleep(wait.min(Duration::from_millis(50))).await;
                        }
                    }
                    if !fsync_always && coalescer.try_defer(&mut session, &args) {
                        if coalescer.is_full() {
                            coalescer.flush(&session, &mut output).await;
                        }
                        continue;
                    }
                    coalescer.flush(&session, &mut output).await;
                    // Under `appendfsync always` a write waits for an fsync: let the runtime move
                    // other connections off this worker meanwhile.
                    let reply = if fsync_always && lookup(&args[0]).is_some_and(|c| c.flags.contains(&"write")) {
                        tokio::task::block_in_place(|| dispatch(&mut session, &args))
                    } else {
                        dispatch(&mut session, &args)
                    };
                    let reply = match session.blocked.take() {
                        Some(req) => {
                            // Replies already produced go out before the client waits.
                            if !output.is_empty() && socket.write_all(&output).await.is_err() {
                                return;
                            }
                            output.clear();
                            match wait_blocked(&mut socket, &mut session, req, &mut input, &mut stop).await {
                                Some(r) => r,
                                None => return,
                            }
                        }
                        None => reply,
                    };
                    if session.take_reply_permission() {
                        reply.encode(session.protocol, &mut output);
                    }
                    if session.closing {
                        close = true;
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    coalescer.flush(&session, &mut output).await;
                    tracing::debug!(target: "shale::net", client = session.id, error = %e, "protocol error; closing");
                    Reply::error(format!("ERR {e}")).encode(session.protocol, &mut output);
                    close = true;
                    break;
                }
            }
        }
        coalescer.flush(&session, &mut output).await;
        if !output.is_empty() {
            // A client that stops reading cannot hold this task forever once it is killed
            // (e.g. a subscriber over its output buffer limit).
            let written = tokio::select! {
                r = socket.write_all(&output) => r.is_ok(),
                _ = handle.kill_signal.notified() => false,
            };
            if !written {
                return;
            }
            output.clear();
        }
        if close || *stop.borrow() {
            let _ = socket.shutdown().await;
            return;
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
        tokio::select! {
            read = socket.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = handle.kill_signal.notified() => {}
            msg = next_message(&mut session.messages) => {
                // Pub/sub messages: this one and whatever else is queued, in one write.
                let mut taken = 0;
                let mut msg = msg;
                while let Some(m) = msg {
                    taken += crate::pubsub::message_size(&m);
                    m.encode(session.protocol, &mut output);
                    msg = session.messages.as_mut().and_then(|rx| rx.try_recv().ok());
                }
                if let Some(sub) = &session.subscriber {
                    sub.written(taken);
                }
            }
            _ = idle => {
                tracing::debug!(target: "shale::net", client = session.id, "idle timeout; closing");
                return;
            }
            _ = stop.changed() => {
                // Shutting down: finish what is already buffered (the loop above), then close.
                if input.is_empty() {
                    return;
                }
            }
        }
    }
}

/// Waits for a blocking command's reply: served by a pusher, the timeout, `CLIENT UNBLOCK`. Input
/// arriving meanwhile is buffered for afterwards. `None` if the connection must close (the
/// client went away, was killed, or the server is stopping).
async fn wait_blocked(
    socket: &mut TcpStream,
    session: &mut Session,
    req: crate::commands::BlockRequest,
    input: &mut BytesMut,
    stop: &mut watch::Receiver<bool>,
) -> Option<Reply> {
    let state = Arc::clone(&session.state);
    if let Some((name, rx)) = req.lock {
        return wait_lock(socket, session, name, rx, req.timeout, input, stop).await;
    }
    let keys = req.keys.clone();
    let (registration, mut rx) =
        state.blocking.block(session.id, session.db, req.keys, req.attempt, req.timeout_reply.clone());
    // An element pushed between the command's own attempt and the registration would otherwise
    // wake nobody: serve our keys once now that we are registered.
    for key in &keys {
        state.blocking.serve(session.db, key);
    }
    let deadline = req.timeout.map(|t| tokio::time::Instant::now() + t);
    let handle = Arc::clone(&session.handle);
    loop {
        let timeout = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
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
                Ok(_) => {}
            },
            _ = handle.kill_signal.notified() => return None,
            _ = stop.changed() => return None,
        }
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
    socket: &mut TcpStream,
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
        let timeout = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
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
                Ok(_) => {}
            },
            _ = handle.kill_signal.notified() => return None,
            _ = stop.changed() => return None,
        }
    }
}
