//! The memtable's skip list: one node per user key, in order, each holding a chain of that
//! key's versions, newest first. A node is laid out with its links and key in one stretch of a
//! node [`arena`](super::arena), as RocksDB's `InlineSkipList` and LevelDB's `SkipList` lay out
//! theirs; nodes of height 1 and taller ones come from two arenas, so the upper levels, which
//! a search walks across the whole list, are dense. Versions live in the value arena.
//!
//! ```text
//! node:    [link h-1] ... [link 1] [link 0] | [newest version pointer][key len varint][user key] [pad to 8]
//!                                           ^ the node's address (what a `Node` and the point index hold)
//! version: [kind | HAS_OLDER][seq - base varint][older version pointer, if HAS_OLDER][value len varint][value]
//! ```
//!
//! A version's sequence number is stored as its distance from the list's base (the first
//! sequence number inserted), a varint of about three bytes in a memtable of a few hundred
//! thousand writes; its first byte is the version's kind, with bit 7 set when a pointer to
//! the next older version of the key follows (unaligned: versions are packed).
//!
//! **Why chains.** In the order of internal keys a key's versions are adjacent (user key
//! ascending, sequence number descending), so a list of internal keys inserts a new version of
//! a key right before the old one — after a descent of the whole list, about `log4(n)` levels
//! of cache misses (a microsecond in a memtable of a million entries). Redis-style workloads
//! rewrite the same keys all the time (a counter, a collection's metadata record on every push
//! or pop, a sorted set member's score): with the node of its key found through the point
//! index, a new version is one allocation and one pointer store. A key written once costs what
//! it did as an internal key in a node of its own: the trailer's 8 bytes are now the version's
//! ~4-byte kind and sequence number, and the node's key length a varint instead of half a word.
//!
//! A node of height `h` (probability `4^-(h-1)·¾`, at most [`MAX_HEIGHT`]) has `h` links, 1.33
//! on average; link `i` is the next node at level `i`.
//!
//! Concurrency: one writer at a time (inserts take the writer lock, which also owns the arenas)
//! and any number of readers that take no lock, as in LevelDB. A node's or version's bytes are
//! all written before it is published: the writer sets a new node's links, then stores it into
//! its predecessor's link with `Release`, level 0 first; a new version is published by storing
//! it into its node's newest-version pointer with `Release`. Readers load links and that
//! pointer with `Acquire`, so whatever they reach through them is complete; a version's own
//! older pointer is written before the version is published and never changed. A version
//! older than the newest (never inserted by the engine, which applies writes in sequence order,
//! but allowed) is inserted by copying the newer versions in front of it and publishing the
//! copy: readers that hold the old ones keep a complete, older chain. Nothing is ever unlinked
//! and nothing is ever freed while the list lives: the arenas free every node and version at
//! once when the list is dropped, which needs the last reference to its memtable, and with it
//! every cursor and the point index, which hold [`Node`]s.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::arena::Arena;
use crate::coding::{encode_varint, MAX_VARINT_LEN};

/// The most links a node has: with a branching factor of 4, a list of 4^12 (16 M) keys still
/// descends in about 4 steps a level.
pub(super) const MAX_HEIGHT: usize = 12;

const LINK: usize = std::mem::size_of::<AtomicPtr<u8>>();
/// Bytes of a node's newest-version pointer.
const WORD: usize = 8;
/// Bit 7 of a version's first byte (its kind): a pointer to the next older version follows.
const HAS_OLDER: u8 = 0x80;

/// A node of a [`SkipList`]: its address, just past its links.
///
/// A `Node` is only ever made by its list, and is valid as long as the list: the memtable module
/// never lets one outlive its memtable (cursors and the point index live inside it or keep it
/// alive).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Node(NonNull<u8>);

// SAFETY: a node's bytes are immutable once it is published, but for its links and its
// newest-version pointer, which are atomics.
unsafe impl Send for Node {}
unsafe impl Sync for Node {}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Node").field(&self.0).finish()
    }
}

/// One version of a node's key: a kind, a sequence number and a value (see the module docs).
/// Valid as long as its list, as a [`Node`] is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Version {
    at: NonNull<u8>,
    /// The list's base sequence number.
    base: u64,
}

// SAFETY: a version's bytes are immutable once it is published.
unsafe impl Send for Version {}
unsafe impl Sync for Version {}

impl std::fmt::Debug for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Version").field("trailer", &self.trailer()).finish()
    }
}

