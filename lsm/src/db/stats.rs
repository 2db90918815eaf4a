//! Engine statistics and the `lsm.stats` property.

use std::fmt;
use std::sync::atomic::Ordering;

use super::{lock, DbInner};
use crate::compaction::picker;
use crate::manifest::NUM_LEVELS;

/// One level's shape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LevelStats {
    /// Tables in the level.
    pub files: usize,
    /// Bytes of those tables.
    pub bytes: u64,
    /// Compaction score (≥ 1 means due).
    pub score: f64,
}

/// A point-in-time view of the engine's counters and shape.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Per level, L0 first.
    pub levels: Vec<LevelStats>,
    /// Memtables written to L0.
    pub flushes: u64,
    /// Bytes of L0 tables written by flushes.
    pub bytes_flushed: u64,
    /// Compactions run (trivial moves included).
    pub compactions: u64,
    /// Bytes of tables read by compactions.
    pub compaction_bytes_read: u64,
    /// Bytes of tables written by compactions.
    pub compaction_bytes_written: u64,
    /// (flushed + compacted bytes written) / flushed bytes.
    pub write_amplification: f64,
    /// Time writers spent stalled, in microseconds.
    pub stall_micros: u64,
    /// Block cache hits.
    pub block_cache_hits: u64,
    /// Block cache misses (compressed blocks read from the file).
    pub block_cache_misses: u64,
    /// Bytes in the block cache.
    pub block_cache_bytes: usize,
    /// Point lookups in tables the row cache answered.
    pub row_cache_hits: u64,
    /// Point lookups in tables that could have used the row cache and did not find their row.
    pub row_cache_misses: u64,
    /// Bytes in the row cache.
    pub row_cache_bytes: usize,
    /// Bloom filter probes.
    pub bloom_checks: u64,
    /// Probes that avoided a table read.
    pub bloom_useful: u64,
    /// Internal entries range reads examined (versions and tombstones stepped over included).
    pub iter_entries: u64,
    /// Of those, deletions: what tombstones cost readers.
    pub iter_tombstones: u64,
    /// Seeks range reads made past a key's many versions instead of stepping over them.
    pub iter_reseeks: u64,
    /// Point tombstones in tables (from each table's properties).
    pub table_tombstones: u64,
    /// Tables marked for compaction because a window of their entries is mostly tombstones.
    pub tables_marked_for_compaction: usize,
    /// Bytes in the active memtable.
    pub memtable_bytes: usize,
    /// Frozen memtables waiting for flush.
    pub immutable_memtables: usize,
    /// Open tables in the table cache.
    pub open_tables: usize,
    /// Bytes the open tables hold in memory: decoded indexes, bloom filters, range tombstones.
    pub table_readers_bytes: usize,
    /// Sequence number of the latest write.
    pub last_sequence: u64,
}

impl Stats {
    /// Total bytes in all tables.
    pub fn total_bytes(&self) -> u64 {
        self.levels.iter().map(|l| l.bytes).sum()
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "** lsm stats **")?;
        writeln!(f, "Level  Files     Size(MB)  Score")?;
        for (i, l) in self.levels.iter().enumerate() {
            writeln!(f, "  L{i}   {:>5}  {:>11.2}  {:>5.2}", l.files, l.bytes as f64 / 1048576.0, l.score)?;
        }
        let mb = |b: u64| b as f64 / 1048576.0;
        writeln!(
            f,
            "  Sum  {:>5}  {:>11.2}",
            self.levels.iter().map(|l| l.files).sum::<usize>(),
            mb(self.total_bytes())
        )?;
        writeln!(f, "Flushes: {} ({:.2} MB)", self.flushes, mb(self.bytes_flushed))?;
        writeln!(
            f,
            "Compactions: {} (read {:.2} MB, written {:.2} MB)",
            self.compactions,
            mb(self.compaction_bytes_read),
            mb(self.compaction_bytes_written)
        )?;
        writeln!(f, "Write amplification: {:.2}", self.write_amplification)?;
        writeln!(f, "Write stall: {:.3} s", self.stall_micros as f64 / 1e6)?;
        let lookups = self.block_cache_hits + self.block_cache_misses;
        let ratio = if lookups == 0 { 0.0 } else { self.block_cache_hits as f64 / lookups as f64 };
        writeln!(
            f,
            "Block cache: {} hits, {} misses ({:.1} % hit), {:.2} MB",
            self.block_cache_hits,
            self.block_cache_misses,
            ratio * 100.0,
            self.block_cache_bytes as f64 / 1048576.0
        )?;
        if self.row_cache_hits + self.row_cache_misses + self.row_cache_bytes as u64 > 0 {
            writeln!(
                f,
                "Row cache: {} hits, {} misses, {:.2} MB",
                self.row_cache_hits,
                self.row_cache_misses,
                self.row_cache_bytes as f64 / 1048576.0
            )?;
        }
        writeln!(f, "Bloom: {} checks, {} useful", self.bloom_checks, self.bloom_useful)?;
        writeln!(
            f,
            "Iterators: {} entries examined, {} of them deletions, {} seeks past old versions; tables: {} tombstones, {} marked for compaction",
            self.iter_entries, self.iter_tombstones, self.iter_reseeks, self.table_tombstones, self.tables_marked_for_compaction
        )?;
        writeln!(
            f,
            "Memtable: {:.2} MB active, {} immutable; open tables: {} ({:.2} MB of indexes and filters); last sequence: {}",
            self.memtable_bytes as f64 / 1048576.0,
            self.immutable_memtables,
            self.open_tables,
            self.table_readers_bytes as f64 / 1048576.0,
            self.last_sequence
        )
    }
}

