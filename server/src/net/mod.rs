//! Accepting connections: one tokio task per client, a `maxclients` cap, TLS on the
//! `tls-port` listeners (the handshake runs in the client's task, bounded by [`HANDSHAKE_TIMEOUT`]),
//! and a graceful stop (stop accepting, let every connection finish the requests it has read,
//! then return).

mod connection;
mod query_buffer;
pub(crate) use connection::{write_out, Socket};
pub mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::state::ServerState;

/// A TLS client that has not finished its handshake by then is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A listening socket and whether its clients speak TLS.
#[derive(Debug)]
pub struct Listener {
    /// The socket.
    pub socket: TcpListener,
    /// Clients must complete a TLS handshake first (`tls-port`).
    pub tls: bool,
}

/// Serves `listeners` until `shutdown` completes, then waits for open connections to finish
/// what they are doing and close.
pub async fn serve(listeners: Vec<Listener>, state: Arc<ServerState>, shutdown: impl Future<Output = ()>) {
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

async fn accept_loop(listener: Listener, state: Arc<ServerState>, mut stop: watch::Receiver<bool>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.socket.accept() => {
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
                if let Some(refusal) = protected_mode_refusal(&state, peer.ip()) {
                    state.clients.fetch_sub(1, Ordering::AcqRel);
                    state.rejected_connections.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(target: "shale::net", %peer, "protected mode: refused a non-loopback client");
                    let _ = socket.write_all(refusal.as_bytes()).await;
                    continue;
                }
                tracing::debug!(target: "shale::net", %peer, clients = n, tls = listener.tls, "client connected");
                let (state, stop, tls) = (Arc::clone(&state), stop.clone(), listener.tls);
                connections.spawn(async move {
                    if tls {
                        serve_tls(socket, peer, Arc::clone(&state), stop).await;
                    } else {
                        connection::handle(socket, Arc::clone(&state), stop).await;
                    }
                    state.clients.fetch_sub(1, Ordering::AcqRel);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    while connections.join_next().await.is_some() {}
}

/// Redis's refusal of a client from outside the loopback interface while `protected-mode` is
/// on and the default user needs no password.
const PROTECTED_MODE_DENIED: &str = "-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

/// The refusal a client from `ip` gets in protected mode, if any.
pub fn protected_mode_refusal(state: &ServerState, ip: std::net::IpAddr) -> Option<&'static str> {
    // An IPv4 client of a dual-stack listener shows as ::ffff:a.b.c.d.
    if ip.to_canonical().is_loopback() || state.config().get("protected-mode") != Some("yes") {
        return None;
    }
    state.acl.default_user().rules().nopass.then_some(PROTECTED_MODE_DENIED)
}

/// Completes a client's TLS handshake with the configuration current now, then serves it. A
/// client that fails the handshake (plaintext, no or an untrusted certificate when one is
/// required, no common protocol or suite) is logged and closed.
async fn serve_tls(socket: TcpStream, peer: SocketAddr, state: Arc<ServerState>, stop: watch::Receiver<bool>) {
    let Some(config) = state.tls_config() else {
        tracing::warn!(target: "shale::net", %peer, "TLS client on a server without TLS settings; closing");
        return;
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
        Ok(Ok(stream)) => connection::handle(stream, state, stop).await,
        Ok(Err(e)) => {
            state.tls_handshake_failures.fetch_add(1, Ordering::Relaxed);
            tracing::info!(target: "shale::net", %peer, error = %e, "TLS handshake failed; closing");
        }
        Err(_) => {
            state.tls_handshake_failures.fetch_add(1, Ordering::Relaxed);
            tracing::info!(target: "shale::net", %peer, "TLS handshake timed out; closing");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn protected_mode_refuses_outside_loopback_without_a_password() {
        let dir = tempfile::tempdir().unwrap();
        let db = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
        let state = ServerState::new(Config::default(), db).unwrap();
        let outside: std::net::IpAddr = "192.0.2.7".parse().unwrap();
        assert!(protected_mode_refusal(&state, outside)
            .is_some_and(|r| r.starts_with("-DENIED Redis is running in protected mode")));
        assert!(protected_mode_refusal(&state, "127.0.0.1".parse().unwrap()).is_none());
        assert!(protected_mode_refusal(&state, "::1".parse().unwrap()).is_none());
        assert!(protected_mode_refusal(&state, "::ffff:127.0.0.1".parse().unwrap()).is_none());
        assert!(protected_mode_refusal(&state, "::ffff:192.0.2.7".parse().unwrap()).is_some());
        state.acl.set_default_password(Some("pw"));
        assert!(protected_mode_refusal(&state, outside).is_none(), "a password lifts it");
        state.acl.set_default_password(None);
        let mut cfg = state.config().clone();
        cfg.apply("protected-mode", &["no".into()]).unwrap();
        state.replace_config(cfg).unwrap();
        assert!(protected_mode_refusal(&state, outside).is_none(), "protected-mode no lifts it");
    }
}
