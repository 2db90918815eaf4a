//! Running one compaction: merge the inputs, drop what no reader can see, write new tables.
//!
//! What is dropped, for each user key (newest version first):
//! - a version shadowed by a newer one that every snapshot able to see it would see instead
//!   (both fall in the same *stripe* between consecutive live snapshots);
//! - a tombstone visible to every snapshot when no deeper level can hold the key;
//! - what the user's [`CompactionFilter`] removes (it sees only versions no snapshot can see,
//!   and a removal becomes a tombstone so older versions below stay hidden);
//! - a version covered by a range tombstone in the same stripe, and a range tombstone visible to
//!   every snapshot when no deeper level overlaps its range.
//!
//! Range tombstones are fragmented and each output table gets the pieces inside its key range,
//! so the tables of a level stay disjoint.
//!
//! Outputs are cut at `target_file_size` and before overlapping more than ten target sizes of
//! grandparent data, always at a user-key boundary so that no two tables of a level share a key.

use std::borrow::Cow;
use std::io::BufWriter;
use std::path::Path;
use std::sync::Arc;

use super::picker::{Choice, PickerConfig};
use super::{CompactionFilter, Decision};
use crate::filename;
use crate::iter::{BoxedIter, InternalIterator, LevelIter, MergingIterator};
use crate::key::{self, ValueKind};
use crate::manifest::{FileMeta, NewFile, Version, VersionEdit, NUM_LEVELS};
use crate::range_del::{Fragments, RangeTombstone};
use crate::sstable::{TableBuilder, TableOptions};
use crate::{Error, Result};

/// What a compaction needs besides its [`Choice`].
pub(crate) struct JobContext<'a> {
    pub dir: &'a Path,
    /// The version the choice was made from.
    pub version: &'a Version,
    /// Live snapshot sequence numbers, ascending.
    pub snapshots: &'a [u64],
    pub table_opts: TableOptions,
    pub cfg: &'a PickerConfig,
    pub filter: Option<&'a dyn CompactionFilter>,
    pub new_file_number: &'a dyn Fn() -> u64,
    /// Most bytes per second to write (0: unlimited).
    pub rate_limit: u64,
    /// True once the database is closing: a throttled job gives up with [`Error::Closed`].
    pub cancelled: &'a dyn Fn() -> bool,
}

/// Keeps a job's output under `rate` bytes per second by sleeping, in short slices so a
/// closing database is noticed.
struct Throttle {
    rate: u64,
    started: std::time::Instant,
    bytes: u64,
}

impl Throttle {
    fn new(rate: u64) -> Self {
        Throttle { rate, started: std::time::Instant::now(), bytes: 0 }
    }

    fn consume(&mut self, n: usize, cancelled: &dyn Fn() -> bool) -> Result<()> {
        if self.rate == 0 {
            return Ok(());
        }
        self.bytes += n as u64;
        let due = std::time::Duration::from_secs_f64(self.bytes as f64 / self.rate as f64);
        loop {
            let elapsed = self.started.elapsed();
            if elapsed >= due {
                return Ok(());
            }
            if cancelled() {
                return Err(Error::Closed);
            }
            std::thread::sleep((due - elapsed).min(std::time::Duration::from_millis(20)));
        }
    }
}

/// The outcome of a compaction.
#[derive(Debug, Default)]
pub(crate) struct JobResult {
    pub edit: VersionEdit,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub entries_in: u64,
    pub entries_dropped: u64,
}

