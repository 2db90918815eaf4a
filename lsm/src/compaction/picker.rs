//! The compaction policy: a pure function of the version, the options and the round-robin
//! pointers. No I/O, so it is tested with made-up file metadata.

use std::collections::HashSet;
use std::sync::Arc;

use crate::key;
use crate::manifest::{FileMeta, Version, NUM_LEVELS};

/// The knobs the policy reads.
#[derive(Debug, Clone)]
pub struct PickerConfig {
    /// L0 files that make L0 due for compaction.
    pub l0_trigger: usize,
    /// Target bytes of L1.
    pub base_bytes: u64,
    /// Growth per level.
    pub multiplier: u64,
    /// Target output file size.
    pub target_file_size: u64,
}

impl PickerConfig {
    /// Target bytes of `level` (≥ 1).
    pub fn level_target(&self, level: usize) -> u64 {
        let mut t = self.base_bytes;
        for _ in 1..level {
            t = t.saturating_mul(self.multiplier);
        }
        t
    }

    /// A file moved down may overlap at most this many grandparent bytes; an output stops
    /// before it overlaps more.
    pub fn max_grandparent_overlap(&self) -> u64 {
        self.target_file_size.saturating_mul(10)
    }
}

/// A compaction to run.
#[derive(Debug, Clone)]
pub struct Choice {
    /// The level compacted from.
    pub level: usize,
    /// The level written to (`level + 1`).
    pub output_level: usize,
    /// Files from `level`.
    pub inputs: Vec<Arc<FileMeta>>,
    /// Overlapping files from `output_level`.
    pub next_inputs: Vec<Arc<FileMeta>>,
    /// Overlapping files from `output_level + 1`, to cut outputs that would overlap too much.
    pub grandparents: Vec<Arc<FileMeta>>,
    /// One input file with nothing below it: move it without rewriting.
    pub trivial_move: bool,
    /// The score that made this level due (0 for manual compactions).
    pub score: f64,
}

impl Choice {
    /// Every input file.
    pub fn all_inputs(&self) -> impl Iterator<Item = &Arc<FileMeta>> {
        self.inputs.iter().chain(self.next_inputs.iter())
    }

    /// Bytes of all inputs.
    pub fn input_bytes(&self) -> u64 {
        self.all_inputs().map(|f| f.size).sum()
    }
}

/// How far over its target each level is: L0 by file count, deeper levels by bytes. The last
/// level has no target.
pub fn scores(v: &Version, cfg: &PickerConfig) -> [f64; NUM_LEVELS] {
    let mut s = [0.0; NUM_LEVELS];
    s[0] = v.levels[0].len() as f64 / cfg.l0_trigger as f64;
    for (level, score) in s.iter_mut().enumerate().take(NUM_LEVELS - 1).skip(1) {
        let bytes: u64 = v.levels[level].iter().map(|f| f.size).sum();
        *score = bytes as f64 / cfg.level_target(level) as f64;
    }
    s
}

/// User-key range `[smallest, largest]` covered by `files`.
pub fn key_range<'a>(files: impl IntoIterator<Item = &'a Arc<FileMeta>>) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut range: Option<(Vec<u8>, Vec<u8>)> = None;
    for f in files {
        let (lo, hi) = (key::user_key(&f.smallest), key::user_key(&f.largest));
        range = Some(match range {
            None => (lo.to_vec(), hi.to_vec()),
            Some((a, b)) => {
                (if lo < a.as_slice() { lo.to_vec() } else { a }, if hi > b.as_slice() { hi.to_vec() } else { b })
            }
        });
    }
    range
}

/// Files of `level` whose user-key range intersects `[lo, hi]`.
pub fn overlapping(v: &Version, level: usize, lo: &[u8], hi: &[u8]) -> Vec<Arc<FileMeta>> {
    if level >= NUM_LEVELS {
        return Vec::new();
    }
    v.levels[level]
        .iter()
        .filter(|f| key::user_key(&f.smallest) <= hi && key::user_key(&f.largest) >= lo)
        .cloned()
        .collect()
}

/// Completes a choice from its inputs at `level`: overlaps below, grandparents, trivial move.
fn complete(v: &Version, cfg: &PickerConfig, level: usize, inputs: Vec<Arc<FileMeta>>, score: f64) -> Choice {
    let (lo, hi) = key_range(&inputs).unwrap_or_default();
    let next_inputs = overlapping(v, level + 1, &lo, &hi);
    let (glo, ghi) = key_range(inputs.iter().chain(next_inputs.iter())).unwrap_or_default();
    let grandparents = overlapping(v, level + 2, &glo, &ghi);
    let gp_bytes: u64 = grandparents.iter().map(|f| f.size).sum();
    let trivial_move = inputs.len() == 1 && next_inputs.is_empty() && gp_bytes <= cfg.max_grandparent_overlap();
    Choice { level, output_level: level + 1, inputs, next_inputs, grandparents, trivial_move, score }
}