/// A varint at `p` that the arena holds: its value and length.
///
/// # Safety
/// `p` must point at a varint written by [`SkipList::insert`] into a live node or version.
#[inline]
unsafe fn read_len(p: *const u8) -> (usize, usize) {
    // SAFETY: the caller's; see `read_varint`.
    let (v, n) = unsafe { read_varint(p) };
    (v as usize, n)
}

/// A varint at `p` that the arena holds, and its length.
///
/// # Safety
/// As [`read_len`].
#[inline]
unsafe fn read_varint(p: *const u8) -> (u64, usize) {
    let (mut value, mut shift) = (0u64, 0);
    for i in 0..MAX_VARINT_LEN {
        // SAFETY: the caller's: the bytes up to the varint's last (the first below 0x80) are
        // the arena's.
        let b = unsafe { *p.add(i) };
        value |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return (value, i + 1);
        }
        shift += 7;
    }
    (value, MAX_VARINT_LEN)
}

impl Node {
    /// The node's address, which is 8-aligned (the point index keeps flags in the low bit).
    pub(super) fn addr(self) -> usize {
        self.0.as_ptr() as usize
    }

    /// The node at `addr`, which [`Node::addr`] of a node of a live list returned.
    ///
    /// # Safety
    /// `addr` must come from `Node::addr` of a node whose list is still alive.
    pub(super) unsafe fn from_addr(addr: usize) -> Node {
        // SAFETY: the caller's: a node's address is never null.
        Node(unsafe { NonNull::new_unchecked(addr as *mut u8) })
    }

    /// Link `level` (below the node's height).
    #[inline]
    fn link(&self, level: usize) -> &AtomicPtr<u8> {
        // SAFETY: a node of height h is preceded by its h links, 8-aligned words of the arena
        // (see `SkipList::insert`), alive as long as the node; callers ask only for levels the
        // node has (a level they reached it at, or one of those below).
        unsafe { &*self.0.as_ptr().sub(LINK * (level + 1)).cast::<AtomicPtr<u8>>() }
    }

    /// The pointer to the node's newest version.
    #[inline]
    fn head(&self) -> &AtomicPtr<u8> {
        // SAFETY: a node starts with this 8-aligned word, written before it was published.
        unsafe { &*self.0.as_ptr().cast::<AtomicPtr<u8>>() }
    }

    /// The node's user key.
    #[inline]
    pub(super) fn key(&self) -> &[u8] {
        // SAFETY: the key's length varint and bytes follow the first word; they were written by
        // `SkipList::insert` before the node was published and are never written again.
        unsafe {
            let k = self.0.as_ptr().add(WORD);
            let (len, n) = read_len(k);
            std::slice::from_raw_parts(k.add(n), len)
        }
    }

    /// The next node at level 0.
    #[inline]
    fn next(&self) -> Option<Node> {
        NonNull::new(self.link(0).load(Ordering::Acquire)).map(Node)
    }
}

impl Version {
    /// The version's first byte: its kind, and [`HAS_OLDER`].
    #[inline]
    fn flags(&self) -> u8 {
        // SAFETY: a version's bytes were written before it was published, never again.
        unsafe { *self.at.as_ptr() }
    }

    /// The sequence number varint's value and length.
    #[inline]
    fn seq_delta(&self) -> (u64, usize) {
        // SAFETY: the varint follows the first byte (see `SkipList::new_version`).
        unsafe { read_varint(self.at.as_ptr().add(1)) }
    }

    /// The internal-key trailer of this version (`seq << 8 | kind`).
    #[inline]
    pub(super) fn trailer(&self) -> u64 {
        let (delta, _) = self.seq_delta();
        self.base.wrapping_add(delta) << 8 | u64::from(self.flags() & !HAS_OLDER)
    }

    /// Where the older pointer (if any) is.
    #[inline]
    fn after_seq(&self) -> *const u8 {
        let (_, n) = self.seq_delta();
        // SAFETY: within the version (see `SkipList::new_version`).
        unsafe { self.at.as_ptr().add(1 + n) }
    }

    /// The next older version of the key.
    #[inline]
    pub(super) fn older(&self) -> Option<Version> {
        if self.flags() & HAS_OLDER == 0 {
            return None;
        }
        // SAFETY: with HAS_OLDER set, the older version's address follows the sequence number
        // (unaligned), written before this version was published.
        let p = unsafe { self.after_seq().cast::<*mut u8>().read_unaligned() };
        NonNull::new(p).map(|at| Version { at, base: self.base })
    }

