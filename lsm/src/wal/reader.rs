//! Reading records back from a log, telling a torn tail apart from damage in the middle.

use std::borrow::Cow;

use super::{FragmentType, BLOCK_SIZE, HEADER_SIZE};
use crate::coding::{checksum, read_u32};

/// A complete record read from a log.
#[derive(Debug)]
pub struct Record<'a> {
    /// Offset of the record's first fragment.
    pub offset: u64,
    /// Offset just past the record's last fragment.
    pub end: u64,
    /// The payload (borrowed when the record was one fragment).
    pub payload: Cow<'a, [u8]>,
}

/// Where and why reading stopped before the end of the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Offset of the first byte that could not be used (the end of the last good record).
    pub offset: u64,
    /// What was wrong.
    pub reason: String,
    /// Whether a well-formed record starts somewhere after the damage. When it does, the damage
    /// is not a torn tail but corruption inside the log.
    pub valid_data_after: bool,
}

/// Reads records from the bytes of a log file (the whole file, or its tail from a record
/// boundary: see [`LogReader::with_base`]).
#[derive(Debug)]
pub struct LogReader<'a> {
    data: &'a [u8],
    /// File offset of `data[0]`: block boundaries are computed on file offsets.
    base: usize,
    pos: usize,
    /// Offset after the last complete record returned.
    good_end: usize,
    damage: Option<Damage>,
}

enum Fragment<'a> {
    Ok { kind: FragmentType, payload: &'a [u8], start: usize },
    Eof,
    Bad(String),
}

impl<'a> LogReader<'a> {
    /// Reads from the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self::with_base(data, 0)
    }

    /// Reads `data`, which holds the log from file offset `base` (a record boundary) on.
    pub fn with_base(data: &'a [u8], base: u64) -> Self {
        LogReader { data, base: base as usize, pos: 0, good_end: 0, damage: None }
    }

    /// File offset just past the last complete record returned so far.
    pub fn good_end(&self) -> u64 {
        (self.base + self.good_end) as u64
    }

    /// Why reading stopped early, if it did (available once `next_record` returned `None`).
    pub fn damage(&self) -> Option<&Damage> {
        self.damage.as_ref()
    }

    /// After damage, moves to the start of the next intact record (a FULL or FIRST fragment)
    /// after it and clears the damage, so reading can go on; false if no intact record follows.
    /// Records the skipped bytes no longer count: recovery that salvages data uses this.
    pub fn skip_damage(&mut self) -> bool {
        if self.damage.take().is_none() {
            return true;
        }
        let mut from = self.pos + 1;
        while let Some(at) = next_valid_fragment(self.data, self.base, from) {
            if matches!(FragmentType::from_u8(self.data[at + 6]), Some(FragmentType::Full | FragmentType::First)) {
                self.pos = at;
                self.good_end = at;
                return true;
            }
            from = at + 1;
        }
        self.pos = self.data.len();
        false
    }

    /// The next complete record, or `None` at the end of the data or at the first damage.
    pub fn next_record(&mut self) -> Option<Record<'a>> {
        if self.damage.is_some() {
            return None;
        }
        let mut assembled: Option<(usize, Vec<u8>)> = None;
        loop {
            match self.next_fragment() {
                Fragment::Eof => {
                    if assembled.is_some() {
                        self.fail("record cut off by end of file");
                    }
                    return None;
                }
                Fragment::Bad(reason) => {
                    self.fail(&reason);
                    return None;
                }
                Fragment::Ok { kind, payload, start } => match (kind, assembled.as_mut()) {
                    (FragmentType::Full, None) => {
                        self.good_end = self.pos;
                        let (offset, end) = ((self.base + start) as u64, (self.base + self.pos) as u64);
                        return Some(Record { offset, end, payload: Cow::Borrowed(payload) });
                    }
                    (FragmentType::First, None) => assembled = Some((start, payload.to_vec())),
                    (FragmentType::Middle, Some((_, buf))) => buf.extend_from_slice(payload),
                    (FragmentType::Last, Some(_)) => {
                        let (offset, mut buf) = assembled.take().unwrap_or_default();
                        buf.extend_from_slice(payload);
                        self.good_end = self.pos;
                        let (offset, end) = ((self.base + offset) as u64, (self.base + self.pos) as u64);
                        return Some(Record { offset, end, payload: Cow::Owned(buf) });
                    }
                    (k, _) => {
                        self.fail_intact(&format!("unexpected {k:?} fragment"));
                        return None;
                    }
                },
            }
        }
    }

    fn fail(&mut self, reason: &str) {
        // Look for intact data after the damaged fragment (which starts at `pos`): any in the
        // same block or later makes this corruption, not a torn tail.
        let valid_data_after = has_valid_fragment_after(self.data, self.base, self.pos + 1);
        self.damage =
            Some(Damage { offset: (self.base + self.good_end) as u64, reason: reason.to_string(), valid_data_after });
    }

    /// Like [`LogReader::fail`] for a fragment that is itself intact but out of place (a
    /// record's middle or end without its start): intact data follows the damage by definition.
    fn fail_intact(&mut self, reason: &str) {
        self.damage = Some(Damage {
            offset: (self.base + self.good_end) as u64,
            reason: reason.to_string(),
            valid_data_after: true,
        });
    }

    fn next_fragment(&mut self) -> Fragment<'a> {
        loop {
            let left_in_block = BLOCK_SIZE - (self.base + self.pos) % BLOCK_SIZE;
            if left_in_block < HEADER_SIZE {
                // Block trailer padding.
                self.pos += left_in_block;
                continue;
            }
            if self.pos >= self.data.len() {
                return Fragment::Eof;
            }
            let start = self.pos;
            let Some(header) = self.data.get(start..start + HEADER_SIZE) else {
                return Fragment::Bad("truncated fragment header".into());
            };
            if header.iter().all(|&b| b == 0) {
                // A mapped WAL is preallocated with zeros: where nothing valid follows, this is
                // the end of what was written, not damage.
                if !has_valid_fragment_after(self.data, self.base, self.pos + 1) {
                    return Fragment::Eof;
                }
                return Fragment::Bad("zeroed region inside the log".into());
            }
            let stored = read_u32(header, 0).unwrap_or(0);
            let len = usize::from(u16::from_le_bytes([header[4], header[5]]));
            let type_byte = header[6];
            if HEADER_SIZE + len > left_in_block {
                return Fragment::Bad(format!("fragment length {len} crosses a block boundary"));
            }
            let Some(payload) = self.data.get(start + HEADER_SIZE..start + HEADER_SIZE + len) else {
                return Fragment::Bad("fragment cut off by end of file".into());
            };
            let Some(kind) = FragmentType::from_u8(type_byte) else {
                return Fragment::Bad(format!("unknown fragment type {type_byte}"));
            };
            if checksum(type_byte, payload) != stored {
                return Fragment::Bad("fragment checksum mismatch".into());
            }
            self.pos = start + HEADER_SIZE + len;
            return Fragment::Ok { kind, payload, start };
        }
    }
}

