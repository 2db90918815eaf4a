//! The fast path for plain `SET key value`: a pipeline's consecutive SETs written to the
//! engine as one batch (see [`SetBatch`]).

use bytes::{Bytes, BytesMut};

use super::observe::{failed_sets, set_id};
use super::session::Session;
use crate::commands::engine_error;
use crate::resp::Reply;
use crate::services::command_stats::Stamp;

/// Consecutive plain `SET key value` commands of one pipeline, committed to the engine as one
/// batch instead of one write each. They passed the gate one by one; their replies are
/// appended in order when the batch commits, before the reply of any later command, so clients
/// see exactly what they would had each been written alone (an engine failure answers every
/// one of them with the error).
#[derive(Debug, Default)]
pub(super) struct SetBatch {
    pub(super) batch: lsm::WriteBatch,
    pub(super) keys: Vec<Bytes>,
    pub(super) db: u32,
    /// For each SET, whether its reply is sent (`CLIENT REPLY`).
    replies: Vec<bool>,
}

impl SetBatch {
    /// An empty batch for database `db`.
    pub(super) fn for_db(db: u32) -> Self {
        SetBatch { db, ..SetBatch::default() }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.replies.is_empty()
    }

    pub(super) fn is_full(&self) -> bool {
        self.replies.len() >= 1024 || self.batch.size_in_bytes() >= 4 << 20
    }

    /// Adds a SET; returns whether its reply is sent.
    pub(super) fn add(&mut self, s: &mut Session, args: &[Bytes]) -> bool {
        let started = Stamp::now();
        self.db = s.db;
        self.keys.push(args[1].clone());
        s.state.storage.put_into(&mut self.batch, s.db, &args[1], &crate::storage::Meta::string(args[2].clone(), 0));
        s.state.access.touch(s.db, &args[1]);
        let send = s.take_reply_permission();
        self.replies.push(send);
        // Its share of the commit is not timed: the batch commits once for all of them.
        s.state.command_stats.called(set_id(), s.id, started.elapsed(), None);
        send
    }

    pub(super) fn commit(&mut self, s: &Session, out: &mut BytesMut) {
        if self.is_empty() {
            return;
        }
        let keys = std::mem::take(&mut self.keys);
        let batch = std::mem::take(&mut self.batch);
        let reply = match s.state.storage.write_blind(&s.exec, self.db, &keys, batch) {
            Ok(()) => Reply::ok(),
            Err(e) => failed_sets(s, engine_error(e), keys.len()),
        };
        for send in self.replies.drain(..) {
            if send {
                reply.encode(s.protocol, out);
            }
        }
    }
}
