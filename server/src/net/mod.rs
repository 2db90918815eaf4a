//! Accepting connections: one tokio task per client, a `maxclients` cap, and a graceful stop
//! (stop accepting, let every connection finish the requests it has read, then return).

mod connection;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::state::ServerState;

/// Serves `listeners` until `shutdown` completes, then waits for open connections to finish
/// what they are doing and close.
pub async fn serve(listeners: Vec<TcpListener>, state: Arc<ServerState>, shutdown: impl Future<Output = ()>) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut accepters = JoinSet::new();
    for listener in listeners {
        let (state, stop_rx) = (Arc::clone(&state), stop_rx.clone());
        accepters.spawn(accept_loop(listener, state, stop_rx));
    }
    shutdown.await;
    tracing::info!(target: "shale::net", "shutting down: no new connections, finishing open ones");
    let _ = stop_tx.send(true);
    while accepters.join_next().await.is_some() {}
}

async fn accept_loop(listener: TcpListener, state: Arc<ServerState>, mut stop: watch::Receiver<bool>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => {
                let (mut socket, peer) = match accepted {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(target: "shale::net", error = %e, "accept failed");
                        continue;
                    }
                };
                let _ = socket.set_nodelay(true);
                let n = state.clients.fetch_add(1, Ordering::AcqRel) + 1;
                state.connections_received.fetch_add(1, Ordering::Relaxed);
                if n > state.config().maxclients as usize {
                    state.clients.fetch_sub(1, Ordering::AcqRel);
                    state.rejected_connections.fetch_add(1, Ordering::Relaxed);
                    let _ = socket.write_all(b"-ERR max number of clients reached\r\n").await;
                    continue;
                }
                tracing::debug!(target: "shale::net", %peer, clients = n, "client connected");
                let (state, stop) = (Arc::clone(&state), stop.clone());
                connections.spawn(async move {
                    connection::handle(socket, Arc::clone(&state), stop).await;
                    state.clients.fetch_sub(1, Ordering::AcqRel);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    while connections.join_next().await.is_some() {}
}