/// True if a well-formed fragment (header, length within its block, checksum) starts at any
/// offset at or after `from`, in the same block or a later one. Used to decide whether damage is
/// a torn tail (nothing intact follows it) or corruption in the middle of the log. Every offset
/// is tried, since damage can shift where fragments appear to start; a false match needs a
/// 32-bit checksum to agree by chance.
fn has_valid_fragment_after(data: &[u8], base: usize, from: usize) -> bool {
    next_valid_fragment(data, base, from).is_some()
}

/// Where the first well-formed fragment at or after `from` starts (see
/// [`has_valid_fragment_after`]).
fn next_valid_fragment(data: &[u8], base: usize, from: usize) -> Option<usize> {
    let mut pos = from;
    while pos + HEADER_SIZE <= data.len() {
        // A fragment's type byte (header offset 6) is 1..=4: skip to the next such byte, so the
        // zero-filled rest of a preallocated log is passed over quickly.
        pos += data[pos + 6..].iter().position(|b| (1..=4).contains(b))?;
        if pos + HEADER_SIZE > data.len() {
            return None;
        }
        let left_in_block = BLOCK_SIZE - (base + pos) % BLOCK_SIZE;
        if left_in_block < HEADER_SIZE {
            pos += left_in_block;
            continue;
        }
        if fragment_at(data, pos, left_in_block) {
            return Some(pos);
        }
        pos += 1;
    }
    None
}

/// True if a well-formed fragment starts at `pos` (with `left_in_block` bytes left in its block).
fn fragment_at(data: &[u8], pos: usize, left_in_block: usize) -> bool {
    let Some(header) = data.get(pos..pos + HEADER_SIZE) else { return false };
    let type_byte = header[6];
    if FragmentType::from_u8(type_byte).is_none() {
        return false; // also every all-zero header: type 0 is not a fragment type
    }
    let len = usize::from(u16::from_le_bytes([header[4], header[5]]));
    if HEADER_SIZE + len > left_in_block {
        return false;
    }
    let Some(payload) = data.get(pos + HEADER_SIZE..pos + HEADER_SIZE + len) else { return false };
    checksum(type_byte, payload) == read_u32(header, 0).unwrap_or(0)
}
