//! Accepting connections: one tokio task per client, a `maxclients` cap, TLS on the
//! `tls-port` listeners (the handshake runs in the client's task, bounded by [`HANDSHAKE_TIMEOUT`]),
//! listeners moved while the server runs (`CONFIG SET port | bind | tls-port`, through
//! [`ListenerControl`]), and a graceful stop (stop accepting, let every connection finish the
//! requests it has read, then return).

mod connection;
mod query_buffer;
mod round;
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

/// Where one kind of listener (plain or TLS) listens: addresses and port (0: not at all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// The `bind` addresses.
    pub bind: Vec<String>,
    /// The port.
    pub port: u16,
}

/// A request to move one kind of listener (`CONFIG SET port | bind | tls-port`).
struct Rebind {
    tls: bool,
    from: Endpoints,
    to: Endpoints,
    done: std::sync::mpsc::Sender<Result<(), String>>,
}

/// The way `CONFIG SET` reaches the accept loops while [`serve`] runs.
#[derive(Debug, Default)]
pub struct ListenerControl {
    requests: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedSender<Rebind>>>,
}

impl ListenerControl {
    /// Moves the plain (`tls` false) or TLS listeners from `from` to `to`, as Redis's `CONFIG
    /// SET port | bind | tls-port` does: the old sockets are closed (their clients stay
    /// connected), the new ones bound; if one cannot be bound, the old ones are bound again
    /// and the error says why. Blocks until done, so it must not run on a runtime thread
    /// (commands run on executor threads). Without a running server there is nothing to move.
    pub fn rebind(&self, tls: bool, from: &Endpoints, to: &Endpoints) -> Result<(), String> {
        if from == to {
            return Ok(());
        }
        let Some(requests) = self.requests.lock().unwrap_or_else(|e| e.into_inner()).clone() else { return Ok(()) };
        let (done, result) = std::sync::mpsc::channel();
        let request = Rebind { tls, from: from.clone(), to: to.clone(), done };
        if requests.send(request).is_err() {
            return Err("the server is shutting down".into());
        }
        result.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| Err("the listeners did not answer".into()))
    }

    fn attach(&self, requests: tokio::sync::mpsc::UnboundedSender<Rebind>) {
        *self.requests.lock().unwrap_or_else(|e| e.into_inner()) = Some(requests);
    }

    fn detach(&self) {
        *self.requests.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Binds a listener on each of `at`'s addresses (none for port 0).
pub async fn bind(at: &Endpoints, tls: bool) -> std::io::Result<Vec<Listener>> {
    let mut out = Vec::new();
    if at.port == 0 {
        return Ok(out);
    }
    for addr in &at.bind {
        let socket = TcpListener::bind((addr.as_str(), at.port)).await.map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("Could not create server TCP listening socket {addr}:{}: {e}", at.port),
            )
        })?;
        tracing::info!(target: "shale::net", addr = %socket.local_addr()?, tls, "listening");
        out.push(Listener { socket, tls });
    }
    Ok(out)
}

/// An accept loop's stop handle: `retire` ends it (its clients stay), `closed` says its socket
/// is closed.
struct Running {
    retire: tokio::sync::oneshot::Sender<()>,
    closed: tokio::sync::oneshot::Receiver<()>,
}

/// Serves `listeners` until `shutdown` completes, then waits for open connections to finish
/// what they are doing and close. Meanwhile `CONFIG SET port | bind | tls-port` moves the
/// listeners ([`ListenerControl`]).
pub async fn serve(listeners: Vec<Listener>, state: Arc<ServerState>, shutdown: impl Future<Output = ()>) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let (requests, mut incoming) = tokio::sync::mpsc::unbounded_channel();
    state.listeners.attach(requests);
    let mut accepters = JoinSet::new();
    // The running accept loops: plain ones first, TLS ones second.
    let mut running: [Vec<Running>; 2] = [Vec::new(), Vec::new()];
    let start = |accepters: &mut JoinSet<()>, listener: Listener| -> Running {
        let (retire, retired) = tokio::sync::oneshot::channel();
        let (is_closed, closed) = tokio::sync::oneshot::channel();
        accepters.spawn(accept_loop(listener, Arc::clone(&state), stop_rx.clone(), retired, is_closed));
        Running { retire, closed }
    };
    for listener in listeners {
        let kind = usize::from(listener.tls);
        running[kind].push(start(&mut accepters, listener));
    }
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(request) = incoming.recv() => {
                let Rebind { tls, from, to, done } = request;
                let kind = usize::from(tls);
                // Close the old sockets first: the new addresses may include them.
                for old in running[kind].drain(..) {
                    let _ = old.retire.send(());
                    let _ = old.closed.await;
                }
                let (listeners, result) = match bind(&to, tls).await {
                    Ok(listeners) => (listeners, Ok(())),
                    Err(e) => {
                        tracing::warn!(target: "shale::net", error = %e, tls, "cannot listen where CONFIG SET asked; listening where it did before");
                        let why = if from.bind == to.bind { "Unable to listen on this port" } else { "Failed to bind to specified addresses." };
                        (bind(&from, tls).await.unwrap_or_default(), Err(why.to_string()))
                    }
                };
                for listener in listeners {
                    running[kind].push(start(&mut accepters, listener));
                }
                let _ = done.send(result);
            }
        }
    }
    state.listeners.detach();
    tracing::info!(target: "shale::net", "shutting down: no new connections, finishing open ones");
    let _ = stop_tx.send(true);
    while accepters.join_next().await.is_some() {}
}

async fn accept_loop(
    listener: Listener,
    state: Arc<ServerState>,
    mut stop: watch::Receiver<bool>,
    mut retired: tokio::sync::oneshot::Receiver<()>,
    closed: tokio::sync::oneshot::Sender<()>,
) {
    let mut connections = JoinSet::new();
    let tls = listener.tls;
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = &mut retired => break,
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
                tracing::debug!(target: "shale::net", %peer, clients = n, tls, "client connected");
                let (state, stop) = (Arc::clone(&state), stop.clone());
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
    // The socket closes now; the clients it accepted are served until they leave.
    if let Ok(addr) = listener.socket.local_addr() {
        tracing::info!(target: "shale::net", %addr, tls, "no longer listening");
    }
    drop(listener);
    let _ = closed.send(());
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
