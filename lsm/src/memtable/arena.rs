//! The memtable's value arena: every value a memtable holds, copied back to back into large
//! chunks that live as long as the memtable.
//!
//! A value used to be its own heap allocation behind a `Bytes` handle in the skip-list node: 32
//! bytes of handle, the allocator's rounding (a 100-byte value took 112, a 3-byte one 16), and
//! one `malloc` and one `free` per entry. In the arena a value costs its length and a varint of
//! that length before it; the node keeps one pointer (8 bytes), and a memtable's values are freed
//! a chunk at a time when it is dropped, as RocksDB's arena does.
//!
//! ```text
//! chunk: [len varint][value][len varint][value]...[unused tail]
//!        CHUNK bytes (a value whose varint and bytes exceed LARGE: a chunk of its own)
//! ```
//!
//! The length lives in the arena rather than in the node because the node is what the
//! allocator rounds: with jemalloc's size classes, a pointer and a length (16 bytes) made a
//! node of a 16-byte key 85 bytes on average, a pointer alone makes it 73, and the varint costs
//! one byte for values under 128 bytes (two under 16 KiB). Reading the length costs nothing
//! extra: it shares the value's cache line, which a read of the value loads anyway.
//!
//! Bytes are copied into a chunk once, before the record that points at them is inserted into
//! the skip list (whose link publishes them), and never written again; a chunk is freed only
//! when the arena is, after the list. Chunks are written through raw pointers, never borrowed
//! as a whole, so the writer copying into one part of a chunk never aliases a reader's slice of
//! another.
//!
//! A chunk is an anonymous mapping of its own ([`crate::pages`]), made resident in one call: a
//! dropped memtable's values go back to the OS at once, whichever allocator the program uses
//! (a value under 64 KiB that gets its own chunk comes from the allocator).

use std::ptr::NonNull;
use std::sync::Mutex;

use crate::coding::{encode_varint, get_varint, MAX_VARINT_LEN};
use crate::pages::Pages;

/// Bytes of a regular chunk.
const CHUNK: usize = 256 * 1024;
/// Values longer than this get a chunk of their own, so a chunk's unused tail stays below a
/// sixteenth of it.
const LARGE: usize = CHUNK / 16;

/// Where the next small value goes.
struct State {
    chunks: Vec<Pages<u8>>,
    /// The free part of the newest regular chunk.
    next: *mut u8,
    left: usize,
}

/// The value arena of one memtable (see the module docs).
pub(super) struct Arena {
    state: Mutex<State>,
}

// SAFETY: the raw pointers are into allocations the arena owns and frees only in `drop`; they
// are written only under the mutex (each byte once, before it is published), so the arena can
// be shared and sent like the memtable that owns it.
unsafe impl Send for Arena {}
unsafe impl Sync for Arena {}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("Arena").field("chunks", &s.chunks.len()).field("left", &s.left).finish()
    }
}

impl Default for Arena {
    fn default() -> Self {
        Arena { state: Mutex::new(State { chunks: Vec::new(), next: std::ptr::null_mut(), left: 0 }) }
    }
}

impl Arena {
    /// Copies `value`, after a varint of its length, into the arena: where the varint now
    /// lives, and the bytes of memory this took (varint and value, plus the unused tail of a
    /// chunk it made the arena leave behind).
    ///
    /// The returned pointer stays valid, and the bytes behind it unchanged, as long as the
    /// arena lives. An empty value takes nothing: it points at a static zero length.
    fn copy(&self, value: &[u8]) -> (NonNull<u8>, usize) {
        let n = value.len();
        if n == 0 {
            return (NonNull::from(&EMPTY), 0);
        }
        let mut header = [0u8; MAX_VARINT_LEN];
        let h = encode_varint(&mut header, n as u64);
        let total = h + n;
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (dst, charge) = if total > LARGE {
            (s.new_chunk(total, false), total)
        } else {
            let mut charge = total;
            if s.left < total {
                charge += s.left;
                s.next = s.new_chunk(CHUNK, true);
                s.left = CHUNK;
            }
            let dst = s.next;
            // SAFETY: `dst..dst + total` lies in the newest chunk's free part (`left >= total`).
            s.next = unsafe { dst.add(total) };
            s.left -= total;
            (dst, charge)
        };
        // SAFETY: `dst` is the start of `total` bytes of a live chunk that nothing has handed
        // out yet, and `header` and `value` are other allocations.
        unsafe {
            std::ptr::copy_nonoverlapping(header.as_ptr(), dst, h);
            std::ptr::copy_nonoverlapping(value.as_ptr(), dst.add(h), n);
        }
        // SAFETY: a chunk's pointer is never null.
        (unsafe { NonNull::new_unchecked(dst) }, charge)
    }

