//! The fast path for plain `SET key value` and `MSET`: a pipeline's consecutive ones written
//! to the engine as one batch (see [`SetBatch`]).

use bytes::{Bytes, BytesMut};

use super::observe::{failed_sets, stats_id};
use super::session::Session;
use crate::commands::{engine_error, CommandSpec};
use crate::resp::Reply;
use crate::services::command_stats::Stamp;

/// Consecutive plain `SET key value` and `MSET key value …` commands of one pipeline (blind
/// writes of strings: see [`super::gate::blind_set`]), committed to the engine as one batch
/// instead of one write each. They passed the gate one by one; their replies are appended in
/// order when the batch commits, before the reply of any later command, so clients see exactly
/// what they would had each been written alone (an engine failure answers every one of them
/// with the error).
#[derive(Debug, Default)]
pub(super) struct SetBatch {
    pub(super) batch: lsm::WriteBatch,
    pub(super) keys: Vec<Bytes>,
    pub(super) db: u32,
    /// For each command, whether its reply is sent (`CLIENT REPLY`), and its command-stats id.
    replies: Vec<(bool, usize)>,
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

    /// Adds a SET or MSET; returns whether its reply is sent, and its command-stats id.
    pub(super) fn add(&mut self, s: &mut Session, spec: &'static CommandSpec, args: &[Bytes]) -> (bool, usize) {
        let started = Stamp::now();
        self.db = s.db;
        for pair in args[1..].chunks_exact(2) {
            self.keys.push(pair[0].clone());
            let meta = crate::storage::Meta::string(pair[1].clone(), 0);
            s.state.storage.put_into(&mut self.batch, s.db, &pair[0], &meta);
            // Touched when the batch is written (see `touch_keys`): the cell's load overlaps
            // with the next commands' work instead of stalling this one.
            s.state.access.prefetch(s.db, &pair[0]);
        }
        let send = s.take_reply_permission();
        let id = stats_id(spec, args);
        self.replies.push((send, id));
        // Its share of the commit is not timed: the batch commits once for all of them.
        s.state.command_stats.called(id, started.elapsed(), None);
        (send, id)
    }

    /// Records the access of every key written (their cells were prefetched by `add`).
    pub(super) fn touch_keys(&self, s: &Session) {
        for key in &self.keys {
            s.state.access.touch(self.db, key);
        }
    }

    pub(super) fn commit(&mut self, s: &Session, out: &mut BytesMut) {
        if self.is_empty() {
            return;
        }
        self.touch_keys(s);
        let keys = std::mem::take(&mut self.keys);
        let batch = std::mem::take(&mut self.batch);
        let reply = match s.state.storage.write_blind(&s.exec, self.db, &keys, batch) {
            Ok(()) => Reply::ok(),
            Err(e) => failed_sets(s, engine_error(e), self.replies.iter().map(|(_, id)| *id)),
        };
        for (send, _) in self.replies.drain(..) {
            if send {
                reply.encode(s.protocol, out);
            }
        }
    }
}
