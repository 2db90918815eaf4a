//! The memtable's arenas: the nodes of its skip list (links and key) in one, the values in
//! another, each carved back to back out of large chunks that live as long as the memtable.
//!
//! A node used to be its own allocation from the global allocator, as `crossbeam_skiplist`
//! makes them: rounded up to the allocator's size class (a node of a 16-byte key took 73 bytes
//! on average, with the value in a chunk like these), one `malloc` and one `free` each, and a
//! dropped memtable's nodes freed one by one in key order — that is, at random addresses —
//! while the writer allocated the next memtable's nodes into the holes. Measured at the end of
//! 10 M random overwrites (jemalloc's bin statistics), the active memtable's nodes sat in slabs
//! 62 % full: 8 MB held beside 16 MB of nodes. In an arena a node costs its bytes rounded to
//! 8, a value its bytes, and a memtable's memory goes back to the OS a chunk at a time when it
//! is dropped, as RocksDB's arena does.
//!
//! Nodes and values are kept apart so that the nodes a search walks are dense: a node of a
//! 16-byte key is ~43 bytes, where with its 100-byte value inline it was ~140, and a seek into
//! a memtable of 400K such entries took 2.6-2.9 µs against 1.4-1.6 for the separate layout
//! (each step of a search is a cache miss, and with values inline a TLB miss too).
//!
//! ```text
//! chunk: [node][node]...[node][unused tail]          (or values: [len varint][value]...)
//!        `chunk` bytes (an allocation larger than a sixteenth of that: a chunk of its own)
//! ```
//!
//! Every chunk is 8-aligned and every node a multiple of 8 bytes, so every node starts
//! 8-aligned (its links are atomic words). Only the list's writer allocates (the arenas live in
//! its lock); bytes are written once, before the link that publishes them, and never again,
//! and chunks are freed only when the arena is dropped, after every reader of the list.
//!
//! A chunk is an anonymous mapping of its own ([`crate::pages`]), made resident in one call
//! (and charged to the memtable whole, when it is made): a dropped memtable's nodes go back to
//! the OS at once, whichever allocator the program uses (a chunk under 64 KiB comes from the
//! allocator).

use std::ptr::NonNull;

use std::sync::atomic::AtomicU64;

use crate::pages::Pages;

/// Bytes of a regular chunk at most (a memtable's arenas take chunks of about a 256th of its
/// write buffer, see [`Arena::chunk_for`]) and at least.
pub(super) const MAX_CHUNK: usize = 256 * 1024;
pub(super) const MIN_CHUNK: usize = 4096;

/// Chunks of one memtable's skip list: its nodes, or its values (see the module docs).
pub(super) struct Arena {
    /// Bytes of a regular chunk; allocations longer than a sixteenth of it get a chunk of their
    /// own, so a chunk's unused tail stays below a sixteenth of it.
    chunk: usize,
    /// In words, so that a chunk too small to be mapped (taken from the allocator) is 8-aligned too.
    chunks: Vec<Pages<AtomicU64>>,
    /// The free part of the newest regular chunk.
    next: *mut u8,
    left: usize,
}

// SAFETY: the raw pointer is into a chunk the arena owns and frees only in `drop`; the arena is
// used only under its skip list's writer lock.
unsafe impl Send for Arena {}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena").field("chunks", &self.chunks.len()).field("left", &self.left).finish()
    }
}

impl Arena {
    /// An empty arena of `chunk`-byte chunks (a multiple of 8).
    pub(super) fn new(chunk: usize) -> Arena {
        debug_assert!(chunk.is_multiple_of(8) && chunk >= 64);
        Arena { chunk, chunks: Vec::new(), next: std::ptr::null_mut(), left: 0 }
    }

    /// The chunk size for a memtable of `budget` bytes: about a 256th of it, a power of two
    /// between [`MIN_CHUNK`] and [`MAX_CHUNK`] (a memtable has three arenas, so its last chunks'
    /// unused parts stay around 1 % of its budget).
    pub(super) fn chunk_for(budget: usize) -> usize {
        (budget / 256).next_power_of_two().clamp(MIN_CHUNK, MAX_CHUNK)
    }

