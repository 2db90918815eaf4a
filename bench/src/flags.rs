//! Command-line flags, spelled as RocksDB's db_bench spells them (`--key_size=16`).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// db_bench-style benchmark of the `lsm` engine.
#[derive(Debug, Clone, Parser)]
#[command(name = "db_bench", version, about, long_about = None)]
pub struct Flags {
    /// Comma-separated benchmarks, run in order (db_bench names such as `fillseq` work too).
    #[arg(long, default_value = "fill_seq,fill_random,overwrite,read_random,read_seq,read_reverse,stats")]
    pub benchmarks: String,
    /// Number of key/value pairs written (and, by default, read).
    #[arg(long, default_value_t = 1_000_000)]
    pub num: u64,
    /// Number of reads (-1: same as --num).
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    pub reads: i64,
    /// Number of writes in the mixed benchmarks (-1: same as --num).
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    pub writes: i64,
    /// Percentage of reads among the operations of `read_random_write_random`.
    #[arg(long = "readwritepercent", default_value_t = 90)]
    pub read_write_percent: u32,
    /// Entries per write batch in the fill benchmarks, keys per `multi_get` in
    /// `multi_read_random` (db_bench's `entries_per_batch`).
    #[arg(long = "batch_size", default_value_t = 1)]
    pub batch_size: usize,
    /// Rate limit of the writes, in key and value bytes per second over all writing threads
    /// (0: none), as RocksDB's db_bench applies it.
    #[arg(long = "benchmark_write_rate_limit", default_value_t = 0)]
    pub write_rate_limit: u64,
    /// Print the engine's statistics (compactions, stalls, cache and bloom counters, write
    /// amplification) after the last benchmark.
    #[arg(long, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = parse_bool)]
    pub statistics: bool,
    /// Key size in bytes (the number, big-endian, padded with '0').
    #[arg(long = "key_size", default_value_t = 16)]
    pub key_size: usize,
    /// Value size in bytes.
    #[arg(long = "value_size", default_value_t = 100)]
    pub value_size: usize,
    /// Values are generated to compress to about this fraction of their size.
    #[arg(long = "compression_ratio", default_value_t = 0.5)]
    pub compression_ratio: f64,
    /// Block compression: none, snappy or zstd.
    #[arg(long, alias = "compression_type", default_value = "snappy")]
    pub compression: String,
    /// Database directory (default: a fresh temporary directory).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Reuse the database in --db instead of starting empty (fill benchmarks are skipped).
    #[arg(long = "use_existing_db", num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = parse_bool)]
    pub use_existing_db: bool,
    /// Block cache size in bytes.
    #[arg(long = "cache_size", default_value_t = 8 << 20)]
    pub cache_size: usize,
    /// Row cache size in bytes (0: none), as RocksDB's `--row_cache_size`.
    #[arg(long = "row_cache_size", default_value_t = 0)]
    pub row_cache_size: usize,
    /// Read tables through memory maps instead of `pread` into the block cache (RocksDB's
    /// `--mmap_read`; both default to pread).
    #[arg(long = "mmap_read", num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = parse_bool)]
    pub mmap_read: bool,
    /// Bloom filter bits per key (0 disables).
    #[arg(long = "bloom_bits", default_value_t = 10)]
    pub bloom_bits: u32,
    /// Target uncompressed size of a data block in bytes.
    #[arg(long = "block_size", default_value_t = 4096)]
    pub block_size: usize,
    /// Entries between restart points in a data block.
    #[arg(long = "block_restart_interval", default_value_t = 16)]
    pub block_restart_interval: usize,
    /// Data blocks carry a hash index of their user keys for point lookups (RocksDB's flag for
    /// `kDataBlockBinaryAndHash`; on by default in Shale, off in RocksDB).
    #[arg(long = "use_data_block_hash_index", num_args = 0..=1, default_value = "true", default_missing_value = "true", value_parser = parse_bool)]
    pub use_data_block_hash_index: bool,
    /// Charge the open tables' indexes and bloom filters to the block cache, so
    /// `--cache_size` bounds both (RocksDB's flag for `CacheEntryRole::kBlockBasedTableReader`;
    /// on by default in Shale, off in RocksDB).
    #[arg(long = "charge_table_reader", num_args = 0..=1, default_value = "true", default_missing_value = "true", value_parser = parse_bool)]
    pub charge_table_reader: bool,
    /// Charge the memtables to the block cache, so `--cache_size` bounds them too (RocksDB's
    /// flag; off by default in both).
    #[arg(long = "cost_write_buffer_to_cache", num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = parse_bool)]
    pub cost_write_buffer_to_cache: bool,
    /// Memtable size in bytes.
    #[arg(long = "write_buffer_size", default_value_t = 64 << 20)]
    pub write_buffer_size: usize,
    /// Concurrent threads per benchmark (each does the full count, as in db_bench).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// fsync every write.
    #[arg(long, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = parse_bool)]
    pub sync: bool,
    /// Print latency percentiles per benchmark.
    #[arg(long, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = parse_bool)]
    pub histogram: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Random seed.
    #[arg(long, default_value_t = 301)]
    pub seed: u64,
    /// Fill benchmarks add a range tombstone to every this many writes (0: none), as
    /// RocksDB's db_bench does: `[k, k + --range_tombstone_width)` for the next key `k`.
    #[arg(long = "writes_per_range_tombstone", default_value_t = 0)]
    pub writes_per_range_tombstone: u64,
    /// Keys each range tombstone spans.
    #[arg(long = "range_tombstone_width", default_value_t = 100)]
    pub range_tombstone_width: u64,
    /// At most this many range tombstones per thread (0: none, as in RocksDB's db_bench).
    #[arg(long = "max_num_range_tombstones", default_value_t = 0)]
    pub max_num_range_tombstones: u64,
    /// Writes before the first range tombstone.
    #[arg(long = "writes_before_delete_range", default_value_t = 0)]
    pub writes_before_delete_range: u64,
    /// Other commands.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Draw a bar chart from a comparison JSON (as written by compare-rocksdb.sh).
    Report {
        /// The results file.
        results: PathBuf,
        /// Where to write the SVG chart.
        #[arg(long)]
        svg: PathBuf,
    },
}

