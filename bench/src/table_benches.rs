//! SST micro-benchmarks modelled on badger's `table` package benchmarks.

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use lsm::cache::{BlockCache, ReadCounters};
use lsm::iter::{BoxedIter, InternalIterator, MergingIterator};
use lsm::key::{self, ValueKind};
use lsm::sstable::{bloom, Table, TableBuilder, TableOptions};
use lsm::Compression;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::error::{Error, Result};
use crate::flags::Flags;
use crate::keys::{make_key, ValueGenerator};
use crate::runner::Outcome;

/// The table benchmarks this tool knows.
pub const TABLE_BENCHMARKS: &[&str] = &["table_read", "table_read_and_build", "table_read_merged", "table_random_read"];

/// Tables built once and shared by the table benchmarks.
pub struct TableBench {
    flags: Flags,
    dir: tempfile::TempDir,
    values: ValueGenerator,
    single: Option<PathBuf>,
    merged: Option<Vec<PathBuf>>,
}

impl TableBench {
    /// A workspace for table files.
    pub fn new(flags: &Flags) -> Result<Self> {
        Ok(TableBench {
            flags: flags.clone(),
            dir: tempfile::Builder::new().prefix("shale-table-bench-").tempdir()?,
            values: ValueGenerator::new(flags.compression_ratio, flags.value_size, flags.seed),
            single: None,
            merged: None,
        })
    }

    fn table_options(&self) -> Result<TableOptions> {
        let compression: Compression = self.flags.compression.parse()?;
        Ok(TableOptions {
            compression,
            bloom_bits_per_key: self.flags.bloom_bits,
            hash_index: self.flags.use_data_block_hash_index,
            block_size: self.flags.block_size,
            restart_interval: self.flags.block_restart_interval,
            ..TableOptions::default()
        })
    }

    /// Writes a table holding keys `first, first + step, …` below `num`.
    fn build(&self, path: &Path, first: u64, step: u64) -> Result<()> {
        let file = std::fs::File::create(path)?;
        let mut b = TableBuilder::new(BufWriter::with_capacity(1 << 20, file), self.table_options()?)?;
        let mut k = Vec::new();
        let mut ikey = Vec::new();
        let mut i = first;
        while i < self.flags.num {
            make_key(i, self.flags.key_size, &mut k);
            ikey.clear();
            key::append_internal_key(&mut ikey, &k, 1, ValueKind::Put);
            b.add(&ikey, self.values.at(i, self.flags.value_size))?;
            i += step;
        }
        let (w, _, _) = b.finish()?;
        w.into_inner().map_err(|e| Error::Engine(e.into_error().into()))?.sync_all()?;
        Ok(())
    }

    fn single(&mut self) -> Result<PathBuf> {
        if let Some(p) = &self.single {
            return Ok(p.clone());
        }
        let p = self.dir.path().join("single.sst");
        self.build(&p, 0, 1)?;
        self.single = Some(p.clone());
        Ok(p)
    }

    fn merged(&mut self) -> Result<Vec<PathBuf>> {
        if let Some(p) = &self.merged {
            return Ok(p.clone());
        }
        let mut paths = Vec::new();
        for t in 0..5u64 {
            let p = self.dir.path().join(format!("merge{t}.sst"));
            self.build(&p, t, 5)?;
            paths.push(p);
        }
        self.merged = Some(paths.clone());
        Ok(paths)
    }

    /// Runs one table benchmark.
    pub fn run(&mut self, name: &str) -> Result<Outcome> {
        let mut out = Outcome {
            name: name.to_string(),
            ops: 0,
            bytes: 0,
            found: None,
            writes: 0,
            thread_seconds: 0.0,
            wall_seconds: 0.0,
            percentiles: None,
            file_size: 0,
            note: None,
            memory: None,
        };
        match name {
            "table_read" | "table_read_and_build" => {
                let path = self.single()?;
                out.file_size = std::fs::metadata(&path)?.len();
                let table = Table::open(&path)?;
                let build = name == "table_read_and_build";
                let start = Instant::now();
                let mut it = table.iter_with(false);
                it.seek_to_first()?;
                let mut builder = if build {
                    Some(TableBuilder::new(Vec::with_capacity(out.file_size as usize), self.table_options()?)?)
                } else {
                    None
                };
                while it.valid() {
                    out.ops += 1;
                    out.bytes += (it.key().len() + it.value().len()) as u64;
                    if let Some(b) = builder.as_mut() {
                        b.add(it.key(), it.value())?;
                    }
                    it.next()?;
                }
                if let Some(b) = builder {
                    let (bytes, _, _) = b.finish()?;
                    out.note = Some(format!("rebuilt {} bytes in memory", bytes.len()));
                }
                out.wall_seconds = start.elapsed().as_secs_f64();
            }
            "table_read_merged" => {
                let paths = self.merged()?;
                let mut children: Vec<BoxedIter> = Vec::new();
                for p in &paths {
                    out.file_size += std::fs::metadata(p)?.len();
                    children.push(Box::new(Table::open(p)?.iter_with(false)));
                }
                let start = Instant::now();
                let mut it = MergingIterator::new(children);
                it.seek_to_first()?;
                let mut last: Vec<u8> = Vec::new();
                while it.valid() {
                    if key::compare(&last, it.key()).is_ge() && !last.is_empty() {
                        return Err(Error::Other("merged scan out of order".into()));
                    }
                    last.clear();
                    last.extend_from_slice(it.key());
                    out.ops += 1;
                    out.bytes += (it.key().len() + it.value().len()) as u64;
                    it.next()?;
                }
                out.wall_seconds = start.elapsed().as_secs_f64();
            }
            "table_random_read" => {
                let path = self.single()?;
                out.file_size = std::fs::metadata(&path)?.len();
                let cache = Arc::new(BlockCache::new(self.flags.cache_size, Arc::new(ReadCounters::default())));
                let table = Table::open_cached(&path, 1, Some(cache))?;
                let mut rng = StdRng::seed_from_u64(self.flags.seed);
                let reads = self.flags.reads();
                let mut k = Vec::new();
                let start = Instant::now();
                for _ in 0..reads {
                    let i = rng.random_range(0..self.flags.num);
                    make_key(i, self.flags.key_size, &mut k);
                    match table.get(&k, key::MAX_SEQUENCE, bloom::hash_key(&k))? {
                        Some(lsm::memtable::Lookup::Found(v, _))
                            if v.as_ref() == self.values.at(i, self.flags.value_size) =>
                        {
                            out.bytes += (k.len() + v.len()) as u64;
                        }
                        other => {
                            return Err(Error::Other(format!("table_random_read: key {i} read back as {other:?}")))
                        }
                    }
                    out.ops += 1;
                }
                out.wall_seconds = start.elapsed().as_secs_f64();
                out.found = Some(out.ops);
            }
            other => return Err(Error::Other(format!("unknown table benchmark '{other}'"))),
        }
        out.thread_seconds = out.wall_seconds;
        out.memory = Some(crate::memory::Memory::measure(None));
        Ok(out)
    }
}
