//! The memtable's skip list: nodes in the order of internal keys, each holding a short chain of
//! versions of one user key, newest first. A node is laid out with its links and key in one
//! stretch of a node [`arena`](super::arena), as RocksDB's `InlineSkipList` and LevelDB's
//! `SkipList` lay out theirs; nodes of height 1 and taller ones come from two arenas, so the
//! upper levels, which a search walks across the whole list, are dense. Versions live in the
//! value arena, but for a small first version, which a node of height 1 holds after the key.
//!
//! ```text
//! node:    [link h-1] ... [link 1] [link 0] | [key len << 48 | newest version pointer][internal key] [pad to 8]
//!                                           ^ the node's address (what a `Node` and the point index hold)
//!    or, a node of height 1 with its first version inline (at most INLINE_VERSION bytes):
//!          [link 0] | [key len << 48 | newest version pointer][internal key][first version] [pad to 8]
//!    or, for a key of 64 KiB or more or a version pointer above 48 bits (long form):
//!          [link h-1] ... [link 0] | [0][newest version pointer][key len varint][internal key] [pad to 8]
//! version: [flags][seq - base varint][older version pointer, if HAS_OLDER][value len varint][value]
//! flags:   kind (bits 0-1) | depth in the chain (bits 2-6) << 2 | HAS_OLDER (bit 7)
//! ```
//!
//! A node's internal key is its user key with the trailer of its first — oldest — version; the
//! node holds that version and up to [`MAX_CHAIN`] - 1 newer ones, so its versions' internal
//! keys run from its own key back towards the previous node's: the list walked node by node,
//! each node's chain newest first, is the order of internal keys. A version's sequence number
//! is stored as its distance from the list's base (the first sequence number inserted), a
//! varint of about three bytes in a memtable of a few hundred thousand writes.
//!
//! **Why chains.** A list of internal keys puts a new version of a key right before the old one,
//! after a descent of the whole list: about `log4(n)` levels of cache misses (a microsecond in a
//! memtable of a million entries). Redis-style workloads rewrite the same keys all the time (a
//! counter, a collection's metadata record on every push or pop, a sorted set member's score):
//! with the key's newest node found through the point index, a new version goes in front of its
//! chain with one allocation and one pointer store, and only every [`MAX_CHAIN`]-th needs the
//! descent, for a new node. Chains stay that short so that no step of a cursor, forward or
//! backward, and no seek inside a key's versions walks more than [`MAX_CHAIN`] of them, however
//! often the key was written: a key written once costs a node and a version, about what it did
//! as an internal key with its value (the version's flags and sequence number add ~4 bytes).
//!
//! **Inline first versions.** A lookup through the point index reads the key's node (to compare
//! the key) and then its newest version: two cache misses when the version sits in the value
//! arena. Most keys of a Redis-style workload are written once per memtable with a small value
//! (a set member, a hash field, a list element, a short string), so a first version of at most
//! [`INLINE_VERSION`] bytes goes into its node, after the key: in the key's cache line or the
//! next one rather than anywhere in the value arena (a memtable read of 16-byte values took
//! 10 % less time, `bench/compare-builds.sh`). Only nodes of height 1 (three in four) take one:
//! the taller nodes' arena, which every search walks, stays dense (with versions of up to 24
//! bytes inline there too, filling a memtable with random keys took 10 % longer and reads
//! gained nothing measurable). A version is a version wherever it lies: newer ones go into the
//! value arena and point at it as at any other.
//!
//! **The splice.** The writer keeps the place its last node went in ([`splice`]); a new key
//! right after or right before it (a sequential load, list pushes, pops' tombstones over
//! consecutive elements) is linked there after a comparison or two, without a descent.
//!
//! **Searches ahead.** A batch's new keys scattered over the list (a group of writes to many
//! members, a pipeline of SETs) each need a descent, and a descent of a large list waits on
//! memory at almost every node. The memtable searches for a window of them at once
//! ([`SkipList::search_places`]): the searches take turns, each loading the node it compares
//! next before the others go on, so their cache misses overlap; each key is then linked from
//! the place found ([`SkipList::seek_place`]), walking forward over whatever the batch linked
//! there since. A random batch's inserts took ~25 % less time (about 1.1 µs → 0.8 µs a key in a
//! memtable of 400K entries).
//!
//! **Walks ahead.** Nodes and versions sit in their arenas in insertion order, which for random
//! keys is unrelated to key order: a cursor walking the list (a flush, a long scan) would miss
//! the cache on every node and again on its version. A step forward asks for the next node's
//! version and the node after it ([`SkipList::prefetch_after`]), so the two misses of a step
//! overlap with the work on the entry before.
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
//! older pointer is written before the version is published and never changed. A search
//! answers with the nodes it compared (`SkipList::search`), never with a link loaded again
//! afterwards: a node linked in between may lie on either side of the target. A version
//! inside a node's range of versions but older than its newest (never inserted by the engine,
//! which applies writes in sequence order, but allowed) is inserted by copying the versions
//! newer than it in front of it and publishing the copy: readers that hold the old ones keep a
//! complete, older chain. Nothing is ever unlinked and nothing is ever freed while the list
//! lives: the arenas free every node and version at once when the list is dropped, which needs
//! the last reference to its memtable, and with it every cursor and the point index, which hold
//! [`Node`]s.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::arena::Arena;
use crate::coding::{encode_varint, MAX_VARINT_LEN};
use crate::key;