/// Runs `choice`.
pub(crate) fn run(choice: &Choice, cx: &JobContext<'_>) -> Result<JobResult> {
    let mut res = JobResult::default();
    for f in &choice.inputs {
        res.edit.deleted.push((choice.level, f.number));
    }
    for f in &choice.next_inputs {
        res.edit.deleted.push((choice.output_level, f.number));
    }
    if choice.trivial_move {
        for f in &choice.inputs {
            res.edit.added.push((choice.output_level, f.to_new_file()));
        }
        return Ok(res);
    }
    res.bytes_read = choice.input_bytes();
    let mut input_tombstones = Vec::new();
    for f in choice.all_inputs().filter(|f| f.num_range_dels > 0) {
        input_tombstones.extend_from_slice(f.table()?.range_tombstones());
    }
    let fragments = Fragments::new(&input_tombstones, u64::MAX);
    let deeper = Deeper::new(cx.version, choice.output_level);
    let tombstones = surviving_tombstones(&fragments, cx.snapshots, &deeper);
    let expected_keys = expected_keys_per_output(choice, cx.cfg.target_file_size);
    let mut out = Outputs { cx, files: Vec::new(), current: None, tombstones, lower: None, expected_keys };
    let result = merge_into(choice, cx, &fragments, &deeper, &mut out, &mut res).and_then(|_| out.finish_last());
    if let Err(e) = result {
        out.abandon();
        return Err(e);
    }
    res.bytes_written = out.files.iter().map(|f| f.size).sum();
    res.edit.added.extend(out.files.into_iter().map(|f| (choice.output_level, f)));
    Ok(res)
}

/// How many user keys one output may hold, to size its bloom filter up front: the inputs'
/// entries per byte on disk times the target file size, and never more than the inputs hold.
/// An output that fills its filter first is cut there (a few percent under the target size when
/// its entries are smaller than the inputs' average). No more is spared: a filter holding fewer
/// keys than it was sized for keeps its size unless they fit in half (it folds only in halves),
/// so a sixth to spare made every full output's filter ~11.7 bits a key instead of 10 (2.5 MB
/// of the 25 MB of indexes and filters a 10 M-entry database keeps open).
fn expected_keys_per_output(choice: &Choice, target_file_size: u64) -> Option<usize> {
    let (entries, bytes) =
        choice.all_inputs().fold((0u128, 0u128), |(e, b), f| (e + u128::from(f.num_entries), b + u128::from(f.size)));
    if entries == 0 {
        // Only range tombstones, or tables that do not count their entries: collect hashes.
        return None;
    }
    let estimate = (entries * u128::from(target_file_size)).checked_div(bytes).unwrap_or(entries);
    Some(usize::try_from(estimate.clamp(entries.min(1024), entries)).unwrap_or(usize::MAX))
}

fn input_iterator(choice: &Choice) -> Result<MergingIterator> {
    let mut children: Vec<BoxedIter> = Vec::new();
    if choice.level == 0 {
        for f in &choice.inputs {
            children.push(Box::new(f.table()?.iter_with(false)));
        }
    } else {
        children.push(Box::new(LevelIter::new(choice.inputs.clone(), false)));
    }
    if !choice.next_inputs.is_empty() {
        children.push(Box::new(LevelIter::new(choice.next_inputs.clone(), false)));
    }
    Ok(MergingIterator::new(children))
}

/// The range tombstones to write: per fragment, the newest of each snapshot stripe, minus those
/// every snapshot sees when nothing deeper overlaps them.
fn surviving_tombstones(fragments: &Fragments, snapshots: &[u64], deeper: &Deeper<'_>) -> Vec<RangeTombstone> {
    let mut out: Vec<RangeTombstone> = Vec::new();
    let mut last: Option<(Vec<u8>, usize)> = None;
    for t in fragments.tombstones() {
        // Fragments come in key order, sequence numbers descending within one.
        let stripe = snapshots.partition_point(|&s| s < t.seq);
        if last.as_ref().is_some_and(|(start, st)| *start == t.start && *st == stripe) {
            continue;
        }
        last = Some((t.start.clone(), stripe));
        if stripe == 0 && !deeper.overlaps(&t.start, &t.end) {
            continue;
        }
        out.push(t);
    }
    out
}

