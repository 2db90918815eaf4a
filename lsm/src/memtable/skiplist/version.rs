//! A version of a key in the memtable's skip list (see [`super`]): its kind, sequence number,
//! value and the next older version of its node, packed in the value arena (or, a small first
//! version, in its node after the key).
//!
//! ```text
//! version: [flags][seq - base varint][older version pointer, if HAS_OLDER][value len varint][value]
//! flags:   kind (bits 0-1) | depth in the chain (bits 2-6) << 2 | HAS_OLDER (bit 7)
//! ```

use std::ptr::NonNull;

use crate::coding::{encode_varint, MAX_VARINT_LEN};

/// Bytes of a pointer.
pub(super) const POINTER: usize = std::mem::size_of::<*mut u8>();
/// Bit 7 of a version's flags: a pointer to the next older version follows.
pub(super) const HAS_OLDER: u8 = 0x80;
/// Bits 0-1 of a version's flags: its kind.
pub(super) const KIND_BITS: u8 = 0x03;

/// One version of a node's key: a kind, a sequence number and a value (see the module docs).
/// Valid as long as its list, as a [`super::Node`] is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::memtable) struct Version {
    /// Where its bytes start.
    pub(super) at: NonNull<u8>,
    /// The list's base sequence number.
    pub(super) base: u64,
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
/// `p` must point at a varint written by [`super::SkipList`] into a live node or version.
#[inline]
pub(super) unsafe fn read_len(p: *const u8) -> (usize, usize) {
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

impl Version {
    /// The version's flags (kind, depth, [`HAS_OLDER`]).
    #[inline]
    fn flags(&self) -> u8 {
        // SAFETY: a version's bytes were written before it was published, never again.
        unsafe { *self.at.as_ptr() }
    }

    /// The sequence number varint's value and length.
    #[inline]
    fn seq_delta(&self) -> (u64, usize) {
        // SAFETY: the varint follows the flags (see `SkipList::new_version`).
        unsafe { read_varint(self.at.as_ptr().add(1)) }
    }

    /// The internal-key trailer of this version (`seq << 8 | kind`).
    #[inline]
    pub(in crate::memtable) fn trailer(&self) -> u64 {
        let (delta, _) = self.seq_delta();
        self.base.wrapping_add(delta) << 8 | u64::from(self.flags() & KIND_BITS)
    }

    /// How many versions of its node are older than this one.
    #[inline]
    pub(super) fn depth(&self) -> usize {
        usize::from((self.flags() >> 2) & 0x1f)
    }

    /// Where the older pointer (if any) is.
    #[inline]
    fn after_seq(&self) -> *const u8 {
        let (_, n) = self.seq_delta();
        // SAFETY: within the version (see `SkipList::new_version`).
        unsafe { self.at.as_ptr().add(1 + n) }
    }

    /// The next older version of the node.
    #[inline]
    pub(in crate::memtable) fn older(&self) -> Option<Version> {
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
    pub(in crate::memtable) fn value(&self) -> &[u8] {
        let skip = if self.flags() & HAS_OLDER != 0 { POINTER } else { 0 };
        // SAFETY: the value's length varint and bytes follow (see `SkipList::new_version`).
        unsafe {
            let v = self.after_seq().add(skip);
            let (len, m) = read_len(v);
            std::slice::from_raw_parts(v.add(m), len)
        }
    }

    /// Where the version's bytes start (for a prefetch).
    pub(in crate::memtable) fn addr(self) -> *const u8 {
        self.at.as_ptr()
    }

    /// The first version from this one down its chain whose trailer is at or below `ceiling`.
    pub(in crate::memtable) fn first_at_or_below(self, ceiling: u64) -> Option<Version> {
        let mut version = Some(self);
        while let Some(v) = version.filter(|v| v.trailer() > ceiling) {
            version = v.older();
        }
        version
    }

    /// The last version from this one down its chain whose trailer is at or above `floor`
    /// (None if this one's is below it): with `floor` 0, the chain's oldest.
    pub(in crate::memtable) fn last_at_or_above(self, floor: u64) -> Option<Version> {
        let mut last = None;
        let mut version = Some(self);
        while let Some(v) = version.filter(|v| v.trailer() >= floor) {
            last = Some(v);
            version = v.older();
        }
        last
    }
}

/// A version's bytes but its value, encoded (see the module docs' layout): what the writer
/// puts into the value arena or, for a small first version, into its node.
pub(super) struct EncodedVersion {
    flags: u8,
    seq: [u8; MAX_VARINT_LEN],
    seq_len: usize,
    value_len: [u8; MAX_VARINT_LEN],
    value_len_len: usize,
    value: usize,
    older: bool,
}

impl EncodedVersion {
    /// Version `trailer` of a list whose base is `base`, with a value of `value` bytes, on top
    /// of `older` if there is one.
    pub(super) fn new(base: u64, trailer: u64, older: Option<Version>, value: usize) -> EncodedVersion {
        let mut seq = [0u8; MAX_VARINT_LEN];
        let seq_len = encode_varint(&mut seq, (trailer >> 8).wrapping_sub(base));
        let mut value_len = [0u8; MAX_VARINT_LEN];
        let value_len_len = encode_varint(&mut value_len, value as u64);
        // Saturating: only versions inserted out of order make a chain longer than MAX_CHAIN.
        let depth = older.map_or(0, |o| (o.depth() + 1).min(0x1f));
        let flags = (trailer as u8 & KIND_BITS) | (depth as u8) << 2 | if older.is_some() { HAS_OLDER } else { 0 };
        EncodedVersion { flags, seq, seq_len, value_len, value_len_len, value, older: older.is_some() }
    }

    /// Bytes the version takes.
    pub(super) fn len(&self) -> usize {
        1 + self.seq_len + if self.older { POINTER } else { 0 } + self.value_len_len + self.value
    }

    /// Writes the version at `p`: the flags, the sequence varint, the older pointer
    /// (unaligned), the length varint and `value`.
    ///
    /// # Safety
    /// `p` must be [`EncodedVersion::len`] bytes that no one else can reach yet; `older` and
    /// `value` must be what the version was encoded with.
    pub(super) unsafe fn write(&self, p: *mut u8, older: Option<Version>, value: &[u8]) {
        debug_assert_eq!((older.is_some(), value.len()), (self.older, self.value));
        let link = if self.older { POINTER } else { 0 };
        // SAFETY: the caller's: all within the version's bytes.
        unsafe {
            p.write(self.flags);
            std::ptr::copy_nonoverlapping(self.seq.as_ptr(), p.add(1), self.seq_len);
            if let Some(o) = older {
                p.add(1 + self.seq_len).cast::<*mut u8>().write_unaligned(o.at.as_ptr());
            }
            std::ptr::copy_nonoverlapping(self.value_len.as_ptr(), p.add(1 + self.seq_len + link), self.value_len_len);
            std::ptr::copy_nonoverlapping(
                value.as_ptr(),
                p.add(1 + self.seq_len + link + self.value_len_len),
                value.len(),
            );
        }
    }
}
