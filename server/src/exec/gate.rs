//! The command gate and the batch runner.
//!
//! Every request of every connection passes [`gate`] — authentication, RESP2 subscribed mode,
//! the command table's arity, MULTI queueing (refusing `no-multi` commands such as SAVE and
//! SHUTDOWN) — in that order, before anything runs; fast paths
//! come after it. [`run_batch`] runs a connection's parsed requests on an executor thread: it
//! honours `CLIENT PAUSE`, catches a panicking command (the client gets an error for that
//! command only and its execution context is reset), coalesces consecutive plain `SET`s into
//! one engine batch, and stops once the replies it produced pass the output bound so the
//! connection can write them before more work is done (backpressure).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::session::{BlockRequest, Session};
use crate::commands::{engine_error, lookup, unknown_command, CommandSpec};
use crate::resp::{Protocol, Reply};

/// Why [`run_batch`] returned.
#[derive(Debug)]
pub enum BatchEnd {
    /// Every request ran.
    Drained,
    /// The replies produced passed the output bound: write them, then run the rest.
    OutputFull,
    /// A command blocks (BLPOP, LOCK …): the connection waits for it, then runs the rest.
    Blocked(BlockRequest),
    /// `CLIENT PAUSE` holds the next command back this long.
    Paused(Duration),
    /// The connection closes after writing the replies (QUIT, CLIENT KILL).
    Close,
}

/// Checks a request against the gate. `Ok(spec)`: run it; `Err(reply)`: answer that instead
/// (an error, or `QUEUED` inside MULTI).
pub fn gate(s: &mut Session, args: &[Bytes]) -> Result<&'static CommandSpec, Reply> {
    let spec = args.first().and_then(|name| lookup(name));
    admit(s, args, spec)
}

/// [`gate`] for a request whose command was already looked up (`spec`).
fn admit(s: &mut Session, args: &[Bytes], spec: Option<&'static CommandSpec>) -> Result<&'static CommandSpec, Reply> {
    let Some(name) = args.first() else { return Err(Reply::error("ERR empty command")) };
    s.state.commands_processed.fetch_add(1, Ordering::Relaxed);
    if !s.authenticated && !spec.is_some_and(|c| c.flags.contains(&"no_auth") || c.name == "quit") {
        return Err(Reply::error("NOAUTH Authentication required."));
    }
    if s.protocol == Protocol::Resp2
        && s.subscribed()
        && !spec.is_some_and(|c| crate::commands::allowed_when_subscribed(c.name))
    {
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        return Err(Reply::error(format!(
            "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
        )));
    }
    let queuing = s.multi.is_some() && !spec.is_some_and(|c| crate::commands::is_transaction_control(c.name));
    let Some(spec) = spec else {
        s.multi_error |= queuing;
        return Err(unknown_command(args));
    };
    let n = args.len() as i32;
    if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
        s.multi_error |= queuing;
        return Err(Reply::error(format!("ERR wrong number of arguments for '{}' command", spec.name)));
    }
    if queuing && spec.flags.contains(&"no_multi") {
        s.multi_error = true;
        return Err(Reply::error("ERR Command not allowed inside a transaction"));
    }
    if queuing {
        if let Some(queue) = s.multi.as_mut() {
            queue.push(args.to_vec());
        }
        return Err(Reply::Simple("QUEUED".into()));
    }
    s.handle.touch(&spec.name);
    Ok(spec)
}

/// Runs one request through the gate (EXEC runs its queue through here).
pub fn dispatch(s: &mut Session, args: &[Bytes]) -> Reply {
    match gate(s, args) {
        Ok(spec) => run_command(s, spec, args),
        Err(reply) => reply,
    }
}

/// Runs a command that passed the gate.
fn run_command(s: &mut Session, spec: &'static CommandSpec, args: &[Bytes]) -> Reply {
    // A read of several keys sees them all as of one moment.
    let multi_key_read =
        spec.flags.contains(&"readonly") && args.len() > 2 && (spec.first_key != spec.last_key || spec.first_key == 0);
    let took_snapshot = multi_key_read && s.exec.begin_snapshot(s.state.storage.engine());
    let reply = (spec.handler)(s, args);
    if took_snapshot {
        s.exec.end_snapshot();
    }
    if !s.in_exec {
        serve_signals(s);
    }
    reply
}