fn merge_into(
    choice: &Choice,
    cx: &JobContext<'_>,
    fragments: &Fragments,
    deeper: &Deeper<'_>,
    out: &mut Outputs<'_, '_>,
    res: &mut JobResult,
) -> Result<()> {
    let mut it = input_iterator(choice)?;
    it.seek_to_first()?;
    let mut grandparents = GrandparentTracker::new(&choice.grandparents, cx.cfg.max_grandparent_overlap());
    let mut current_key: Option<Vec<u8>> = None;
    let mut last_stripe: Option<usize> = None;
    let mut throttle = Throttle::new(cx.rate_limit);
    while it.valid() {
        let ikey = it.key();
        res.entries_in += 1;
        let p = key::parse(ikey)
            .ok_or_else(|| Error::corruption(cx.dir, 0, "malformed internal key in compaction input"))?;
        if current_key.as_deref() != Some(p.user_key) {
            let cut = grandparents.should_stop_before(ikey);
            if out.current_size() >= cx.cfg.target_file_size || cut || out.filter_is_full() {
                out.finish_current(Some(p.user_key))?;
            }
            current_key = Some(p.user_key.to_vec());
            last_stripe = None;
        }
        // Snapshots see entries with seq <= their own; the stripe is the first snapshot that can.
        let stripe = cx.snapshots.partition_point(|&s| s < p.seq);
        if last_stripe == Some(stripe) {
            res.entries_dropped += 1;
            it.next()?;
            continue;
        }
        last_stripe = Some(stripe);
        // A range tombstone that every reader of this version also sees hides it.
        let upper = cx.snapshots.get(stripe).copied().unwrap_or(u64::MAX);
        if fragments.covers(p.user_key, p.seq, upper) {
            res.entries_dropped += 1;
            it.next()?;
            continue;
        }
        let mut kind = p.kind;
        let mut value = Cow::Borrowed(it.value());
        if kind == ValueKind::Put && stripe == cx.snapshots.len() {
            if let Some(f) = cx.filter {
                match f.filter(choice.output_level, p.user_key, &value) {
                    Decision::Keep => {}
                    Decision::Remove => {
                        kind = ValueKind::Delete;
                        value = Cow::Borrowed(&[]);
                    }
                    Decision::ChangeValue(v) => value = Cow::Owned(v),
                }
            }
        }
        if kind == ValueKind::Delete && stripe == 0 && !deeper.may_contain(p.user_key) {
            res.entries_dropped += 1;
            it.next()?;
            continue;
        }
        if kind == p.kind {
            out.add(ikey, &value)?;
        } else {
            out.add(&key::make_internal_key(p.user_key, p.seq, kind), &value)?;
        }
        throttle.consume(ikey.len() + value.len(), cx.cancelled)?;
        it.next()?;
    }
    Ok(())
}

/// The levels below the output level, to tell whether a key may have older versions there.
struct Deeper<'a> {
    levels: Vec<&'a [Arc<FileMeta>]>,
}

impl<'a> Deeper<'a> {
    fn new(v: &'a Version, output_level: usize) -> Self {
        Deeper { levels: (output_level + 1..NUM_LEVELS).map(|l| v.levels[l].as_slice()).collect() }
    }

    fn may_contain(&self, user_key: &[u8]) -> bool {
        self.levels.iter().any(|files| {
            let i = files.partition_point(|f| key::user_key(&f.largest) < user_key);
            files.get(i).is_some_and(|f| f.covers(user_key))
        })
    }

    /// True if a deeper table may hold keys in `[start, end)`.
    fn overlaps(&self, start: &[u8], end: &[u8]) -> bool {
        self.levels.iter().any(|files| {
            let i = files.partition_point(|f| key::user_key(&f.largest) < start);
            files.get(i).is_some_and(|f| key::user_key(&f.smallest) < end)
        })
    }
}

/// LevelDB's `ShouldStopBefore`: counts grandparent bytes the current output overlaps.
struct GrandparentTracker<'a> {
    files: &'a [Arc<FileMeta>],
    index: usize,
    overlapped: u64,
    seen_key: bool,
    limit: u64,
}

impl<'a> GrandparentTracker<'a> {
    fn new(files: &'a [Arc<FileMeta>], limit: u64) -> Self {
        GrandparentTracker { files, index: 0, overlapped: 0, seen_key: false, limit }
    }