impl DbInner {
    pub(super) fn stats(&self) -> Stats {
        let sv = self.super_version();
        let v = &sv.version;
        let scores = picker::scores(v, &self.picker_config());
        let levels = (0..NUM_LEVELS)
            .map(|l| LevelStats {
                files: v.levels[l].len(),
                bytes: v.levels[l].iter().map(|f| f.size).sum(),
                score: scores[l],
            })
            .collect();
        let c = &self.counters;
        let r = &self.read_counters;
        let flushed = c.bytes_flushed.load(Ordering::Relaxed);
        let compacted = c.compaction_bytes_written.load(Ordering::Relaxed);
        Stats {
            levels,
            flushes: c.flushes.load(Ordering::Relaxed),
            bytes_flushed: flushed,
            compactions: c.compactions.load(Ordering::Relaxed),
            compaction_bytes_read: c.compaction_bytes_read.load(Ordering::Relaxed),
            compaction_bytes_written: compacted,
            write_amplification: if flushed == 0 { 0.0 } else { (flushed + compacted) as f64 / flushed as f64 },
            stall_micros: c.stall_micros.load(Ordering::Relaxed),
            block_cache_hits: r.total(|c| &c.block_cache_hits),
            block_cache_misses: r.total(|c| &c.block_cache_misses),
            block_cache_bytes: self.tables.block_cache().usage(),
            row_cache_hits: r.total(|c| &c.row_cache_hits),
            row_cache_misses: r.total(|c| &c.row_cache_misses),
            row_cache_bytes: self.tables.block_cache().row_usage(),
            bloom_checks: r.total(|c| &c.bloom_checks),
            bloom_useful: r.total(|c| &c.bloom_useful),
            iter_entries: r.total(|c| &c.iter_entries),
            iter_tombstones: r.total(|c| &c.iter_tombstones),
            iter_reseeks: r.total(|c| &c.iter_reseeks),
            table_tombstones: v.files().map(|(_, f)| f.num_deletions).sum(),
            tables_marked_for_compaction: v.files().filter(|(_, f)| f.marked_for_compaction).count(),
            memtable_bytes: sv.mem.approximate_size(),
            immutable_memtables: sv.imm.len(),
            open_tables: self.tables.len(),
            table_readers_bytes: self.tables.readers_memory(),
            last_sequence: self.visible_seq.load(Ordering::Acquire),
        }
    }

    pub(super) fn property(&self, name: &str) -> Option<String> {
        match name {
            "lsm.stats" => Some(self.stats().to_string()),
            "lsm.levelstats" => {
                let s = self.stats();
                Some(s.levels.iter().enumerate().map(|(i, l)| format!("{i} {} {}\n", l.files, l.bytes)).collect())
            }
            "lsm.estimate-live-data-size" => Some(self.stats().total_bytes().to_string()),
            "lsm.estimate-table-readers-mem" => Some(self.tables.readers_memory().to_string()),
            "lsm.num-immutable-mem-table" => Some(self.super_version().imm.len().to_string()),
            _ => {
                let level: usize = name.strip_prefix("lsm.num-files-at-level")?.parse().ok()?;
                lock(&self.versions).current().levels.get(level).map(|l| l.len().to_string())
            }
        }
    }
}