mod node;
mod splice;
mod version;
pub(super) use node::Node;
use splice::Splice;
pub(super) use splice::{Place, MAX_SEARCHES};
pub(super) use version::Version;
use version::{EncodedVersion, KIND_BITS};

/// The most links a node has: with a branching factor of 4, a list of 4^12 (16 M) keys still
/// descends in about 4 steps a level.
pub(super) const MAX_HEIGHT: usize = 12;

const LINK: usize = std::mem::size_of::<AtomicPtr<u8>>();
/// Bytes of a node's newest-version pointer.
const WORD: usize = 8;
/// Version pointers below this fit beside the key length in a node's first word.
const SHORT_POINTER: usize = 1 << 48;
/// Internal keys shorter than this have their length in a node's first word.
const SHORT_KEY: usize = 1 << 16;
/// Versions a node holds at most: a new version of a key whose newest node holds this many
/// goes into a node of its own.
pub(super) const MAX_CHAIN: usize = 16;

/// A first version of at most this many bytes goes into its node, if the node has height 1,
/// after the key rather than into the value arena: a lookup that finds the node finds the value
/// in the same or the next cache line instead of waiting on memory again.
const INLINE_VERSION: usize = 48;

/// What the caller knows about the key it inserts (from the point index).
#[derive(Debug, Clone, Copy)]
pub(super) enum Hint {
    /// This is the key's newest node.
    Node(Node),
    /// The list has no version of the key.
    Absent,
    /// Nothing: the list is searched.
    Unknown,
}

