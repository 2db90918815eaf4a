//! The memtable's skip list: internal keys in order, each node laid out with its links and key
//! in one stretch of a node [`arena`](super::arena), as RocksDB's `InlineSkipList` and LevelDB's
//! `SkipList` do, and its value in the value arena. Nodes of height 1 and taller ones come from
//! two arenas, so the upper levels, which a search walks across the whole list, are dense.
//!
//! ```text
//! node:  [link h-1] ... [link 1] [link 0] | [key len << 48 | value pointer][internal key] [pad to 8]
//!                                         ^ the node's address (what a `Node` and the point index hold)
//!    or, for a key of 64 KiB or more or a value pointer above 48 bits (long form):
//!        [link h-1] ... [link 0] | [0][value pointer][key len varint][internal key] [pad to 8]
//! value: [value len varint][value]          (an empty value: a static zero length)
//! ```
//!
//! An internal key is never empty (its trailer is 8 bytes), so a first word whose top 16 bits
//! are zero marks the long form.
//!
//! A node of height `h` (probability `4^-(h-1)·¾`, at most [`MAX_HEIGHT`]) has `h` links, 1.33
//! on average; link `i` is the next node at level `i`. An entry of a 16-byte key and a 100-byte
//! value takes ~144 bytes (a 43-byte node and 101 bytes of value) where `crossbeam_skiplist`'s
//! node (2 links on average, an inline key of fixed size, the allocator's size classes) and the
//! value took ~174.
//!
//! Concurrency: one writer at a time (inserts take the writer lock, which also owns the arenas)
//! and any number of readers that take no lock, as in LevelDB. A node's bytes are all written
//! before the node is linked: the writer sets the new node's links, then stores it into its
//! predecessor's link with `Release`, level 0 first; readers load links with `Acquire`, so a
//! reader that reaches a node through any link sees the node's key, value and the links below
//! that one. Nothing is ever unlinked and no node is ever freed while the list lives: the arenas
//! free every node and value at once when the list is dropped, which needs the last reference to its
//! memtable, and with it every cursor and the point index, which hold [`Node`]s.

use std::cmp::Ordering as Cmp;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::arena::Arena;
use crate::coding::{encode_varint, get_varint, MAX_VARINT_LEN};
use crate::key;

/// The most links a node has: with a branching factor of 4, a list of 4^12 (16 M) entries still
/// descends in about 4 steps a level.
pub(super) const MAX_HEIGHT: usize = 12;

const LINK: usize = std::mem::size_of::<AtomicPtr<u8>>();
/// Bytes of a node's first word (key length and value pointer, or zero in the long form).
const WORD: usize = 8;
/// Value pointers below this fit beside the key length in a node's first word.
const SHORT_POINTER: usize = 1 << 48;
/// Keys shorter than this have their length in a node's first word.
const SHORT_KEY: usize = 1 << 16;

/// The length every empty value points at.
static EMPTY: u8 = 0;

/// A node of a [`SkipList`]: its address, just past its links.
///
/// A `Node` is only ever made by its list, and is valid as long as the list: the memtable module
/// never lets one outlive its memtable (cursors and the point index live inside it or keep it
/// alive).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Node(NonNull<u8>);

// SAFETY: a node's bytes are immutable once it is published, and its links are atomics.
unsafe impl Send for Node {}
unsafe impl Sync for Node {}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Node").field(&self.0).finish()
    }
}

