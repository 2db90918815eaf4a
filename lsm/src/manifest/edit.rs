//! Version edits: the records of the manifest log.
//!
//! ```text
//! edit  = field*
//! field = 1 log_number varint | 2 next_file_number varint | 3 last_sequence varint
//!       | 4 deleted: level varint, number varint
//!       | 5 added:   level varint, number varint, size varint, smallest lp, largest lp,
//!                    smallest_seq varint, largest_seq varint, entries varint,
//!                    range_tombstones varint
//!       | 6 added:   the fields of 5, then tombstones varint, marked_for_compaction varint (0/1)
//! ```
//! Edits are written with 6; 5 (older manifests) reads as no tombstones, not marked.
//! (`lp` = varint length then bytes; every field starts with its tag as a varint.)

use crate::coding::{put_length_prefixed, put_varint, Reader};

/// Number of levels in the tree.
pub const NUM_LEVELS: usize = 7;

/// A table added to a level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFile {
    /// File number.
    pub number: u64,
    /// Bytes on disk.
    pub size: u64,
    /// Smallest internal key.
    pub smallest: Vec<u8>,
    /// Largest internal key.
    pub largest: Vec<u8>,
    /// Smallest sequence number.
    pub smallest_seq: u64,
    /// Largest sequence number.
    pub largest_seq: u64,
    /// Entries in the table.
    pub num_entries: u64,
    /// Range tombstones in the table.
    pub num_range_dels: u64,
    /// Point tombstones in the table.
    pub num_deletions: u64,
    /// A window of the table's entries is mostly tombstones: compact it when nothing is due.
    pub marked_for_compaction: bool,
}

impl NewFile {
    /// The record of table `number` (`size` bytes) with properties `props`.
    pub fn from_properties(number: u64, size: u64, props: &crate::sstable::TableProperties) -> NewFile {
        NewFile {
            number,
            size,
            smallest: props.smallest_key.clone(),
            largest: props.largest_key.clone(),
            smallest_seq: props.smallest_seq,
            largest_seq: props.largest_seq,
            num_entries: props.num_entries,
            num_range_dels: props.num_range_deletions,
            num_deletions: props.num_deletions,
            marked_for_compaction: props.dense_deletions,
        }
    }
}

/// A change to the set of live files and counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionEdit {
    /// WALs numbered below this are fully reflected in tables.
    pub log_number: Option<u64>,
    /// Next unused file number.
    pub next_file_number: Option<u64>,
    /// Largest sequence number in the tables (or higher).
    pub last_sequence: Option<u64>,
    /// Tables removed: `(level, number)`.
    pub deleted: Vec<(usize, u64)>,
    /// Tables added: `(level, file)`.
    pub added: Vec<(usize, NewFile)>,
}

impl VersionEdit {
    /// Encodes the edit.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        for (tag, v) in [(1u64, self.log_number), (2, self.next_file_number), (3, self.last_sequence)] {
            if let Some(v) = v {
                put_varint(&mut b, tag);
                put_varint(&mut b, v);
            }
        }
        for &(level, number) in &self.deleted {
            put_varint(&mut b, 4);
            put_varint(&mut b, level as u64);
            put_varint(&mut b, number);
        }
        for (level, f) in &self.added {
            put_varint(&mut b, 6);
            put_varint(&mut b, *level as u64);
            put_varint(&mut b, f.number);
            put_varint(&mut b, f.size);
            put_length_prefixed(&mut b, &f.smallest);
            put_length_prefixed(&mut b, &f.largest);
            put_varint(&mut b, f.smallest_seq);
            put_varint(&mut b, f.largest_seq);
            put_varint(&mut b, f.num_entries);
            put_varint(&mut b, f.num_range_dels);
            put_varint(&mut b, f.num_deletions);
            put_varint(&mut b, u64::from(f.marked_for_compaction));
        }
        b
    }

    /// Decodes an edit; `None` on any malformed or unknown field.
    pub fn decode(src: &[u8]) -> Option<VersionEdit> {
        let mut e = VersionEdit::default();
        let mut r = Reader::new(src);
        let level = |r: &mut Reader<'_>| r.varint().and_then(|l| usize::try_from(l).ok()).filter(|&l| l < NUM_LEVELS);
        while !r.is_empty() {
            match r.varint()? {
                1 => e.log_number = Some(r.varint()?),
                2 => e.next_file_number = Some(r.varint()?),
                3 => e.last_sequence = Some(r.varint()?),
                4 => e.deleted.push((level(&mut r)?, r.varint()?)),
                tag @ (5 | 6) => {
                    let lvl = level(&mut r)?;
                    let mut f = NewFile {
                        number: r.varint()?,
                        size: r.varint()?,
                        smallest: r.length_prefixed()?.to_vec(),
                        largest: r.length_prefixed()?.to_vec(),
                        smallest_seq: r.varint()?,
                        largest_seq: r.varint()?,
                        num_entries: r.varint()?,
                        num_range_dels: r.varint()?,
                        num_deletions: 0,
                        marked_for_compaction: false,
                    };
                    if tag == 6 {
                        f.num_deletions = r.varint()?;
                        f.marked_for_compaction = r.varint()? != 0;
                    }
                    if f.smallest.len() < crate::key::TRAILER_LEN || f.largest.len() < crate::key::TRAILER_LEN {
                        return None;
                    }
                    e.added.push((lvl, f));
                }
                _ => return None,
            }
        }
        Some(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{make_internal_key, ValueKind};

    #[test]
    fn round_trip_and_rejects_garbage() {
        let e = VersionEdit {
            log_number: Some(5),
            next_file_number: Some(9),
            last_sequence: Some(1 << 40),
            deleted: vec![(0, 3), (2, 4)],
            added: vec![(
                1,
                NewFile {
                    number: 8,
                    size: 4096,
                    smallest: make_internal_key(b"a", 1, ValueKind::Put),
                    largest: make_internal_key(b"z", 2, ValueKind::Put),
                    smallest_seq: 1,
                    largest_seq: 2,
                    num_entries: 2,
                    num_range_dels: 1,
                    num_deletions: 1,
                    marked_for_compaction: true,
                },
            )],
        };
        let bytes = e.encode();
        assert_eq!(VersionEdit::decode(&bytes), Some(e));
        for cut in 0..bytes.len() {
            // Every truncation either decodes to a prefix of fields or is rejected; never panics.
            let _ = VersionEdit::decode(&bytes[..cut]);
        }
        assert_eq!(VersionEdit::decode(&[4, 9, 1]), None, "level out of range");
        assert_eq!(VersionEdit::decode(&[77, 1]), None, "unknown tag");
    }
}