fn any_busy(files: &[Arc<FileMeta>], busy: &HashSet<u64>) -> bool {
    files.iter().any(|f| busy.contains(&f.number))
}

/// The most urgent compaction, if any level is over its target. `pointers[level]` is the
/// largest key of the last file compacted from that level (round robin); files in `busy` are
/// being compacted and are not chosen again.
pub fn choose(v: &Version, cfg: &PickerConfig, pointers: &[Vec<u8>], busy: &HashSet<u64>) -> Option<Choice> {
    let s = scores(v, cfg);
    let mut order: Vec<usize> = (0..NUM_LEVELS - 1).filter(|&l| s[l] >= 1.0).collect();
    order.sort_by(|a, b| s[*b].total_cmp(&s[*a]));
    for level in order {
        let choice = if level == 0 {
            let inputs = v.levels[0].clone();
            if any_busy(&inputs, busy) {
                continue;
            }
            complete(v, cfg, 0, inputs, s[0])
        } else {
            let files = &v.levels[level];
            let ptr = pointers.get(level).map(Vec::as_slice).unwrap_or_default();
            // Round robin: the first file after the pointer that is not busy, wrapping around.
            let start =
                if ptr.is_empty() { 0 } else { files.partition_point(|f| key::compare(&f.largest, ptr).is_le()) };
            let pick = (0..files.len()).map(|i| &files[(start + i) % files.len()]).find(|f| !busy.contains(&f.number));
            let Some(f) = pick else { continue };
            complete(v, cfg, level, vec![Arc::clone(f)], s[level])
        };
        if any_busy(&choice.next_inputs, busy) {
            continue;
        }
        return Some(choice);
    }
    None
}

/// When nothing is due by size: a table marked for compaction because a window of its entries
/// is mostly tombstones (RocksDB's deletion-triggered compaction). Above the bottom level it is
/// compacted one level down (all of L0 when it is in L0); in the bottom level (L1 or deeper) it is rewritten in
/// place, which drops its tombstones — only when every tombstone in it is older than the
/// oldest live snapshot (`oldest_snapshot`), so the output is never marked again and this cannot
/// repeat forever.
pub fn choose_marked(
    v: &Version,
    cfg: &PickerConfig,
    busy: &HashSet<u64>,
    oldest_snapshot: Option<u64>,
) -> Option<Choice> {
    let bottom = last_nonempty_level(v);
    for level in 0..=bottom {
        let Some(f) = v.levels[level].iter().find(|f| f.marked_for_compaction && !busy.contains(&f.number)) else {
            continue;
        };
        let choice = if level == 0 {
            let inputs = v.levels[0].clone();
            if any_busy(&inputs, busy) {
                continue;
            }
            complete(v, cfg, 0, inputs, 0.0)
        } else if level == bottom {
            if oldest_snapshot.is_some_and(|s| f.largest_seq > s) {
                continue;
            }
            Choice {
                level,
                output_level: level,
                inputs: vec![Arc::clone(f)],
                next_inputs: Vec::new(),
                grandparents: Vec::new(),
                trivial_move: false,
                score: 0.0,
            }
        } else {
            complete(v, cfg, level, vec![Arc::clone(f)], 0.0)
        };
        if !any_busy(&choice.next_inputs, busy) {
            return Some(choice);
        }
    }
    None
}

/// A manual compaction of `level` over user keys `[lo, hi]` (`None` = unbounded).
pub fn choose_range(
    v: &Version,
    cfg: &PickerConfig,
    level: usize,
    lo: Option<&[u8]>,
    hi: Option<&[u8]>,
) -> Option<Choice> {
    if level + 1 >= NUM_LEVELS {
        return None;
    }
    let in_range = |f: &&Arc<FileMeta>| {
        lo.is_none_or(|lo| key::user_key(&f.largest) >= lo) && hi.is_none_or(|hi| key::user_key(&f.smallest) <= hi)
    };
    let inputs: Vec<_> = if level == 0 {
        // L0 tables overlap each other: moving some below an older one they overlap would let
        // the older one shadow newer data. L0 goes down as a whole.
        if !v.levels[0].iter().any(|f| in_range(&f)) {
            return None;
        }
        v.levels[0].clone()
    } else {
        v.levels[level].iter().filter(in_range).cloned().collect()
    };
    if inputs.is_empty() {
        return None;
    }
    let mut c = complete(v, cfg, level, inputs, 0.0);
    // A manual compaction rewrites, so the bottom level ends up free of garbage.
    c.trivial_move = c.trivial_move && level + 1 < last_nonempty_level(v);
    Some(c)
}

