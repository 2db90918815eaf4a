//! A connection's query buffer: what it reports (`qbuf`, `qbuf-free` in CLIENT LIST) and when
//! its memory is given back, as Redis's `clientsCronResizeQueryBuffer` does:
//! - A client idle for more than 2 s gives its whole buffer back (an idle connection holds no
//!   buffer at all until it sends again).
//! - A buffer over 32 KiB that is more than twice the largest query seen since the last check
//!   (every 100 ms) shrinks to that peak, so one large request does not pin its memory.
//!
//! Either only when at least 4 KiB would be freed. A fresh or emptied buffer starts at 16 KiB.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::BytesMut;

use crate::services::clients::ClientHandle;
use crate::services::command_stats::Stamp;

/// The buffer a connection reads into (Redis's `PROTO_IOBUF_LEN`).
pub const INITIAL: usize = 16 * 1024;
/// Over this, a buffer much larger than its recent peak shrinks (`PROTO_RESIZE_THRESHOLD`).
const RESIZE_THRESHOLD: usize = 32 * 1024;
/// Less free space than this is not worth a reallocation.
const WORTH_FREEING: usize = 4 * 1024;
/// A client idle for longer gives its buffer back.
const IDLE: Duration = Duration::from_secs(2);
/// How often the peak is compared with the buffer.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// The resize state of one connection's query buffer.
#[derive(Debug)]
pub struct QueryBuffer {
    /// The largest amount of unparsed input seen since the last check.
    peak: usize,
    /// Read from the time-stamp counter ([`Stamp`]): both are read once a round or more.
    last_check: Stamp,
    last_read: Stamp,
}

impl Default for QueryBuffer {
    fn default() -> Self {
        let now = Stamp::now();
        QueryBuffer { peak: 0, last_check: now, last_read: now }
    }
}

impl QueryBuffer {
    /// Input arrived: `input` holds everything not yet parsed.
    pub fn read(&mut self, input: &BytesMut) {
        self.peak = self.peak.max(input.len());
        self.last_read = Stamp::now();
    }

    /// Publishes the buffer's size for CLIENT LIST: the unparsed bytes (those of the requests
    /// about to run included, as Redis counts them) and the free space.
    pub fn publish(input: &BytesMut, handle: &ClientHandle) {
        handle.qbuf.store(input.len(), Ordering::Relaxed);
        handle.qbuf_free.store(input.capacity() - input.len(), Ordering::Relaxed);
    }

    /// After a round of requests: an emptied buffer is reused from its start (up to
    /// [`INITIAL`] bytes), and the periodic check runs when due.
    pub fn after_round(&mut self, input: &mut BytesMut) {
        if input.is_empty() && input.capacity() > 0 && input.capacity() < INITIAL {
            // Reclaims the space before the parsed requests (no allocation when the buffer is
            // not shared with the requests' arguments any more).
            input.reserve(INITIAL);
        }
        if self.last_check.elapsed() >= CHECK_EVERY {
            self.check(input);
        }
    }

    /// When the connection, waiting for input, should run [`QueryBuffer::check`] to give an
    /// idle buffer back (None: it holds nothing worth freeing).
    pub fn idle_check_in(&self, input: &BytesMut) -> Option<Duration> {
        (input.capacity() - input.len() > WORTH_FREEING)
            .then(|| (IDLE + CHECK_EVERY).saturating_sub(self.last_read.elapsed()).max(CHECK_EVERY))
    }

    /// Redis's resize rules (see the module docs), then a new peak period.
    pub fn check(&mut self, input: &mut BytesMut) {
        self.last_check = Stamp::now();
        let free = input.capacity() - input.len();
        if free > WORTH_FREEING {
            if self.last_read.elapsed() > IDLE {
                *input = shrunk(input, input.len());
            } else if input.capacity() > RESIZE_THRESHOLD && input.capacity() / 2 > self.peak {
                *input = shrunk(input, input.len().max(self.peak));
            }
        }
        self.peak = input.len();
    }
}

/// A copy of `input` in a buffer of `capacity` bytes (none at all for an empty, idle one).
fn shrunk(input: &BytesMut, capacity: usize) -> BytesMut {
    let mut out = BytesMut::with_capacity(capacity);
    out.extend_from_slice(input);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_buffer_shrinks_to_its_recent_peak_and_an_idle_one_to_nothing() {
        let mut qb = QueryBuffer::default();
        let mut input = BytesMut::with_capacity(INITIAL);
        input.extend_from_slice(&vec![b'x'; 400_000]);
        qb.read(&input);
        let _ = input.split_to(input.len());
        input.reserve(400_000);
        qb.check(&mut input);
        assert!(input.capacity() >= 400_000, "the peak period that saw the large query keeps it");
        input.extend_from_slice(&[b'y'; 100]);
        qb.read(&input);
        qb.check(&mut input);
        assert!(input.capacity() < RESIZE_THRESHOLD && input.capacity() >= 100, "{}", input.capacity());
        assert_eq!(&input[..], &[b'y'; 100][..], "the unparsed bytes are kept");

        let mut idle = QueryBuffer { last_read: Stamp::now().earlier_by(IDLE * 2), ..QueryBuffer::default() };
        let mut empty = BytesMut::with_capacity(INITIAL);
        assert!(idle.idle_check_in(&empty).is_some());
        idle.check(&mut empty);
        assert_eq!(empty.capacity(), 0);
        assert_eq!(idle.idle_check_in(&empty), None);
    }
}