    /// Bytes of memory the arena holds.
    #[cfg(test)]
    pub(super) fn allocated(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).chunks.iter().map(|c| c.bytes()).sum()
    }
}

impl State {
    /// A new chunk of `len` bytes, kept until the arena is dropped. A regular chunk is
    /// `populate`d: it is about to be filled from end to end, so its pages are made resident in
    /// one call rather than one fault each.
    fn new_chunk(&mut self, len: usize, populate: bool) -> *mut u8 {
        let chunk = Pages::zeroed(len, populate);
        let ptr = chunk.as_ptr();
        self.chunks.push(chunk);
        ptr
    }
}

/// The length every empty value points at.
static EMPTY: u8 = 0;

/// A value in an arena: what a skip-list record keeps instead of the bytes. It points at the
/// varint of the value's length, which the value's bytes follow.
#[derive(Debug, Clone, Copy)]
pub(super) struct ArenaSlice {
    ptr: NonNull<u8>,
}

// SAFETY: the bytes behind it are never written again once the slice exists (see `Arena::copy`),
// so sharing or sending the slice shares immutable memory.
unsafe impl Send for ArenaSlice {}
unsafe impl Sync for ArenaSlice {}

impl ArenaSlice {
    /// `value` copied into `arena`, and the memory that took.
    pub(super) fn copy_into(arena: &Arena, value: &[u8]) -> (ArenaSlice, usize) {
        let (ptr, charge) = arena.copy(value);
        (ArenaSlice { ptr }, charge)
    }

    /// The bytes.
    ///
    /// # Safety
    /// The arena the slice was copied into must still be alive.
    #[inline]
    pub(super) unsafe fn get(&self) -> &[u8] {
        let p = self.ptr.as_ptr();
        // SAFETY: `ptr` points at a varint that `Arena::copy` wrote into a chunk the (live)
        // arena owns, followed by that many bytes of the value (or at the static empty length):
        // every byte read here was written once, before the slice was made. A varint of more
        // than one byte is a length of 128 or more, so the MAX_VARINT_LEN bytes from `p` lie
        // within the varint and the value.
        unsafe {
            let first = *p;
            if first < 0x80 {
                return std::slice::from_raw_parts(p.add(1), usize::from(first));
            }
            let (len, n) =
                get_varint(std::slice::from_raw_parts(p, MAX_VARINT_LEN)).expect("the arena's own length varint");
            std::slice::from_raw_parts(p.add(n), len as usize)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_keep_their_bytes_across_chunks() {
        let arena = Arena::default();
        let mut kept = Vec::new();
        let mut charged = 0;
        for i in 0..20_000usize {
            // Sizes from 0 to past LARGE, so small values cross chunk ends and large ones get their own.
            // And the lengths where the varint grows a byte, and where varint and value together
            // pass LARGE.
            let len = match i % 7 {
                0 => 0,
                1 => LARGE + 1 + i % 100,
                2 => [127, 128, 16_383, 16_384, LARGE - 2, LARGE - 1, LARGE, (1 << 21) - 1, 1 << 21][i / 7 % 9],
                _ => (i * 37) % 3000,
            };
            let value: Vec<u8> = (0..len).map(|j| (i + j) as u8).collect();
            let (slice, charge) = ArenaSlice::copy_into(&arena, &value);
            charged += charge;
            kept.push((slice, value));
        }
        for (slice, value) in &kept {
            // SAFETY: the arena is alive.
            assert_eq!(unsafe { slice.get() }, &value[..]);
        }
        assert_eq!(charged, arena.allocated() - arena.state.lock().unwrap().left, "every byte taken is charged once");
    }

    #[test]
    fn a_record_keeps_one_pointer_and_the_arena_one_length_byte_for_a_short_value() {
        assert_eq!(std::mem::size_of::<ArenaSlice>(), 8);
        let arena = Arena::default();
        let (slice, charge) = ArenaSlice::copy_into(&arena, &[7; 100]);
        // SAFETY: the arena is alive.
        assert_eq!((unsafe { slice.get() }, charge), (&[7u8; 100][..], 101));
        let (_, charge) = ArenaSlice::copy_into(&arena, &[7; 128]);
        assert_eq!(charge, 130);
    }

    #[test]
    fn an_empty_value_takes_nothing() {
        let arena = Arena::default();
        let (slice, charge) = ArenaSlice::copy_into(&arena, b"");
        // SAFETY: the arena is alive.
        assert_eq!((unsafe { slice.get() }, charge, arena.allocated()), (&b""[..], 0, 0));
    }
}