/// What only the writer touches.
#[derive(Debug)]
struct Writer {
    /// Nodes of height 1: links, newest-version pointer, key (and a small first version).
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
    /// Where the last node went in (see [`Splice`]).
    splice: Splice,
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

/// A skip list of internal keys, each node with a chain of versions (see the module docs).
pub(super) struct SkipList {
    /// The head's links: the first node of each level.
    head: [AtomicPtr<u8>; MAX_HEIGHT],
    /// Levels in use (at least 1).
    height: AtomicUsize,
    /// Versions in the list.
    len: AtomicUsize,
    /// Nodes in the list.
    nodes: AtomicUsize,
    /// Sequence numbers are stored relative to this: the first one inserted (set before the
    /// first version is published).
    base: AtomicU64,
    writer: Mutex<Writer>,
}

impl std::fmt::Debug for SkipList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkipList")
            .field("len", &self.len())
            .field("nodes", &self.nodes.load(Ordering::Relaxed))
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
            nodes: AtomicUsize::new(0),
            base: AtomicU64::new(u64::MAX),
            writer: Mutex::new(Writer {
                nodes: Arena::new(chunk),
                tall: Arena::new((chunk / 4).max(super::arena::MIN_CHUNK)),
                values: Arena::new(chunk),
                rng: 0x9e37_79b9_7f4a_7c15,
                splice: Splice::default(),
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

    /// Nodes in the list.
    #[cfg(test)]
    pub(super) fn nodes(&self) -> usize {
        self.nodes.load(Ordering::Relaxed)
    }

    /// Link `level` of `node`, or of the head when `None`.
    #[inline]
    fn link_of<'a>(&'a self, node: Option<&'a Node>, level: usize) -> &'a AtomicPtr<u8> {
        match node {
            Some(n) => n.link(level),
            None => &self.head[level],
        }
    }

    /// The last node whose internal key is before `target` (`None`: the head) and the node after
    /// it, the first at or after `target` (`None`: the end), as the search compared them.
    ///
    /// The second is the node the search saw after the first, not the first's link loaded
    /// again: the writer may link a node between the two at any time, and such a node may
    /// well be before `target` (a seek that reloaded the link could land before its target,
    /// and a lookup at an older snapshot find a node of its key holding only newer versions).
    #[inline]
    fn search(&self, target: &[u8]) -> (Option<Node>, Option<Node>) {
        let mut x: Option<Node> = None;
        let mut after = None;
        let mut level = self.height.load(Ordering::Acquire);
        while level > 0 {
            level -= 1;
            after = None;
            while let Some(next) = NonNull::new(self.link_of(x.as_ref(), level).load(Ordering::Acquire)).map(Node) {
                // The node after `next` on this level is the one compared next if `next` is
                // passed: start loading it while `next` is compared (RocksDB's list does too).
                crate::prefetch(next.link(level).load(Ordering::Relaxed));
                if key::compare(next.key(), target) != std::cmp::Ordering::Less {
                    after = Some(next);
                    break;
                }
                x = Some(next);
            }
        }
        (x, after)
    }

    /// The first node whose internal key is at or after `target`: the node holding the first
    /// version at or after it, if any node does.
    pub(super) fn seek(&self, target: &[u8]) -> Option<Node> {
        self.search(target).1
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

    /// Starts loading what a walk forward from `node` reads next, so that the walk waits on
    /// memory about once a node instead of twice: the next node's newest version (its first two
    /// cache lines: a 100-byte value spans both; the next node itself was asked for one step
    /// before) and the node after that. Nodes and versions sit in their arenas in insertion
    /// order, which is random against key order, so every step of a walk (a flush, a long
    /// scan) would otherwise miss the cache twice in a row. A flush of 400K entries of 16-byte
    /// keys and 100-byte values took 220-260 ms instead of 320-370.
    #[inline]
    pub(super) fn prefetch_after(&self, node: Node) {
        if let Some(next) = node.next() {
            let version = next.newest_at();
            crate::prefetch(version);
            crate::prefetch(version.wrapping_add(64));
            if let Some(after) = next.next() {
                crate::prefetch(after.0.as_ptr().wrapping_sub(LINK));
            }
        }
    }

    /// The node before `node` (a search: nodes have no backward links).
    pub(super) fn prev(&self, node: Node) -> Option<Node> {
        self.search(node.key()).0
    }

    /// The last node before `target` (the last node, if none is at or after it) and the first
    /// node at or after it, as one search saw them (see [`SkipList::search`]).
    pub(super) fn around(&self, target: &[u8]) -> (Option<Node>, Option<Node>) {
        self.search(target)
    }

    /// The newest version of `node`.
    #[inline]
    pub(super) fn newest(&self, node: Node) -> Version {
        let at = node.newest_at();
        // SAFETY: a node is published with its first version, and its pointer only ever
        // changes to another version.
        Version { at: unsafe { NonNull::new_unchecked(at) }, base: self.base.load(Ordering::Acquire) }
    }

    /// The oldest version of `node` (at most [`MAX_CHAIN`] steps).
    pub(super) fn oldest(&self, node: Node) -> Version {
        let newest = self.newest(node);
        newest.last_at_or_above(0).unwrap_or(newest)
    }

    /// Writes a version into the value arena: the version and the bytes of memory this took.
    fn new_version(&self, w: &mut Writer, trailer: u64, older: Option<Version>, value: &[u8]) -> (Version, usize) {
        let base = self.base.load(Ordering::Relaxed);
        Self::write_version(w, base, EncodedVersion::new(base, trailer, older, value.len()), older, value)
    }

    /// Writes `encoded` (encoded against the list's `base`, with `older` and `value`) into the
    /// value arena: the version and the bytes of memory this took.
    fn write_version(
        w: &mut Writer,
        base: u64,
        encoded: EncodedVersion,
        older: Option<Version>,
        value: &[u8],
    ) -> (Version, usize) {
        let (p, charge) = w.values.alloc(encoded.len());
        // SAFETY: `p` is that many fresh bytes of the value arena, which no one else can reach yet.
        unsafe { encoded.write(p.as_ptr(), older, value) };
        (Version { at: p, base }, charge)
    }

    /// Inserts version `trailer` (`seq << 8 | kind`) of `user_key` with `value`: the node that
    /// holds it, whether the node is new, and the bytes of memory this took. `hint` is asked
    /// (under the writer lock) what the caller knows of the key's newest node; `on_new_node`
    /// is told of a node made for the key, before the insert returns. A version already in the
    /// list (the same write applied twice) is left as it is. `place`, if the caller searched
    /// for the version's internal key ahead ([`SkipList::search_places`]), saves the search.
    pub(super) fn insert(
        &self,
        user_key: &[u8],
        trailer: u64,
        value: &[u8],
        hint: impl FnOnce() -> Hint,
        on_new_node: impl FnOnce(Node),
        place: Option<&Place>,
    ) -> (Node, bool, usize) {
        debug_assert!(trailer & 0xff <= u64::from(KIND_BITS), "a kind fits in two bits");
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if self.base.load(Ordering::Relaxed) == u64::MAX {
            self.base.store(trailer >> 8, Ordering::Release);
        }
        let mut ikey = [0u8; 64];
        let heap;
        let ikey: &[u8] = if user_key.len() + key::TRAILER_LEN <= ikey.len() {
            let n = user_key.len();
            ikey[..n].copy_from_slice(user_key);
            ikey[n..n + key::TRAILER_LEN].copy_from_slice(&trailer.to_le_bytes());
            &ikey[..n + key::TRAILER_LEN]
        } else {
            heap = [user_key, &trailer.to_le_bytes()[..]].concat();
            &heap
        };
        // The node that would hold the version: the key's newest node, or the one a search
        // for the version's internal key finds (the first node at or after it).
        let mut searched = false;
        let mut unused = 0;
        let found = match hint() {
            Hint::Node(n) => Some(n),
            Hint::Absent => None,
            Hint::Unknown => {
                searched = true;
                self.seek_to(&mut w, ikey, place);
                w.splice.next[0].filter(|n| n.user_key() == user_key)
            }
        };
        if let Some(node) = found {
            let newest = self.newest(node);
            let (seq, newest_seq) = (trailer >> 8, newest.trailer() >> 8);
            if seq > newest_seq && newest.depth() + 1 < MAX_CHAIN {
                let (v, charge) = self.new_version(&mut w, trailer, Some(newest), value);
                if node.set_newest(v.at.as_ptr()) {
                    self.len.fetch_add(1, Ordering::Relaxed);
                    return (node, false, charge);
                }
                // A version address the node's short form cannot hold (only where user memory
                // is mapped above 2^48): the version starts a node of its own instead (the one
                // written is left unused, its memory still counted).
                unused = charge;
            }
            if seq <= newest_seq {
                return self.insert_older(&mut w, ikey, user_key, trailer, value, on_new_node);
            }
            // The key's newest node is full: the version starts a node of its own, before it.
        }
        if !searched {
            self.seek_to(&mut w, ikey, place);
        }
        let (node, new, charge) = self.link_new(&mut w, ikey, trailer, value, on_new_node);
        (node, new, charge + unused)
    }

    /// Moves the writer's splice to `ikey`: from `place` if one was found for it, else by
    /// [`SkipList::seek_splice`].
    fn seek_to(&self, w: &mut Writer, ikey: &[u8], place: Option<&Place>) {
        match place {
            Some(place) => self.seek_place(w, ikey, place),
            None => self.seek_splice(w, ikey),
        }
    }

    /// Makes a node for `ikey` holding one version, linked at the writer's splice (which
    /// [`SkipList::seek_splice`] moved to `ikey`), and moves the splice past the node (or before
    /// it, when keys come in descending order): the node and the bytes of memory it took.
    fn link_new(
        &self,
        w: &mut Writer,
        ikey: &[u8],
        trailer: u64,
        value: &[u8],
        on_new_node: impl FnOnce(Node),
    ) -> (Node, bool, usize) {
        let height = w.random_height();
        let links = LINK * height;
        let base = self.base.load(Ordering::Relaxed);
        let encoded = EncodedVersion::new(base, trailer, None, value.len());
        let mut unused = 0;
        if height == 1 && encoded.len() <= INLINE_VERSION && ikey.len() < SHORT_KEY {
            // The first version in the node, after the key (see the module docs).
            let size = (links + WORD + ikey.len() + encoded.len()).next_multiple_of(8);
            let (start, charge) = w.nodes.alloc(size);
            if (start.as_ptr() as usize) + size <= SHORT_POINTER {
                // SAFETY: `start` is `size` fresh, zeroed, 8-aligned bytes of the node arena that no
                // one else can reach yet: the link (null), the first word (aligned), the key and
                // the version, which fit by the size computed above; the version's address fits
                // the short form (checked above).
                let node = unsafe {
                    let p = start.as_ptr().add(links);
                    let v = p.add(WORD + ikey.len());
                    encoded.write(v, None, value);
                    p.cast::<u64>().write((ikey.len() as u64) << 48 | v as u64);
                    std::ptr::copy_nonoverlapping(ikey.as_ptr(), p.add(WORD), ikey.len());
                    Node(NonNull::new_unchecked(p))
                };
                return (self.publish(w, node, height, ikey, on_new_node), true, charge);
            }
            // Memory mapped above 2^48 (which mmap never returns unasked): the version goes into
            // the value arena below and the node is made again; these bytes stay unused, counted.
            unused = charge;
        }
        let (first, value_charge) = Self::write_version(w, base, encoded, None, value);
        let short = (first.at.as_ptr() as usize) < SHORT_POINTER && ikey.len() < SHORT_KEY;
        let mut klen = [0u8; MAX_VARINT_LEN];
        let header = if short { WORD } else { 2 * WORD + encode_varint(&mut klen, ikey.len() as u64) };
        let size = (links + header + ikey.len()).next_multiple_of(8);
        let (start, node_charge) = if height == 1 { w.nodes.alloc(size) } else { w.tall.alloc(size) };
        // SAFETY: `start` is `size` fresh, zeroed, 8-aligned bytes of the node arena that no one
        // else can reach yet: the links (null) come first, then the first word (aligned), in the
        // long form the version pointer (aligned) and the key's length, and then the key, which
        // fit by the size computed above.
        let node = unsafe {
            let p = start.as_ptr().add(links);
            if short {
                p.cast::<u64>().write((ikey.len() as u64) << 48 | first.at.as_ptr() as u64);
            } else {
                p.cast::<u64>().write(0);
                p.add(WORD).cast::<*mut u8>().write(first.at.as_ptr());
                std::ptr::copy_nonoverlapping(klen.as_ptr(), p.add(2 * WORD), header - 2 * WORD);
            }
            std::ptr::copy_nonoverlapping(ikey.as_ptr(), p.add(header), ikey.len());
            Node(NonNull::new_unchecked(p))
        };
        (self.publish(w, node, height, ikey, on_new_node), true, node_charge + value_charge + unused)
    }

    /// Links `node` (of `height`, internal key `ikey`, written whole) at the writer's splice and
    /// moves the splice past it (or before it, when keys come in descending order).
    fn publish(&self, w: &mut Writer, node: Node, height: usize, ikey: &[u8], on_new_node: impl FnOnce(Node)) -> Node {
        if height > self.height.load(Ordering::Relaxed) {
            // Levels above the old height have the head as their predecessor (the splice's
            // pairs there are the head and the end). A reader that sees the new height before the links finds those
            // levels empty and descends.
            self.height.store(height, Ordering::Release);
        }
        let sp = &mut w.splice;
        for level in 0..height {
            let prev_link = self.link_of(sp.prev[level].as_ref(), level);
            debug_assert_eq!(
                prev_link.load(Ordering::Relaxed),
                sp.next[level].map_or(std::ptr::null_mut(), |n| n.0.as_ptr()),
                "the splice is tight"
            );
            node.link(level).store(prev_link.load(Ordering::Relaxed), Ordering::Relaxed);
            prev_link.store(node.0.as_ptr(), Ordering::Release);
        }
        let descending = sp.last.is_some_and(|last| key::compare(ikey, last.key()) == std::cmp::Ordering::Less);
        let side = if descending { &mut sp.next } else { &mut sp.prev };
        side[..height].fill(Some(node));
        sp.last = Some(node);
        self.len.fetch_add(1, Ordering::Relaxed);
        self.nodes.fetch_add(1, Ordering::Relaxed);
        on_new_node(node);
        node
    }

    /// Inserts a version no newer than the key's newest (see the module docs): nothing if the
    /// list has it already; into the node whose range of versions it falls in, by copying the
    /// newer ones in front of it; else as a node of its own.
    fn insert_older(
        &self,
        w: &mut Writer,
        ikey: &[u8],
        user_key: &[u8],
        trailer: u64,
        value: &[u8],
        on_new_node: impl FnOnce(Node),
    ) -> (Node, bool, usize) {
        let seq = trailer >> 8;
        self.seek_splice(w, ikey);
        // The first node at or after the version: its oldest version is at or before it.
        let holder = w.splice.next[0].filter(|n| n.user_key() == user_key && self.newest(*n).trailer() >> 8 >= seq);
        let Some(node) = holder else {
            return self.link_new(w, ikey, trailer, value, on_new_node);
        };
        let mut newer = Vec::new();
        let mut at = Some(self.newest(node));
        while let Some(v) = at {
            let s = v.trailer() >> 8;
            if s == seq {
                return (node, false, 0);
            }
            if s < seq {
                break;
            }
            newer.push(v);
            at = v.older();
        }
        // A full node grows one longer (splitting it would take its newer versions out of one
        // node and into another, which readers could see half done): only versions inserted
        // out of order, which the engine never inserts, make a chain pass MAX_CHAIN.
        let (mut chain, mut charge) = self.new_version(w, trailer, at, value);
        for v in newer.iter().rev() {
            let (copy, c) = self.new_version(w, v.trailer(), Some(chain), v.value());
            chain = copy;
            charge += c;
        }
        if !node.set_newest(chain.at.as_ptr()) {
            // See `insert`. A node of its own would sit inside this node's range of versions:
            // this needs both a version inserted out of order (which the engine never does)
            // and user memory mapped above 2^48 (which mmap never returns unasked).
            debug_assert!(false, "an out-of-order version whose copy cannot be published");
            return self.link_new(w, ikey, trailer, value, on_new_node);
        }
        self.len.fetch_add(1, Ordering::Relaxed);
        (node, false, charge)
    }
}

#[cfg(test)]
mod tests;