/// A varint at `p` that the arena holds: its value and length.
///
/// # Safety
/// `p` must point at a varint written by [`SkipList::insert`] into a live node.
#[inline]
unsafe fn read_len(p: *const u8) -> (usize, usize) {
    // SAFETY: the caller's; a one-byte varint is read alone. A longer one is a length of 128 or
    // more, so the bytes it describes follow it and the MAX_VARINT_LEN bytes from `p` lie
    // within the node.
    unsafe {
        let first = *p;
        if first < 0x80 {
            return (usize::from(first), 1);
        }
        let (len, n) =
            get_varint(std::slice::from_raw_parts(p, MAX_VARINT_LEN)).expect("the arena's own length varint");
        (len as usize, n)
    }
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

    /// The node's first word.
    #[inline]
    fn word(&self) -> u64 {
        // SAFETY: a node starts with an 8-aligned word written before it was published.
        unsafe { self.0.as_ptr().cast::<u64>().read() }
    }

    /// The node's internal key.
    #[inline]
    pub(super) fn key(&self) -> &[u8] {
        let w = self.word();
        let p = self.0.as_ptr();
        // SAFETY: the node's bytes were written by `SkipList::insert` before it was published
        // and are never written again: in the short form the key's bytes follow the first word,
        // which holds their length; in the long form the value pointer and a length varint come
        // between.
        unsafe {
            if w >> 48 != 0 {
                return std::slice::from_raw_parts(p.add(WORD), (w >> 48) as usize);
            }
            let k = p.add(2 * WORD);
            let (len, n) = read_len(k);
            std::slice::from_raw_parts(k.add(n), len)
        }
    }

    /// The node's value.
    #[inline]
    pub(super) fn value(&self) -> &[u8] {
        let w = self.word();
        // SAFETY: as in `key`: the value pointer is in the first word (short form) or the second
        // (long form), and points at the value's length varint and bytes, in the value arena
        // (alive with the node) or at the static empty value.
        unsafe {
            let v = if w >> 48 != 0 {
                (w as usize & (SHORT_POINTER - 1)) as *const u8
            } else {
                self.0.as_ptr().add(WORD).cast::<*const u8>().read()
            };
            let (len, m) = read_len(v);
            std::slice::from_raw_parts(v.add(m), len)
        }
    }

    /// The next node at level 0.
    #[inline]
    fn next(&self) -> Option<Node> {
        NonNull::new(self.link(0).load(Ordering::Acquire)).map(Node)
    }
}