/// A manual rewrite of the bottom `level` in place (output to the same level), so garbage that
/// no snapshot needs any more (old versions, tombstones) is dropped there too.
pub fn choose_bottom(v: &Version, level: usize, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Option<Choice> {
    if level == 0 || level >= NUM_LEVELS {
        return None;
    }
    let inputs: Vec<_> = v.levels[level]
        .iter()
        .filter(|f| {
            lo.is_none_or(|lo| key::user_key(&f.largest) >= lo) && hi.is_none_or(|hi| key::user_key(&f.smallest) <= hi)
        })
        .cloned()
        .collect();
    if inputs.is_empty() {
        return None;
    }
    Some(Choice {
        level,
        output_level: level,
        inputs,
        next_inputs: Vec::new(),
        grandparents: Vec::new(),
        trivial_move: false,
        score: 0.0,
    })
}

/// The deepest level holding a table (0 if none).
pub fn last_nonempty_level(v: &Version) -> usize {
    (0..NUM_LEVELS).rev().find(|&l| !v.levels[l].is_empty()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{make_internal_key, ValueKind};
    use crate::manifest::NewFile;

    fn meta(number: u64, lo: &str, hi: &str, size: u64) -> Arc<FileMeta> {
        let nf = NewFile {
            number,
            size,
            smallest: make_internal_key(lo.as_bytes(), number, ValueKind::Put),
            largest: make_internal_key(hi.as_bytes(), number, ValueKind::Put),
            smallest_seq: number,
            largest_seq: number,
            num_entries: 1,
            num_range_dels: 0,
            num_deletions: 0,
            marked_for_compaction: false,
        };
        Arc::new(FileMeta::new(std::path::Path::new("/nonexistent"), &nf, None))
    }

    fn cfg() -> PickerConfig {
        PickerConfig { l0_trigger: 4, base_bytes: 1000, multiplier: 10, target_file_size: 100 }
    }

    fn version(levels: Vec<Vec<Arc<FileMeta>>>) -> Version {
        let mut v = Version::default();
        for (i, l) in levels.into_iter().enumerate() {
            v.levels[i] = l;
        }
        v.sort_levels();
        v
    }

    fn marked(number: u64, lo: &str, hi: &str) -> Arc<FileMeta> {
        let f = meta(number, lo, hi, 10);
        let mut nf = f.to_new_file();
        nf.marked_for_compaction = true;
        Arc::new(FileMeta::new(std::path::Path::new("/nonexistent"), &nf, None))
    }

    #[test]
    fn marked_tables_go_down_then_are_rewritten_at_the_bottom() {
        let none = HashSet::new();
        // Above the bottom: one level down, with what it overlaps there.
        let v = version(vec![vec![], vec![marked(1, "a", "c")], vec![meta(2, "b", "d", 10)]]);
        let c = choose_marked(&v, &cfg(), &none, None).unwrap();
        assert_eq!((c.level, c.output_level, c.next_inputs.len()), (1, 2, 1));
        // In the bottom level: rewritten in place, unless a snapshot is older than its entries.
        let v = version(vec![vec![], vec![meta(3, "a", "b", 10)], vec![marked(4, "b", "d")]]);
        let c = choose_marked(&v, &cfg(), &none, None).unwrap();
        assert_eq!((c.level, c.output_level, c.inputs[0].number), (2, 2, 4));
        assert!(choose_marked(&v, &cfg(), &none, Some(3)).is_none(), "a snapshot at 3 still needs entry 4");
        assert!(choose_marked(&v, &cfg(), &none, Some(4)).is_some());
        // From L0, all of L0 goes down; busy tables are left alone.
        let v = version(vec![vec![marked(5, "a", "b"), meta(6, "c", "d", 10)]]);
        let c = choose_marked(&v, &cfg(), &none, None).unwrap();
        assert_eq!((c.level, c.inputs.len()), (0, 2));
        assert!(choose_marked(&v, &cfg(), &HashSet::from([6]), None).is_none());
        // Nothing marked: nothing to do.
        let v = version(vec![vec![meta(7, "a", "b", 10)], vec![meta(8, "a", "z", 10)]]);
        assert!(choose_marked(&v, &cfg(), &none, None).is_none());
    }

    #[test]
    fn nothing_to_do_below_targets() {
        let v = version(vec![vec![meta(1, "a", "b", 10)], vec![meta(2, "a", "z", 900)]]);
        assert!(choose(&v, &cfg(), &[], &HashSet::new()).is_none());
        assert_eq!(scores(&v, &cfg())[0], 0.25);
        assert_eq!(cfg().level_target(3), 100_000);
    }

    #[test]
    fn l0_takes_every_file_and_the_overlapping_l1_files() {
        let l0 = (1..=4).map(|i| meta(i, &format!("k{i}"), &format!("k{}", i + 4), 10)).collect();
        let l1 =
            vec![meta(10, "a", "c", 10), meta(11, "k3", "k4", 10), meta(12, "k8", "m", 10), meta(13, "x", "z", 10)];
        let v = version(vec![l0, l1]);
        let c = choose(&v, &cfg(), &[], &HashSet::new()).unwrap();
        assert_eq!((c.level, c.output_level), (0, 1));
        assert_eq!(c.inputs.len(), 4);
        let mut next: Vec<u64> = c.next_inputs.iter().map(|f| f.number).collect();
        next.sort();
        assert_eq!(next, [11, 12]);
        assert!(!c.trivial_move);
        // Busy L0 files block another L0 compaction.
        let busy: HashSet<u64> = [2].into();
        assert!(choose(&v, &cfg(), &[], &busy).is_none());
    }

    #[test]
    fn highest_score_wins_and_levels_go_round_robin() {
        let l1: Vec<_> = (0..6).map(|i| meta(20 + i, &format!("b{i}"), &format!("b{i}z"), 300)).collect(); // 1800 / 1000
        let l2 = vec![meta(40, "b2", "b3", 5000)];
        let v = version(vec![vec![meta(1, "a", "a", 1)], l1, l2]);
        let c = choose(&v, &cfg(), &[], &HashSet::new()).unwrap();
        assert_eq!(c.level, 1);
        assert_eq!(c.inputs[0].number, 20, "no pointer yet: first file");
        assert!(c.trivial_move, "nothing below b0");
        let mut ptrs = vec![Vec::new(); NUM_LEVELS];
        ptrs[1] = c.inputs[0].largest.clone();
        let c = choose(&v, &cfg(), &ptrs, &HashSet::new()).unwrap();
        assert_eq!(c.inputs[0].number, 21, "the pointer moves on");
        ptrs[1] = v.levels[1][5].largest.clone();
        assert_eq!(choose(&v, &cfg(), &ptrs, &HashSet::new()).unwrap().inputs[0].number, 20, "wraps around");
        ptrs[1] = v.levels[1][1].largest.clone();
        let c = choose(&v, &cfg(), &ptrs, &HashSet::new()).unwrap();
        assert_eq!((c.inputs[0].number, c.next_inputs.len()), (22, 1));
        assert!(!c.trivial_move);
        // A busy pick moves to the next free file.
        let busy: HashSet<u64> = [22].into();
        assert_eq!(choose(&v, &cfg(), &ptrs, &busy).unwrap().inputs[0].number, 23);
        // ...unless what lies below it is busy too (23 overlaps L2 table 40): nothing to do.
        let busy: HashSet<u64> = [22, 40].into();
        assert!(choose(&v, &cfg(), &ptrs, &busy).is_none());
    }

    #[test]
    fn heavy_grandparent_overlap_prevents_a_trivial_move() {
        let v = version(vec![
            vec![],
            vec![meta(1, "a", "m", 2000)],
            vec![],
            (0..20).map(|i| meta(100 + i, &format!("c{i:02}"), &format!("c{i:02}z"), 100)).collect(),
        ]);
        let c = choose(&v, &cfg(), &[], &HashSet::new()).unwrap();
        assert_eq!(c.grandparents.len(), 20);
        assert!(!c.trivial_move, "2000 bytes of grandparents > 10 x 100");
    }

    #[test]
    fn manual_range_selects_overlapping_inputs() {
        let v = version(vec![vec![meta(1, "a", "c", 1), meta(2, "x", "z", 1)], vec![meta(3, "b", "d", 1)]]);
        let c = choose_range(&v, &cfg(), 0, Some(b"a"), Some(b"b")).unwrap();
        let mut inputs: Vec<u64> = c.inputs.iter().map(|f| f.number).collect();
        inputs.sort();
        assert_eq!(inputs, [1, 2], "all of L0 goes down together");
        assert_eq!(c.next_inputs[0].number, 3);
        assert!(choose_range(&v, &cfg(), 0, Some(b"m"), Some(b"n")).is_none(), "no L0 table in range");
        let c = choose_range(&v, &cfg(), 1, Some(b"c"), None).unwrap();
        assert_eq!(c.inputs[0].number, 3);
        assert!(choose_range(&v, &cfg(), 2, None, None).is_none());
        assert_eq!(last_nonempty_level(&v), 1);
    }
}
