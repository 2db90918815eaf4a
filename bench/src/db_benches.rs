//! The engine benchmarks, with db_bench's semantics.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use lsm::{Compression, Db, Options, ReadOptions, SyncMode, TableReadMode, WriteBatch, WriteOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::error::{Error, Result};
use crate::flags::Flags;
use crate::keys::{make_key, ValueGenerator};
use crate::memory::Memory;
use crate::runner::{run_threads, Outcome, Recorder, WriteRate};

/// The engine benchmarks this tool knows.
pub const DB_BENCHMARKS: &[&str] = &[
    "fill_seq",
    "fill_random",
    "fill_random_sync",
    "overwrite",
    "read_seq",
    "read_reverse",
    "read_random",
    "read_missing",
    "seek_random",
    "delete_random",
    "read_while_writing",
    "read_random_write_random",
    "update_random",
    "multi_read_random",
    "compact",
    "wait_for_compaction",
    "stats",
];

/// The database under test and the settings it was opened with.
pub struct DbBench {
    flags: Flags,
    path: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    db: Option<Db>,
    /// Benchmarks run so far: each run draws from fresh random streams, as in db_bench.
    runs: u64,
}

impl DbBench {
    /// Prepares the database directory (a temporary one unless --db is given).
    pub fn new(flags: &Flags) -> Result<Self> {
        let (path, tmp) = match &flags.db {
            Some(p) => (p.clone(), None),
            None => {
                let t = tempfile::Builder::new().prefix("shale-db_bench-").tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let mut b = DbBench { flags: flags.clone(), path, _tmp: tmp, db: None, runs: 0 };
        b.open(!flags.use_existing_db)?;
        Ok(b)
    }

    /// Engine options from the flags.
    pub fn options(flags: &Flags) -> Result<Options> {
        let compression: Compression = flags.compression.parse()?;
        let opts = Options::default();
        // Neither allocator returns a flushed memtable's or a finished compaction's memory to the
        // OS soon by itself (see lsm::allocator); RSS should show what the engine holds.
        #[cfg(feature = "jemalloc")]
        let opts = opts.memory_release(std::sync::Arc::new(lsm::allocator::purge));
        #[cfg(all(target_env = "gnu", not(feature = "jemalloc")))]
        let opts = opts.memory_release(std::sync::Arc::new(lsm::allocator::trim));
        Ok(opts
            .compression(compression)
            .block_cache_size(flags.cache_size)
            .row_cache_size(flags.row_cache_size)
            .charge_table_readers(flags.charge_table_reader)
            .charge_memtables(flags.cost_write_buffer_to_cache)
            .table_read_mode(if flags.mmap_read { TableReadMode::Mmap } else { TableReadMode::Pread })
            .bloom_bits_per_key(flags.bloom_bits)
            .data_block_hash_index(flags.use_data_block_hash_index)
            .block_size(flags.block_size)
            .block_restart_interval(flags.block_restart_interval)
            .write_buffer_size(flags.write_buffer_size)
            .sync_mode(SyncMode::Never))
    }

    fn open(&mut self, fresh: bool) -> Result<()> {
        if let Some(db) = self.db.take() {
            db.close()?;
        }
        if fresh && self.path.exists() {
            std::fs::remove_dir_all(&self.path)?;
        }
        self.db = Some(Db::open(&self.path, Self::options(&self.flags)?)?);
        Ok(())
    }

    fn db(&self) -> Result<&Db> {
        self.db.as_ref().ok_or_else(|| Error::Other("database is not open".into()))
    }

    /// The engine's statistics (`lsm.stats`), if the database is open.
    pub fn statistics(&self) -> Option<String> {
        self.db.as_ref().and_then(|db| db.property("lsm.stats"))
    }

    /// Bytes in the database directory.
    pub fn dir_size(&self) -> u64 {
        dir_size(&self.path)
    }

    /// Runs one benchmark. `Ok(None)` when it is skipped (a fill with --use_existing_db).
    pub fn run(&mut self, name: &str) -> Result<Option<Outcome>> {
        self.runs += 1;
        let mut f = self.flags.clone();
        f.seed = f.seed.wrapping_add(self.runs.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        // A run over an existing database draws other streams than the run that filled it:
        // otherwise its first benchmark would repeat the fill's keys (every seek and read a
        // hit, where RocksDB's db_bench, seeded afresh, finds ~63 % after a random fill).
        if f.use_existing_db {
            f.seed ^= 0x5851_f42d_4c95_7f2d;
        }
        let fresh = matches!(name, "fill_seq" | "fill_random" | "fill_random_sync");
        if fresh {
            if f.use_existing_db {
                return Ok(None);
            }
            self.open(true)?;
        }
        let db = self.db()?.clone();
        let threads = f.threads.max(1);
        let num = f.num;
        let reads = f.reads();
        let wopts = WriteOptions { sync: f.sync };
        let mut outcome = match name {
            "fill_seq" => write_bench(name, &f, &db, num, threads, wopts, Order::Sequential)?,
            "fill_random" | "overwrite" => write_bench(name, &f, &db, num, threads, wopts, Order::Random)?,
            "fill_random_sync" => {
                write_bench(name, &f, &db, (num / 100).max(1), threads, WriteOptions::synced(), Order::Random)?
            }
            "delete_random" => run_threads(name, threads, num * threads as u64, f.histogram, false, |t, r| {
                let mut rng = thread_rng(&f, t);
                let mut key = Vec::new();
                for _ in 0..num {
                    make_key(rng.random_range(0..num), f.key_size, &mut key);
                    db.delete(&key)?;
                    r.done(key.len());
                }
                Ok(())
            })?,
            "read_random" | "read_missing" => {
                let missing = name == "read_missing";
                run_threads(name, threads, reads * threads as u64, f.histogram, true, |t, r| {
                    random_reads(&f, &db, t, reads, missing, r)
                })?
            }
            "seek_random" => run_threads(name, threads, reads * threads as u64, f.histogram, true, |t, r| {
                let mut rng = thread_rng(&f, t);
                let mut key = Vec::new();
                let mut it = db.iter(&ReadOptions::default());
                for _ in 0..reads {
                    make_key(rng.random_range(0..num), f.key_size, &mut key);
                    it.seek(&key)?;
                    if it.valid() && it.key() == key.as_slice() {
                        r.found();
                    }
                    r.done(key.len());
                }
                Ok(())
            })?,
            "read_seq" | "read_reverse" => {
                let reverse = name == "read_reverse";
                run_threads(name, threads, reads * threads as u64, f.histogram, false, |_, r| {
                    let mut it = db.iter(&ReadOptions::default());
                    if reverse {
                        it.seek_to_last()?;
                    } else {
                        it.seek_to_first()?;
                    }
                    let mut n = 0;
                    while it.valid() && n < reads {
                        r.done(it.key().len() + it.value().len());
                        n += 1;
                        if reverse {
                            it.prev()?;
                        } else {
                            it.next()?;
                        }
                    }
                    it.status()?;
                    Ok(())
                })?
            }
            "read_while_writing" => read_while_writing(&f, &db, threads, reads)?,
            "read_random_write_random" | "update_random" => {
                let body = if name == "update_random" { update_random } else { read_random_write_random };
                let ops = f.read_writes();
                let rate = WriteRate::new(f.write_rate_limit);
                run_threads(name, threads, ops * threads as u64, f.histogram, true, |t, r| {
                    body(&f, &db, t, ops, &rate, r)
                })?
            }
            "multi_read_random" => run_threads(name, threads, reads * threads as u64, f.histogram, true, |t, r| {
                multi_read_random(&f, &db, t, reads, r)
            })?,
            "compact" => run_threads(name, 1, 1, f.histogram, false, |_, r| {
                db.compact_range::<&[u8], _>(..)?;
                r.done(0);
                Ok(())
            })?,
            "wait_for_compaction" => run_threads(name, 1, 1, f.histogram, false, |_, r| {
                db.wait_for_compactions()?;
                r.done(0);
                Ok(())
            })?,
            "stats" => {
                let mut o = run_threads(name, 1, 0, false, false, |_, _| Ok(()))?;
                o.note = db.property("lsm.stats");
                o
            }
            other => return Err(Error::Other(format!("unknown benchmark '{other}'"))),
        };
        outcome.file_size = self.dir_size();
        outcome.memory = Some(Memory::measure(Some(&db)));
        Ok(Some(outcome))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    Sequential,
    Random,
}

fn thread_rng(f: &Flags, t: usize) -> StdRng {
    StdRng::seed_from_u64(f.seed.wrapping_mul(1_000_003).wrapping_add(t as u64))
}

#[allow(clippy::too_many_arguments)]
fn write_bench(
    name: &str,
    f: &Flags,
    db: &Db,
    count: u64,
    threads: usize,
    wopts: WriteOptions,
    order: Order,
) -> Result<Outcome> {
    let rate = WriteRate::new(f.write_rate_limit);
    // `--batch_size` entries per write batch, each counted as one operation (db_bench's
    // `entries_per_batch`).
    let per_batch = f.batch_size.max(1) as u64;
    run_threads(name, threads, count * threads as u64, f.histogram, false, |t, r| {
        let mut rng = thread_rng(f, t);
        let mut values = ValueGenerator::new(f.compression_ratio, f.value_size, f.seed + t as u64);
        let mut key = Vec::with_capacity(f.key_size);
        let mut batch = WriteBatch::new();
        let mut sizes = Vec::with_capacity(per_batch as usize);
        for i in 0..count {
            let k = match order {
                Order::Sequential => i,
                Order::Random => rng.random_range(0..f.num),
            };
            make_key(k, f.key_size, &mut key);
            let value = values.generate(f.value_size);
            batch.put(&key, value);
            sizes.push(key.len() + value.len());
            if f.range_tombstone_due(i + 1) {
                let begin = match order {
                    Order::Sequential => i + 1,
                    Order::Random => rng.random_range(0..f.num),
                };
                let (mut from, mut to) = (Vec::new(), Vec::new());
                make_key(begin, f.key_size, &mut from);
                make_key(begin + f.range_tombstone_width, f.key_size, &mut to);
                batch.delete_range(from, to);
            }
            if sizes.len() as u64 == per_batch || i + 1 == count {
                rate.admit(sizes.iter().sum());
                // The next batch gets this one's size up front, as db_bench reuses its batch:
                // no reallocation while it fills.
                let next = WriteBatch::with_capacity(batch.size_in_bytes());
                db.write(std::mem::replace(&mut batch, next), &wopts)?;
                for size in sizes.drain(..) {
                    r.done(size);
                }
            }
        }
        Ok(())
    })
}

/// `reads` gets of uniformly random keys (or of keys just past the written range).
fn random_reads(f: &Flags, db: &Db, thread: usize, reads: u64, missing: bool, r: &mut Recorder) -> lsm::Result<()> {
    let mut rng = thread_rng(f, thread);
    let mut key = Vec::new();
    for _ in 0..reads {
        let k = rng.random_range(0..f.num);
        make_key(if missing { f.num + k } else { k }, f.key_size, &mut key);
        match db.get(&key)? {
            Some(v) => {
                r.found();
                r.done(key.len() + v.len());
            }
            None => r.done(key.len()),
        }
    }
    Ok(())
}

/// db_bench's `readrandomwriterandom`: `ops` operations on random keys, `--readwritepercent` of
/// them gets and the rest puts, interleaved as db_bench does (runs of reads, then of writes,
/// in the ratio's proportion).
fn read_random_write_random(
    f: &Flags,
    db: &Db,
    thread: usize,
    ops: u64,
    rate: &WriteRate,
    r: &mut Recorder,
) -> lsm::Result<()> {
    let mut rng = thread_rng(f, thread);
    let mut values = ValueGenerator::new(f.compression_ratio, f.value_size, f.seed + thread as u64);
    let mut key = Vec::new();
    let read_weight = f.read_write_percent.min(100);
    let (mut reads_left, mut writes_left) = (0u32, 0u32);
    for _ in 0..ops {
        if reads_left == 0 && writes_left == 0 {
            (reads_left, writes_left) = (read_weight, 100 - read_weight);
        }
        make_key(rng.random_range(0..f.num), f.key_size, &mut key);
        if reads_left > 0 {
            reads_left -= 1;
            match db.get(&key)? {
                Some(v) => {
                    r.found();
                    r.done(key.len() + v.len());
                }
                None => r.done(key.len()),
            }
        } else {
            writes_left -= 1;
            let value = values.generate(f.value_size);
            rate.admit(key.len() + value.len());
            db.put(&key, value)?;
            r.wrote();
            r.done(key.len() + value.len());
        }
    }
    Ok(())
}

/// db_bench's `updaterandom`: read-modify-write of `ops` random keys (a get, then a put of a
/// fresh value whether the key was found or not).
fn update_random(f: &Flags, db: &Db, thread: usize, ops: u64, rate: &WriteRate, r: &mut Recorder) -> lsm::Result<()> {
    let mut rng = thread_rng(f, thread);
    let mut values = ValueGenerator::new(f.compression_ratio, f.value_size, f.seed + thread as u64);
    let mut key = Vec::new();
    for _ in 0..ops {
        make_key(rng.random_range(0..f.num), f.key_size, &mut key);
        let mut bytes = key.len();
        if let Some(old) = db.get(&key)? {
            r.found();
            bytes += old.len();
        }
        let value = values.generate(f.value_size);
        rate.admit(key.len() + value.len());
        db.put(&key, value)?;
        r.wrote();
        r.done(bytes + value.len());
    }
    Ok(())
}

/// db_bench's `multireadrandom`: `reads` random keys, looked up `--batch_size` at a time with
/// one [`Db::multi_get`] per batch (each key counts as one operation, as in db_bench).
fn multi_read_random(f: &Flags, db: &Db, thread: usize, reads: u64, r: &mut Recorder) -> lsm::Result<()> {
    let mut rng = thread_rng(f, thread);
    let batch = f.batch_size.max(1) as u64;
    let opts = ReadOptions::default();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut left = reads;
    while left > 0 {
        let n = batch.min(left);
        left -= n;
        keys.resize_with(n as usize, Vec::new);
        for key in &mut keys {
            make_key(rng.random_range(0..f.num), f.key_size, key);
        }
        for (key, value) in keys.iter().zip(db.multi_get(&keys, &opts)?) {
            match value {
                Some(v) => {
                    r.found();
                    r.done(key.len() + v.len());
                }
                None => r.done(key.len()),
            }
        }
    }
    Ok(())
}

fn read_while_writing(f: &Flags, db: &Db, readers: usize, reads: u64) -> Result<Outcome> {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writer = s.spawn(|| -> Result<u64> {
            let rate = WriteRate::new(f.write_rate_limit);
            let mut rng = thread_rng(f, 999);
            let mut values = ValueGenerator::new(f.compression_ratio, f.value_size, f.seed + 999);
            let mut key = Vec::new();
            let mut written = 0;
            while !stop.load(Ordering::Relaxed) {
                make_key(rng.random_range(0..f.num), f.key_size, &mut key);
                rate.admit(key.len() + f.value_size);
                db.put(&key, values.generate(f.value_size))?;
                written += 1;
            }
            Ok(written)
        });
        let result = run_threads("read_while_writing", readers, reads * readers as u64, f.histogram, true, |t, r| {
            random_reads(f, db, t, reads, false, r)
        });
        stop.store(true, Ordering::Relaxed);
        let written = writer.join().map_err(|_| Error::Other("writer thread panicked".into()))??;
        let mut o = result?;
        o.note = Some(format!("{written} writes alongside"));
        Ok(o)
    })
}

/// Total bytes of the files under `path`.
pub fn dir_size(path: &Path) -> u64 {
    std::fs::read_dir(path)
        .map(|rd| {
            rd.filter_map(|e| e.ok()).filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()
        })
        .unwrap_or(0)
}