    /// The version's value.
    #[inline]
    pub(super) fn value(&self) -> &[u8] {
        let skip = if self.flags() & HAS_OLDER != 0 { LINK } else { 0 };
        // SAFETY: the value's length varint and bytes follow (see `SkipList::new_version`).
        unsafe {
            let v = self.after_seq().add(skip);
            let (len, m) = read_len(v);
            std::slice::from_raw_parts(v.add(m), len)
        }
    }
}

/// What the caller knows about the node of the key it inserts (from the point index).
#[derive(Debug, Clone, Copy)]
pub(super) enum Hint {
    /// This is the key's node.
    Node(Node),
    /// The list has no node for the key.
    Absent,
    /// Nothing: the list is searched.
    Unknown,
}

/// What only the writer touches.
#[derive(Debug)]
struct Writer {
    /// Nodes of height 1: links, newest-version pointer and key.
    nodes: Arena,
    /// Taller nodes, apart so that the levels above 0, which a search walks far, are dense: a
    /// seek into a memtable of 400K entries of 16-byte keys took 1.1-1.7 µs instead of 1.6-2.6
    /// with all nodes in one arena (crossbeam's nodes, segregated by the allocator's size
    /// classes, 1.3-1.8).
    tall: Arena,
    /// Versions.
    values: Arena,
    /// xorshift64 state for node heights.
    rng: u64,
}

impl Writer {
    /// A height with probability `4^-(h-1)·¾` (the last one takes the rest).
    fn random_height(&mut self) -> usize {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        (1 + x.trailing_zeros() as usize / 2).min(MAX_HEIGHT)
    }
}

/// A skip list of user keys, each with its versions (see the module docs).
pub(super) struct SkipList {
    /// The head's links: the first node of each level.
    head: [AtomicPtr<u8>; MAX_HEIGHT],
    /// Levels in use (at least 1).
    height: AtomicUsize,
    /// Versions in the list.
    len: AtomicUsize,
    /// Nodes (distinct keys) in the list.
    keys: AtomicUsize,
    /// Sequence numbers are stored relative to this: the first one inserted (set before the
    /// first version is published).
    base: AtomicU64,
    writer: Mutex<Writer>,
}

impl std::fmt::Debug for SkipList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkipList")
            .field("len", &self.len())
            .field("keys", &self.keys.load(Ordering::Relaxed))
            .field("height", &self.height)
            .finish()
    }
}

impl SkipList {
    /// An empty list whose arenas take `chunk`-byte chunks ([`Arena::chunk_for`]; the tall
    /// nodes, a quarter of the nodes, a quarter of that).
    pub(super) fn new(chunk: usize) -> SkipList {
        SkipList {
            head: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            height: AtomicUsize::new(1),
            len: AtomicUsize::new(0),
            keys: AtomicUsize::new(0),
            base: AtomicU64::new(u64::MAX),
            writer: Mutex::new(Writer {
                nodes: Arena::new(chunk),
                tall: Arena::new((chunk / 4).max(super::arena::MIN_CHUNK)),
                values: Arena::new(chunk),
                rng: 0x9e37_79b9_7f4a_7c15,
            }),
        }
    }

    /// Versions in the list.
    pub(super) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// True when the list holds nothing.
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Distinct keys in the list.
    #[cfg(test)]
    pub(super) fn keys(&self) -> usize {
        self.keys.load(Ordering::Relaxed)
    }

    /// Link `level` of `node`, or of the head when `None`.
    #[inline]
    fn link_of<'a>(&'a self, node: Option<&'a Node>, level: usize) -> &'a AtomicPtr<u8> {
        match node {
            Some(n) => n.link(level),
            None => &self.head[level],
        }
    }

    /// The last node whose key is before `target` (or equal to it, if `or_equal`); `None` for
    /// the head. With `splice`, also the last such node of every level in use.
    #[inline]
    fn last_before(
        &self,
        target: &[u8],
        or_equal: bool,
        mut splice: Option<&mut [Option<Node>; MAX_HEIGHT]>,
    ) -> Option<Node> {
        let mut x: Option<Node> = None;
        let mut level = self.height.load(Ordering::Acquire);
        while level > 0 {
            level -= 1;
            while let Some(next) = NonNull::new(self.link_of(x.as_ref(), level).load(Ordering::Acquire)).map(Node) {
                // The node after `next` on this level is the one compared next if `next` is
                // passed: start loading it while `next` is compared (RocksDB's list does too).
                crate::prefetch(next.link(level).load(Ordering::Relaxed));
                match crate::key::compare_bytes(next.key(), target) {
                    std::cmp::Ordering::Less => x = Some(next),
                    std::cmp::Ordering::Equal if or_equal => x = Some(next),
                    _ => break,
                }
            }
            if let Some(s) = splice.as_deref_mut() {
                s[level] = x;
            }
        }
        x
    }