fn parse_bool(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        other => Err(format!("expected a boolean (1/0/true/false), got '{other}'")),
    }
}

impl Flags {
    /// True if write number `written` (counted from 1) adds a range tombstone, by db_bench's
    /// rule.
    pub fn range_tombstone_due(&self, written: u64) -> bool {
        let Some(after) = written.checked_sub(self.writes_before_delete_range).filter(|&a| a > 0) else {
            return false;
        };
        self.writes_per_range_tombstone > 0
            && after / self.writes_per_range_tombstone <= self.max_num_range_tombstones
            && after % self.writes_per_range_tombstone == 0
    }

    /// Reads per benchmark.
    pub fn reads(&self) -> u64 {
        if self.reads < 0 {
            self.num
        } else {
            self.reads as u64
        }
    }

    /// Operations of the mixed benchmarks (`read_random_write_random`, `update_random`): the
    /// larger of --reads and --writes, --num when neither is set (db_bench's `readwrites`).
    pub fn read_writes(&self) -> u64 {
        if self.reads < 0 && self.writes < 0 {
            self.num
        } else {
            self.reads.max(self.writes).max(0) as u64
        }
    }

    /// The benchmark names, normalised to this tool's spelling (`fillseq` → `fill_seq`).
    pub fn benchmark_list(&self) -> Vec<String> {
        self.benchmarks.split(',').map(str::trim).filter(|s| !s.is_empty()).map(normalise).collect()
    }
}

/// Maps db_bench's names onto ours.
pub fn normalise(name: &str) -> String {
    match name {
        "fillseq" => "fill_seq",
        "fillrandom" => "fill_random",
        "fillsync" | "fill_sync" => "fill_random_sync",
        "readseq" => "read_seq",
        "readreverse" => "read_reverse",
        "readrandom" => "read_random",
        "readmissing" => "read_missing",
        "seekrandom" => "seek_random",
        "deleterandom" => "delete_random",
        "readwhilewriting" => "read_while_writing",
        "readrandomwriterandom" => "read_random_write_random",
        "updaterandom" => "update_random",
        "multireadrandom" => "multi_read_random",
        "waitforcompaction" => "wait_for_compaction",
        other => other,
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn db_bench_spellings_parse() {
        let f = Flags::try_parse_from([
            "db_bench",
            "--benchmarks=fillseq,readrandom,read_seq",
            "--num=1000",
            "--key_size=20",
            "--histogram=1",
            "--sync",
            "--use_existing_db=false",
            "--compression_type=zstd",
            "--reads=-1",
        ])
        .unwrap();
        assert_eq!(f.benchmark_list(), ["fill_seq", "read_random", "read_seq"]);
        assert_eq!((f.num, f.key_size, f.reads()), (1000, 20, 1000));
        assert!(f.histogram && f.sync && !f.use_existing_db);
        assert_eq!(f.compression, "zstd");
        assert!(Flags::try_parse_from(["db_bench", "--histogram=maybe"]).is_err());
    }

    #[test]
    fn range_tombstones_follow_db_bench_rule() {
        let mut f = Flags::parse_from(["db_bench", "--writes_per_range_tombstone=10", "--max_num_range_tombstones=2"]);
        let due: Vec<u64> = (1..=50).filter(|&n| f.range_tombstone_due(n)).collect();
        assert_eq!(due, [10, 20]);
        f.writes_before_delete_range = 5;
        let due: Vec<u64> = (1..=50).filter(|&n| f.range_tombstone_due(n)).collect();
        assert_eq!(due, [15, 25]);
        f.max_num_range_tombstones = 0;
        assert!(!(1..=50).any(|n| f.range_tombstone_due(n)), "none by default, as in RocksDB");
    }
}