    /// `len` zeroed bytes (at least 1) that stay valid and are written by no one else for as long
    /// as the arena lives — 8-aligned if every allocation from this arena is a multiple of 8 —
    /// and the bytes of memory this took from the OS: a whole new chunk when it started one
    /// (resident at once, see `new_chunk`), else nothing; its own chunk's size for a large one.
    pub(super) fn alloc(&mut self, len: usize) -> (NonNull<u8>, usize) {
        debug_assert!(len > 0);
        let (ptr, charge) = if len > self.chunk / 16 {
            (self.new_chunk(len, false), len.next_multiple_of(8))
        } else {
            let mut charge = 0;
            if self.left < len {
                charge = self.chunk;
                self.next = self.new_chunk(self.chunk, true);
                self.left = self.chunk;
            }
            let ptr = self.next;
            // SAFETY: `ptr..ptr + len` lies in the newest chunk's free part (`left >= len`).
            self.next = unsafe { ptr.add(len) };
            self.left -= len;
            (ptr, charge)
        };
        // SAFETY: a chunk's pointer is never null.
        (unsafe { NonNull::new_unchecked(ptr) }, charge)
    }

    /// Bytes of memory the arena holds.
    #[cfg(test)]
    pub(super) fn allocated(&self) -> usize {
        self.chunks.iter().map(|c| c.bytes()).sum()
    }

    /// A new chunk of at least `len` bytes, kept until the arena is dropped. A regular chunk is
    /// `populate`d: it is about to be filled from end to end, so its pages are made resident in
    /// one call rather than one fault each.
    fn new_chunk(&mut self, len: usize, populate: bool) -> *mut u8 {
        let chunk = Pages::<AtomicU64>::zeroed(len.div_ceil(8), populate);
        let ptr = chunk.as_ptr().cast::<u8>();
        self.chunks.push(chunk);
        ptr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocates `count` lengths from `len_of` in an arena of `chunk`-byte chunks, fills each
    /// with its own byte, and checks none was overwritten, every chunk was charged once and
    /// whole, and (when `aligned`) every allocation starts 8-aligned.
    fn allocate_fill_and_check(chunk: usize, count: usize, len_of: impl Fn(usize) -> usize, aligned: bool) {
        let mut arena = Arena::new(chunk);
        let mut taken: Vec<(usize, usize)> = Vec::new();
        let mut charged = 0;
        for i in 0..count {
            let len = len_of(i);
            let (ptr, charge) = arena.alloc(len);
            assert!(!aligned || (ptr.as_ptr() as usize).is_multiple_of(8), "allocation {i} of {len} is not aligned");
            // SAFETY: `len` bytes at `ptr` are the arena's, handed out once.
            unsafe { std::ptr::write_bytes(ptr.as_ptr(), i as u8, len) };
            charged += charge;
            taken.push((ptr.as_ptr() as usize, len));
        }
        for (i, &(at, len)) in taken.iter().enumerate() {
            // SAFETY: as above; nothing else wrote these bytes.
            let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, len) };
            assert!(bytes.iter().all(|&b| b == i as u8), "allocation {i} was overwritten");
        }
        assert_eq!(charged, arena.allocated(), "every chunk is charged once, whole");
    }

    #[test]
    fn allocations_of_multiples_of_8_are_aligned_disjoint_and_charged_once() {
        // Sizes from 8 to past a sixteenth of a chunk, so small ones cross chunk ends and large
        // ones get a chunk of their own.
        let large = MAX_CHUNK / 16;
        let len_of = |i: usize| match i % 7 {
            0 => large + 8 * (1 + i % 100),
            1 => large,
            _ => 8 * (1 + (i * 37) % 400),
        };
        allocate_fill_and_check(MAX_CHUNK, 20_000, len_of, true);
    }

    #[test]
    fn allocations_of_any_length_are_disjoint_and_charged_once() {
        let large = MIN_CHUNK / 16;
        let len_of = |i: usize| if i.is_multiple_of(5) { large + 1 + i % 13 } else { 1 + (i * 37) % large };
        allocate_fill_and_check(MIN_CHUNK, 20_000, len_of, false);
    }
}
