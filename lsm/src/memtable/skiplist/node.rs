//! A skip-list node's handle and its layout in the node arena (see the parent module's docs):
//! its links before its address, its first word (key length and newest-version pointer, or
//! zero in the long form), then its key.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use super::version::read_len;
use super::{LINK, SHORT_POINTER, WORD};
use crate::key;

/// A node of a [`SkipList`](super::SkipList): its address, just past its links.
///
/// A `Node` is only ever made by its list, and is valid as long as the list: the memtable module
/// never lets one outlive its memtable (cursors and the point index live inside it or keep it
/// alive).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::memtable) struct Node(pub(super) NonNull<u8>);

// SAFETY: a node's bytes are immutable once it is published, but for its links and its
// newest-version pointer, which are atomics.
unsafe impl Send for Node {}
unsafe impl Sync for Node {}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Node").field(&self.0).finish()
    }
}

impl Node {
    /// The node's address, which is 8-aligned (the point index keeps flags in the low bit).
    pub(in crate::memtable) fn addr(self) -> usize {
        self.0.as_ptr() as usize
    }

    /// The node at `addr`, which [`Node::addr`] of a node of a live list returned.
    ///
    /// # Safety
    /// `addr` must come from `Node::addr` of a node whose list is still alive.
    pub(in crate::memtable) unsafe fn from_addr(addr: usize) -> Node {
        // SAFETY: the caller's: a node's address is never null.
        Node(unsafe { NonNull::new_unchecked(addr as *mut u8) })
    }

    /// Link `level` (below the node's height).
    #[inline]
    pub(super) fn link(&self, level: usize) -> &AtomicPtr<u8> {
        // SAFETY: a node of height h is preceded by its h links, 8-aligned words of the arena
        // (see `SkipList::insert`), alive as long as the node; callers ask only for levels the
        // node has (a level they reached it at, or one of those below).
        unsafe { &*self.0.as_ptr().sub(LINK * (level + 1)).cast::<AtomicPtr<u8>>() }
    }

    /// The node's first word: its key's length (top 16 bits) and its newest version's address,
    /// or zero in the long form.
    #[inline]
    fn word(&self) -> &AtomicU64 {
        // SAFETY: a node starts with this 8-aligned word, written before it was published.
        unsafe { &*self.0.as_ptr().cast::<AtomicU64>() }
    }

    /// The long form's pointer to the node's newest version (after the zero first word).
    #[inline]
    fn long_head(&self) -> &AtomicPtr<u8> {
        // SAFETY: in the long form the second word is this pointer, 8-aligned, written before
        // the node was published.
        unsafe { &*self.0.as_ptr().add(WORD).cast::<AtomicPtr<u8>>() }
    }

    /// The address of the node's newest version.
    #[inline]
    pub(super) fn newest_at(&self) -> *mut u8 {
        let w = self.word().load(Ordering::Acquire);
        if w >> 48 != 0 {
            return (w as usize & (SHORT_POINTER - 1)) as *mut u8;
        }
        self.long_head().load(Ordering::Acquire)
    }

    /// Publishes `v` as the node's newest version; false (nothing done) if its address does not
    /// fit the node's short form.
    #[inline]
    pub(super) fn set_newest(&self, v: *mut u8) -> bool {
        let w = self.word().load(Ordering::Relaxed);
        if w >> 48 == 0 {
            self.long_head().store(v, Ordering::Release);
            return true;
        }
        if v as usize >= SHORT_POINTER {
            return false;
        }
        self.word().store(w & !(SHORT_POINTER as u64 - 1) | v as u64, Ordering::Release);
        true
    }

    /// The node's internal key: its user key and its oldest version's trailer.
    #[inline]
    pub(in crate::memtable) fn key(&self) -> &[u8] {
        let w = self.word().load(Ordering::Relaxed);
        let p = self.0.as_ptr();
        // SAFETY: the node's key was written by `SkipList::link_new` before it was published and
        // is never written again: in the short form its bytes follow the first word, which holds
        // their length; in the long form the version pointer and a length varint come between.
        unsafe {
            if w >> 48 != 0 {
                return std::slice::from_raw_parts(p.add(WORD), (w >> 48) as usize);
            }
            let k = p.add(2 * WORD);
            let (len, n) = read_len(k);
            std::slice::from_raw_parts(k.add(n), len)
        }
    }

    /// The node's user key.
    #[inline]
    pub(in crate::memtable) fn user_key(&self) -> &[u8] {
        key::user_key(self.key())
    }

    /// The next node at level 0.
    #[inline]
    pub(super) fn next(&self) -> Option<Node> {
        NonNull::new(self.link(0).load(Ordering::Acquire)).map(Node)
    }
}
