//! One client: read, parse every complete request in the buffer, run them in order, write all
//! their replies with one write (pipelining), repeat.

use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::commands::{dispatch, Session};
use crate::resp::{parse_request, Limits, Reply};
use crate::state::ServerState;

pub(super) async fn handle(mut socket: TcpStream, state: Arc<ServerState>, mut stop: watch::Receiver<bool>) {
    let limits = Limits {
        max_bulk_len: usize::try_from(state.config.proto_max_bulk_len).unwrap_or(usize::MAX),
        ..Limits::default()
    };
    let query_limit = usize::try_from(state.config.client_query_buffer_limit).unwrap_or(usize::MAX);
    let mut session = Session::new(state);
    let mut input = BytesMut::with_capacity(16 * 1024);
    let mut output = BytesMut::with_capacity(16 * 1024);
    loop {
        // Run every complete request already buffered.
        let mut close = false;
        loop {
            match parse_request(&mut input, &limits) {
                Ok(Some(args)) if args.is_empty() => continue,
                Ok(Some(args)) => {
                    dispatch(&mut session, &args).encode(session.protocol, &mut output);
                    if session.closing {
                        close = true;
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(target: "shale::net", client = session.id, error = %e, "protocol error; closing");
                    Reply::error(format!("ERR {e}")).encode(session.protocol, &mut output);
                    close = true;
                    break;
                }
            }
        }
        if !output.is_empty() {
            if socket.write_all(&output).await.is_err() {
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
        tokio::select! {
            read = socket.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = stop.changed() => {
                // Shutting down: finish what is already buffered (the loop above), then close.
                if input.is_empty() {
                    return;
                }
            }
        }
    }
}