    /// The node of `key`, if the list has one.
    pub(super) fn find(&self, key: &[u8]) -> Option<Node> {
        self.seek(key).filter(|n| n.key() == key)
    }

    /// The first node whose key is at or after `target`.
    pub(super) fn seek(&self, target: &[u8]) -> Option<Node> {
        match self.last_before(target, false, None) {
            Some(n) => n.next(),
            None => self.first(),
        }
    }

    /// The last node whose key is at or before `target`.
    pub(super) fn seek_for_prev(&self, target: &[u8]) -> Option<Node> {
        self.last_before(target, true, None)
    }

    /// The first node.
    pub(super) fn first(&self) -> Option<Node> {
        NonNull::new(self.head[0].load(Ordering::Acquire)).map(Node)
    }

    /// The last node.
    pub(super) fn last(&self) -> Option<Node> {
        let mut x: Option<Node> = None;
        let mut level = self.height.load(Ordering::Acquire);
        while level > 0 {
            level -= 1;
            while let Some(next) = NonNull::new(self.link_of(x.as_ref(), level).load(Ordering::Acquire)).map(Node) {
                x = Some(next);
            }
        }
        x
    }

    /// The node after `node`.
    pub(super) fn next(&self, node: Node) -> Option<Node> {
        node.next()
    }

    /// The node before `node` (a search: nodes have no backward links).
    pub(super) fn prev(&self, node: Node) -> Option<Node> {
        self.last_before(node.key(), false, None)
    }

    /// The newest version of `node`.
    #[inline]
    pub(super) fn newest(&self, node: Node) -> Version {
        let at = node.head().load(Ordering::Acquire);
        // SAFETY: a node is published with its first version, and its pointer only ever
        // changes to another version.
        Version { at: unsafe { NonNull::new_unchecked(at) }, base: self.base.load(Ordering::Acquire) }
    }

    /// The oldest version of `node`.
    pub(super) fn oldest(&self, node: Node) -> Version {
        let mut v = self.newest(node);
        while let Some(o) = v.older() {
            v = o;
        }
        v
    }

    /// Writes a version into the value arena: the version and the bytes of memory this took.
    fn new_version(&self, w: &mut Writer, trailer: u64, older: Option<Version>, value: &[u8]) -> (Version, usize) {
        let base = self.base.load(Ordering::Relaxed);
        let mut seq = [0u8; MAX_VARINT_LEN];
        let sl = encode_varint(&mut seq, (trailer >> 8).wrapping_sub(base));
        let mut vlen = [0u8; MAX_VARINT_LEN];
        let vl = encode_varint(&mut vlen, value.len() as u64);
        let link = if older.is_some() { LINK } else { 0 };
        let (p, charge) = w.values.alloc(1 + sl + link + vl + value.len());
        let flags = (trailer & 0x7f) as u8 | if older.is_some() { HAS_OLDER } else { 0 };
        // SAFETY: `p` is that many fresh bytes of the value arena, which no one else can reach
        // yet: the flags, the sequence varint, the older pointer (unaligned), the length varint
        // and the value.
        unsafe {
            let p = p.as_ptr();
            p.write(flags);
            std::ptr::copy_nonoverlapping(seq.as_ptr(), p.add(1), sl);
            if let Some(o) = older {
                p.add(1 + sl).cast::<*mut u8>().write_unaligned(o.at.as_ptr());
            }
            std::ptr::copy_nonoverlapping(vlen.as_ptr(), p.add(1 + sl + link), vl);
            std::ptr::copy_nonoverlapping(value.as_ptr(), p.add(1 + sl + link + vl), value.len());
        }
        (Version { at: p, base }, charge)
    }