/// Serves clients blocked on the keys the last command signalled.
pub fn serve_signals(s: &mut Session) {
    for key in std::mem::take(&mut s.signals) {
        if s.state.blocking.has_waiters(s.db, &key) {
            s.state.blocking.serve(s.db, &key);
        }
    }
}

/// Runs requests from the front of `requests` until none is left, the replies in `out` pass
/// `output_bound` bytes, a command blocks, `CLIENT PAUSE` holds one back, or the connection
/// must close. Requests not run stay in `requests`.
pub fn run_batch(
    s: &mut Session,
    requests: &mut VecDeque<Vec<Bytes>>,
    out: &mut BytesMut,
    output_bound: usize,
) -> BatchEnd {
    let mut sets = SetBatch::default();
    let end = loop {
        if s.handle.killed.load(Ordering::Acquire) {
            break BatchEnd::Close;
        }
        let Some(args) = requests.front() else { break BatchEnd::Drained };
        let looked_up = lookup(&args[0]);
        if let Some(spec) = looked_up.filter(|c| c.name != "client") {
            if let Some(wait) = s.state.pause_remaining(spec.flags.contains(&"write")) {
                break BatchEnd::Paused(wait);
            }
        }
        let Some(args) = requests.pop_front() else { break BatchEnd::Drained };
        let name = args[0].clone();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Option<Reply> {
            let spec = match admit(s, &args, looked_up) {
                Ok(spec) => spec,
                Err(reply) => {
                    sets.commit(s, out);
                    return Some(reply);
                }
            };
            if spec.name == "set" && args.len() == 3 && !s.in_exec {
                // Fast path: a plain SET joins the pipeline's batch of blind writes.
                if !sets.is_empty() && sets.db != s.db {
                    sets.commit(s, out);
                }
                sets.add(s, &args);
                if sets.is_full() {
                    sets.commit(s, out);
                }
                return None;
            }
            sets.commit(s, out);
            Some(run_command(s, spec, &args))
        }));
        let reply = match outcome {
            Ok(Some(reply)) => reply,
            Ok(None) => continue,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                let command = String::from_utf8_lossy(&name).to_ascii_lowercase();
                tracing::error!(target: "shale::exec", client = s.id, %command, panic = %what, "command panicked; its client gets an error");
                s.in_exec = false;
                s.blocked = None;
                s.signals.clear();
                sets = SetBatch::default();
                Reply::error(format!("ERR internal error running '{command}' (see the server log)"))
            }
        };
        s.exec.reset();
        if let Some(req) = s.blocked.take() {
            break BatchEnd::Blocked(req);
        }
        if s.take_reply_permission() {
            reply.encode(s.protocol, out);
        }
        if s.closing {
            break BatchEnd::Close;
        }
        if out.len() >= output_bound {
            break BatchEnd::OutputFull;
        }
    };
    sets.commit(s, out);
    s.exec.reset();
    end
}

/// Consecutive plain `SET key value` commands of one pipeline, committed to the engine as one
/// batch instead of one write each. They passed the gate one by one; their replies are
/// appended in order when the batch commits, before the reply of any later command, so clients
/// see exactly what they would had each been written alone (an engine failure answers every
/// one of them with the error).
#[derive(Debug, Default)]
struct SetBatch {
    batch: lsm::WriteBatch,
    keys: Vec<Bytes>,
    db: u32,
    /// For each SET, whether its reply is sent (`CLIENT REPLY`).
    replies: Vec<bool>,
}

impl SetBatch {
    fn is_empty(&self) -> bool {
        self.replies.is_empty()
    }

    fn is_full(&self) -> bool {
        self.replies.len() >= 1024 || self.batch.size_in_bytes() >= 4 << 20
    }

    fn add(&mut self, s: &mut Session, args: &[Bytes]) {
        self.db = s.db;
        self.keys.push(args[1].clone());
        s.state.storage.put_into(&mut self.batch, s.db, &args[1], &crate::storage::Meta::string(args[2].clone(), 0));
        let send = s.take_reply_permission();
        self.replies.push(send);
    }

    fn commit(&mut self, s: &Session, out: &mut BytesMut) {
        if self.is_empty() {
            return;
        }
        let keys = std::mem::take(&mut self.keys);
        let batch = std::mem::take(&mut self.batch);
        let reply = match s.state.storage.write_blind(&s.exec, self.db, &keys, batch) {
            Ok(()) => Reply::ok(),
            Err(e) => engine_error(e),
        };
        for send in self.replies.drain(..) {
            if send {
                reply.encode(s.protocol, out);
            }
        }
    }
}