    fn should_stop_before(&mut self, ikey: &[u8]) -> bool {
        while self.index < self.files.len() && key::compare(ikey, &self.files[self.index].largest).is_gt() {
            if self.seen_key {
                self.overlapped += self.files[self.index].size;
            }
            self.index += 1;
        }
        self.seen_key = true;
        if self.overlapped > self.limit {
            self.overlapped = 0;
            return true;
        }
        false
    }
}

struct Outputs<'a, 'b> {
    cx: &'b JobContext<'a>,
    files: Vec<NewFile>,
    current: Option<(u64, TableBuilder<BufWriter<std::fs::File>>)>,
    /// Range tombstones to write, cut to each output's key range.
    tombstones: Vec<RangeTombstone>,
    /// Where the current output's key range starts (`None` = unbounded).
    lower: Option<Vec<u8>>,
    /// User keys each output's bloom filter is sized for (`None`: unknown).
    expected_keys: Option<usize>,
}

impl Outputs<'_, '_> {
    fn current_size(&self) -> u64 {
        self.current.as_ref().map_or(0, |(_, b)| b.estimated_file_size())
    }

    fn open_output(&mut self) -> Result<&mut TableBuilder<BufWriter<std::fs::File>>> {
        if self.current.is_none() {
            let number = (self.cx.new_file_number)();
            let file = std::fs::File::create(filename::table_path(self.cx.dir, number))?;
            let mut b = TableBuilder::new(BufWriter::with_capacity(1 << 20, file), self.cx.table_opts.clone())?;
            if let Some(keys) = self.expected_keys {
                b.expect_keys(keys);
            }
            self.current = Some((number, b));
        }
        match self.current.as_mut() {
            Some((_, b)) => Ok(b),
            None => Err(Error::InvalidArgument("compaction output vanished".into())),
        }
    }

    fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        self.open_output()?.add(ikey, value)
    }

    fn filter_is_full(&self) -> bool {
        self.current.as_ref().is_some_and(|(_, b)| b.filter_is_full())
    }

    /// The surviving tombstones cut to `[lower, upper)`.
    fn tombstones_in(&self, upper: Option<&[u8]>) -> Vec<RangeTombstone> {
        let lower = self.lower.as_deref();
        self.tombstones
            .iter()
            .filter_map(|t| {
                let start = lower.filter(|l| *l > t.start.as_slice()).unwrap_or(&t.start);
                let end = upper.filter(|u| *u < t.end.as_slice()).unwrap_or(&t.end);
                (start < end).then(|| RangeTombstone { start: start.to_vec(), end: end.to_vec(), seq: t.seq })
            })
            .collect()
    }

    /// Finishes the last output, creating one if only range tombstones remain to be written.
    fn finish_last(&mut self) -> Result<()> {
        if self.current.is_none() && !self.tombstones_in(None).is_empty() {
            self.open_output()?;
        }
        self.finish_current(None)
    }

    /// Finishes the current output, whose key range ends before `upper`.
    fn finish_current(&mut self, upper: Option<&[u8]>) -> Result<()> {
        if self.current.is_none() {
            return Ok(());
        }
        for t in self.tombstones_in(upper) {
            if let Some((_, b)) = self.current.as_mut() {
                b.add_range_tombstone(t);
            }
        }
        self.lower = upper.map(<[u8]>::to_vec);
        let Some((number, b)) = self.current.take() else { return Ok(()) };
        let path = filename::table_path(self.cx.dir, number);
        self.files.push(crate::db::finish_table_file(&path, number, b, &self.cx.table_opts)?);
        Ok(())
    }

    /// Removes every output written so far (the compaction failed).
    fn abandon(&mut self) {
        let current = self.current.take().map(|(n, _)| n);
        for n in self.files.iter().map(|f| f.number).chain(current) {
            let _ = std::fs::remove_file(filename::table_path(self.cx.dir, n));
        }
    }
}