    /// Inserts version `trailer` (`seq << 8 | kind`, kind below 128) of `key` with `value`: the
    /// key's node, whether the node is new, and the bytes of memory this took. `hint` is asked
    /// (under the writer lock) what the caller knows of the key's node; `on_new_node` is told
    /// of a node made for the key, before the insert returns. A version already in the list
    /// (the same write applied twice) is left as it is.
    pub(super) fn insert(
        &self,
        key: &[u8],
        trailer: u64,
        value: &[u8],
        hint: impl FnOnce() -> Hint,
        on_new_node: impl FnOnce(Node),
    ) -> (Node, bool, usize) {
        debug_assert!(trailer & 0xff < 0x80, "a kind fits in 7 bits");
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if self.base.load(Ordering::Relaxed) == u64::MAX {
            self.base.store(trailer >> 8, Ordering::Release);
        }
        let mut splice = [None; MAX_HEIGHT];
        let existing = match hint() {
            Hint::Node(n) => Some(n),
            Hint::Absent => {
                self.last_before(key, false, Some(&mut splice));
                None
            }
            Hint::Unknown => {
                let prev = self.last_before(key, false, Some(&mut splice));
                NonNull::new(self.link_of(prev.as_ref(), 0).load(Ordering::Acquire))
                    .map(Node)
                    .filter(|n| n.key() == key)
            }
        };
        if let Some(node) = existing {
            debug_assert_eq!(node.key(), key);
            let newest = self.newest(node);
            if trailer >> 8 > newest.trailer() >> 8 {
                let (v, charge) = self.new_version(&mut w, trailer, Some(newest), value);
                node.head().store(v.at.as_ptr(), Ordering::Release);
                self.len.fetch_add(1, Ordering::Relaxed);
                return (node, false, charge);
            }
            let charge = self.insert_older(&mut w, node, trailer, value);
            return (node, false, charge);
        }
        let (first, value_charge) = self.new_version(&mut w, trailer, None, value);
        let height = w.random_height();
        let mut klen = [0u8; MAX_VARINT_LEN];
        let kl = encode_varint(&mut klen, key.len() as u64);
        let links = LINK * height;
        let size = (links + WORD + kl + key.len()).next_multiple_of(8);
        let (start, node_charge) = if height == 1 { w.nodes.alloc(size) } else { w.tall.alloc(size) };
        // SAFETY: `start` is `size` fresh, zeroed, 8-aligned bytes of the node arena that no one
        // else can reach yet: the links (null) come first, then the newest-version pointer
        // (aligned), the key's length and the key, which fit by the size computed above.
        let node = unsafe {
            let p = start.as_ptr().add(links);
            p.cast::<*mut u8>().write(first.at.as_ptr());
            std::ptr::copy_nonoverlapping(klen.as_ptr(), p.add(WORD), kl);
            std::ptr::copy_nonoverlapping(key.as_ptr(), p.add(WORD + kl), key.len());
            Node(NonNull::new_unchecked(p))
        };
        if height > self.height.load(Ordering::Relaxed) {
            // Levels above the old height have the head as their predecessor (`splice` is
            // `None` there). A reader that sees the new height before the links finds those
            // levels empty and descends.
            self.height.store(height, Ordering::Release);
        }
        for (level, prev) in splice.iter().enumerate().take(height) {
            let prev_link = self.link_of(prev.as_ref(), level);
            node.link(level).store(prev_link.load(Ordering::Relaxed), Ordering::Relaxed);
            prev_link.store(node.0.as_ptr(), Ordering::Release);
        }
        self.len.fetch_add(1, Ordering::Relaxed);
        self.keys.fetch_add(1, Ordering::Relaxed);
        on_new_node(node);
        (node, true, node_charge + value_charge)
    }

    /// Inserts a version no newer than `node`'s newest: nothing if the chain has it already,
    /// else the versions newer than it are copied in front of it and the copy published (see
    /// the module docs). The bytes of memory this took.
    fn insert_older(&self, w: &mut Writer, node: Node, trailer: u64, value: &[u8]) -> usize {
        let seq = trailer >> 8;
        let mut newer = Vec::new();
        let mut at = Some(self.newest(node));
        while let Some(v) = at {
            let s = v.trailer() >> 8;
            if s == seq {
                return 0;
            }
            if s < seq {
                break;
            }
            newer.push(v);
            at = v.older();
        }
        let (mut chain, mut charge) = self.new_version(w, trailer, at, value);
        for v in newer.iter().rev() {
            let (copy, c) = self.new_version(w, v.trailer(), Some(chain), v.value());
            chain = copy;
            charge += c;
        }
        node.head().store(chain.at.as_ptr(), Ordering::Release);
        self.len.fetch_add(1, Ordering::Relaxed);
        charge
    }
}

#[cfg(test)]
mod tests;