/// What only the writer touches.
#[derive(Debug)]
struct Writer {
    /// Nodes of height 1: links, value pointer and key.
    nodes: Arena,
    /// Taller nodes, apart so that the levels above 0, which a search walks far, are dense: a
    /// seek into a memtable of 400K entries of 16-byte keys took 1.1-1.7 µs instead of 1.6-2.6
    /// with all nodes in one arena (crossbeam's nodes, segregated by the allocator's size
    /// classes, 1.3-1.8).
    tall: Arena,
    /// Values, with their lengths.
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

/// A skip list of internal keys, with values (see the module docs).
pub(super) struct SkipList {
    /// The head's links: the first node of each level.
    head: [AtomicPtr<u8>; MAX_HEIGHT],
    /// Levels in use (at least 1).
    height: AtomicUsize,
    len: AtomicUsize,
    writer: Mutex<Writer>,
}

impl std::fmt::Debug for SkipList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkipList").field("len", &self.len()).field("height", &self.height).finish()
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
            writer: Mutex::new(Writer {
                nodes: Arena::new(chunk),
                tall: Arena::new((chunk / 4).max(super::arena::MIN_CHUNK)),
                values: Arena::new(chunk),
                rng: 0x9e37_79b9_7f4a_7c15,
            }),
        }
    }

    /// Entries in the list.
    pub(super) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// True when the list holds nothing.
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
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
                match key::compare(next.key(), target) {
                    Cmp::Less => x = Some(next),
                    Cmp::Equal if or_equal => x = Some(next),
                    _ => break,
                }
            }
            if let Some(s) = splice.as_deref_mut() {
                s[level] = x;
            }
        }
        x
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

    /// Inserts `internal_key` with `value`: the node that holds the key, whether it is new, and
    /// the bytes of memory this took. A key already in the list (the same write applied twice)
    /// is left as it is, and its node returned.
    pub(super) fn insert(&self, internal_key: &[u8], value: &[u8]) -> (Node, bool, usize) {
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let height = w.random_height();
        let (value_at, value_charge) = if value.is_empty() {
            (&EMPTY as *const u8, 0)
        } else {
            let mut vlen = [0u8; MAX_VARINT_LEN];
            let vl = encode_varint(&mut vlen, value.len() as u64);
            let (v, charge) = w.values.alloc(vl + value.len());
            // SAFETY: `v` is `vl + value.len()` fresh bytes of the value arena, which no one
            // else can reach yet.
            unsafe {
                std::ptr::copy_nonoverlapping(vlen.as_ptr(), v.as_ptr(), vl);
                std::ptr::copy_nonoverlapping(value.as_ptr(), v.as_ptr().add(vl), value.len());
            }
            (v.as_ptr().cast_const(), charge)
        };
        let short = (value_at as usize) < SHORT_POINTER && internal_key.len() < SHORT_KEY;
        let mut klen = [0u8; MAX_VARINT_LEN];
        let header = if short { WORD } else { 2 * WORD + encode_varint(&mut klen, internal_key.len() as u64) };
        let links = LINK * height;
        let size = (links + header + internal_key.len()).next_multiple_of(8);
        let (start, node_charge) = if height == 1 { w.nodes.alloc(size) } else { w.tall.alloc(size) };
        let charge = node_charge + value_charge;
        // SAFETY: `start` is `size` fresh, zeroed, 8-aligned bytes of the node arena that no one
        // else can reach yet: the links (null) come first, then the first word (aligned), in the
        // long form the value pointer (aligned) and the key's length, and then the key, which
        // fit by the size computed above.
        let node = unsafe {
            let p = start.as_ptr().add(links);
            if short {
                let word = (internal_key.len() as u64) << 48 | value_at as u64;
                p.cast::<u64>().write(word);
            } else {
                p.cast::<u64>().write(0);
                p.add(WORD).cast::<*const u8>().write(value_at);
                std::ptr::copy_nonoverlapping(klen.as_ptr(), p.add(2 * WORD), header - 2 * WORD);
            }
            std::ptr::copy_nonoverlapping(internal_key.as_ptr(), p.add(header), internal_key.len());
            Node(NonNull::new_unchecked(p))
        };
        let mut splice = [None; MAX_HEIGHT];
        self.last_before(internal_key, false, Some(&mut splice));
        if let Some(next) = NonNull::new(self.link_of(splice[0].as_ref(), 0).load(Ordering::Acquire)).map(Node) {
            if next.key() == internal_key {
                return (next, false, charge);
            }
        }
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
        (node, true, charge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::ValueKind;

    /// An internal key in the list's order, for a sorted model.
    #[derive(Clone, PartialEq, Eq)]
    struct Ordered(Vec<u8>);
    impl Ord for Ordered {
        fn cmp(&self, other: &Self) -> Cmp {
            key::compare(&self.0, &other.0)
        }
    }
    impl PartialOrd for Ordered {
        fn partial_cmp(&self, other: &Self) -> Option<Cmp> {
            Some(self.cmp(other))
        }
    }

    fn ikey(user: &str, seq: u64) -> Vec<u8> {
        key::make_internal_key(user.as_bytes(), seq, ValueKind::Put)
    }

    #[test]
    fn heights_follow_a_branching_factor_of_four() {
        let a = || Arena::new(super::super::arena::MIN_CHUNK);
        let mut w = Writer { nodes: a(), tall: a(), values: a(), rng: 1 };
        let mut counts = [0usize; MAX_HEIGHT + 1];
        let n = 400_000;
        for _ in 0..n {
            counts[w.random_height()] += 1;
        }
        assert_eq!(counts[0], 0);
        for (h, &count) in counts.iter().enumerate().take(5).skip(1) {
            let expected = n as f64 * 0.75 / 4f64.powi(h as i32 - 1);
            let got = count as f64;
            assert!((got - expected).abs() < expected * 0.05 + 50.0, "height {h}: {got} vs {expected}");
        }
    }

    /// Against a sorted model: every key in order both ways, seeks at, between, before and past
    /// the keys, and duplicates returning the node already there.
    #[test]
    fn the_list_orders_and_finds_like_a_sorted_model() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let list = SkipList::new(super::super::arena::MIN_CHUNK);
        let mut model = std::collections::BTreeMap::new();
        let (mut charged, mut needed) = (0, 0);
        for i in 0..5000u64 {
            let user = format!("k{:05}", rng.random_range(0..2000));
            let k = ikey(&user, i % 40);
            let v = vec![b'v'; (i % 300) as usize];
            let (node, new, charge) = list.insert(&k, &v);
            charged += charge;
            needed += k.len() + v.len() + 8;
            let was_new = !model.contains_key(&Ordered(k.clone()));
            assert_eq!(new, was_new, "{user}@{}", i % 40);
            if was_new {
                model.insert(Ordered(k.clone()), v.clone());
                assert_eq!((node.key(), node.value()), (&k[..], &v[..]));
            } else {
                assert_eq!(node.key(), &k[..], "a duplicate returns the node already there");
            }
        }
        assert_eq!(list.len(), model.len());
        assert!(charged >= needed, "charged {charged} for {needed} bytes of keys, values and links");
        let forward: Vec<Vec<u8>> =
            std::iter::successors(list.first(), |n| list.next(*n)).map(|n| n.key().to_vec()).collect();
        let expected: Vec<Vec<u8>> = model.keys().map(|k| k.0.clone()).collect();
        assert_eq!(forward, expected);
        let backward: Vec<Vec<u8>> =
            std::iter::successors(list.last(), |n| list.prev(*n)).map(|n| n.key().to_vec()).collect();
        assert_eq!(backward, expected.iter().rev().cloned().collect::<Vec<_>>());
        for _ in 0..3000 {
            let t = ikey(&format!("k{:05}", rng.random_range(0..2100)), rng.random_range(0..45));
            let tk = Ordered(t.clone());
            let ge = model.range(tk.clone()..).next().map(|(k, _)| k.0.clone());
            assert_eq!(list.seek(&t).map(|n| n.key().to_vec()), ge);
            let le = model.range(..=tk).next_back().map(|(k, v)| (k.0.clone(), v.clone()));
            assert_eq!(list.seek_for_prev(&t).map(|n| (n.key().to_vec(), n.value().to_vec())), le);
        }
        assert!(list.seek(&ikey("l", 0)).is_none() && list.seek_for_prev(&ikey("a", 0)).is_none());
    }

    /// Keys of 64 KiB and more take the long form (length varint after the value pointer), and
    /// order and read back with the short ones around them.
    #[test]
    fn long_keys_take_the_long_form_and_keep_their_place() {
        let list = SkipList::new(super::super::arena::MAX_CHUNK);
        let long = |c: u8, len: usize| key::make_internal_key(&vec![c; len], 1, ValueKind::Put);
        let keys =
            [long(b'b', SHORT_KEY), long(b'a', 3), long(b'c', 1 << 20), long(b'b', SHORT_KEY - 9), long(b'b', 10)];
        for (i, k) in keys.iter().enumerate() {
            let value = vec![i as u8; i * 50];
            let (node, new, _) = list.insert(k, &value);
            assert!(new);
            assert_eq!((node.key(), node.value()), (&k[..], &value[..]), "key {i}");
            assert_eq!(node.word() >> 48 == 0, k.len() >= SHORT_KEY, "key {i} of {} bytes", k.len());
        }
        let mut sorted = keys.to_vec();
        sorted.sort_by(|a, b| key::compare(a, b));
        let walked: Vec<Vec<u8>> =
            std::iter::successors(list.first(), |n| list.next(*n)).map(|n| n.key().to_vec()).collect();
        assert_eq!(walked, sorted);
        assert_eq!(list.seek(&keys[0]).map(|n| n.value().to_vec()), Some(vec![0u8; 0]));
        assert_eq!(list.seek(&keys[2]).map(|n| n.value().len()), Some(100));
    }

    #[test]
    fn an_empty_list_has_no_nodes() {
        let list = SkipList::new(super::super::arena::MAX_CHUNK);
        assert!(list.is_empty());
        assert!(list.first().is_none() && list.last().is_none());
        assert!(list.seek(&ikey("a", 1)).is_none() && list.seek_for_prev(&ikey("a", 1)).is_none());
    }

    #[test]
    fn an_entry_of_a_16_byte_key_and_a_100_byte_value_takes_its_bytes_its_links_and_a_pointer() {
        let list = SkipList::new(super::super::arena::MAX_CHUNK);
        let n = 100_000u64;
        let mut charged = 0;
        for i in 0..n {
            let k = key::make_internal_key(
                format!("{:016}", i.wrapping_mul(0x9e37_79b9) % n).as_bytes(),
                i,
                ValueKind::Put,
            );
            charged += list.insert(&k, &[7u8; 100]).2;
        }
        // A node: the first word and 24 key bytes (40), plus 8 bytes a link (4/3 on average);
        // the value: a length byte and 100 bytes.
        let per = charged as f64 / n as f64;
        assert!((140.0..148.0).contains(&per), "{per} bytes an entry");
    }
}
