//! Tables read through a memory map and with `pread` into the block cache give the same
//! answers: a database written once is read back in both modes and compared with a model.

use std::collections::BTreeMap;

use lsm::{Compression, Db, Options, TableReadMode};
use rand::{Rng, SeedableRng};

#[test]
fn mmap_and_pread_read_the_same_data() {
    let codecs = [Compression::None, Compression::Snappy].into_iter().filter(|c| c.is_available());
    for codec in codecs {
        let dir = tempfile::tempdir().unwrap();
        let mut model = BTreeMap::new();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        {
            // Small memtables and tables: many tables on several levels.
            let opts = Options::default().compression(codec).write_buffer_size(64 << 10).block_cache_size(256 << 10);
            let db = Db::open(dir.path(), opts).unwrap();
            for i in 0..20_000u32 {
                let key = format!("key{:06}", rng.random_range(0..8000u32));
                if i % 7 == 0 {
                    db.delete(&key).unwrap();
                    model.remove(&key);
                } else {
                    let value = format!("{i}-{}", "v".repeat(rng.random_range(0..200)));
                    db.put(&key, &value).unwrap();
                    model.insert(key, value);
                }
            }
            db.flush().unwrap();
        }
        for mode in [TableReadMode::Mmap, TableReadMode::Pread] {
            // A cache far smaller than the data, so blocks are read from the files again and again.
            let db = Db::open(dir.path(), Options::default().table_read_mode(mode).block_cache_size(64 << 10)).unwrap();
            for k in 0..8000u32 {
                let key = format!("key{k:06}");
                let got = db.get(&key).unwrap();
                assert_eq!(got.as_deref(), model.get(&key).map(|v| v.as_bytes()), "{codec:?} {mode:?} {key}");
            }
            let scanned: Vec<(Vec<u8>, Vec<u8>)> =
                db.range::<&[u8], _>(..).map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap()).collect();
            let expected: Vec<(Vec<u8>, Vec<u8>)> =
                model.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())).collect();
            assert_eq!(scanned, expected, "{codec:?} {mode:?} scan");
            db.compact_range::<&[u8], _>(..).unwrap();
            assert_eq!(db.range::<&[u8], _>(..).count(), model.len(), "{codec:?} {mode:?} after compaction");
        }
    }
}

/// `ReadOptions::cache_only` reads answer from memory or fail with `WouldBlock`, never wrongly:
/// memtable keys at once, table keys once their block is cached (pread) and never from a
/// mapped table; iterators likewise; a plain read afterwards always succeeds.
#[test]
fn cache_only_reads_answer_from_memory_or_would_block() {
    use lsm::{Error, ReadOptions};
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), Options::default()).unwrap();
        for i in 0..5000u32 {
            db.put(format!("key{i:05}"), format!("value{i}")).unwrap();
        }
        db.flush().unwrap();
    }
    let memory_only = ReadOptions::new().cache_only(true);
    for mode in [TableReadMode::Pread, TableReadMode::Mmap] {
        let db = Db::open(dir.path(), Options::default().table_read_mode(mode)).unwrap();
        db.put("fresh", "in the memtable").unwrap();
        assert_eq!(db.get_with("fresh", &memory_only).unwrap().as_deref(), Some(&b"in the memtable"[..]), "{mode:?}");
        // Not in the memtable: its block has not been read since the database opened.
        assert!(matches!(db.get_with("key00042", &memory_only), Err(Error::WouldBlock)), "{mode:?}");
        assert_eq!(db.get("key00042").unwrap().as_deref(), Some(&b"value42"[..]));
        // Now its block is cached (pread); a mapped table is never touched by memory-only reads.
        let again = db.get_with("key00042", &memory_only);
        match mode {
            TableReadMode::Pread => assert_eq!(again.unwrap().as_deref(), Some(&b"value42"[..])),
            TableReadMode::Mmap => assert!(matches!(again, Err(Error::WouldBlock))),
        }
        // A key the bloom filter rules out needs no block (pread keeps filters in memory).
        let absent = db.get_with("key00042x", &memory_only);
        match mode {
            TableReadMode::Pread => assert_eq!(absent.unwrap(), None),
            TableReadMode::Mmap => assert!(matches!(absent, Err(Error::WouldBlock))),
        }
        // A scan from memory fails as soon as it needs an uncached block, and reports it.
        let scanned: Result<Vec<_>, _> = db.range_with::<&[u8], _>(.., &memory_only).collect();
        assert!(matches!(scanned, Err(Error::WouldBlock)), "{mode:?}");
        assert_eq!(db.range::<&[u8], _>(..).count(), 5001, "{mode:?}");
        if mode == TableReadMode::Pread {
            // Everything was just read into the cache (the default cache holds it all).
            assert_eq!(db.range_with::<&[u8], _>(.., &memory_only).filter(|r| r.is_ok()).count(), 5001);
        }
    }
}

/// With `prepopulate_block_cache`, a flush leaves the blocks it wrote in the block cache: every
/// flushed key is then readable from memory (and right), where without it the first read of
/// each block needs the file. Mapped tables get only their compressed blocks (uncompressed
/// ones are read in place, never through the cache).
#[test]
fn a_flush_can_leave_its_blocks_in_the_cache() {
    use lsm::{Error, ReadOptions};
    let memory_only = ReadOptions::new().cache_only(true);
    let codecs: Vec<Compression> =
        [Compression::None, Compression::Snappy].into_iter().filter(|c| c.is_available()).collect();
    for codec in codecs {
        for prepopulate in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let opts = Options::default().compression(codec).prepopulate_block_cache(prepopulate);
            let db = Db::open(dir.path(), opts.table_read_mode(TableReadMode::Pread)).unwrap();
            for i in 0..5000u32 {
                db.put(format!("key{i:05}"), format!("value{i}")).unwrap();
            }
            db.flush().unwrap();
            db.put("fresh", "in the memtable").unwrap();
            for i in (0..5000u32).step_by(37) {
                let got = db.get_with(format!("key{i:05}"), &memory_only);
                if prepopulate {
                    assert_eq!(got.unwrap().as_deref(), Some(format!("value{i}").as_bytes()), "{codec:?} key{i:05}");
                } else {
                    assert!(matches!(got, Err(Error::WouldBlock)), "{codec:?}: nothing read yet, nothing cached");
                }
            }
            let scanned: Result<Vec<_>, _> = db.range_with::<&[u8], _>(.., &memory_only).collect();
            assert_eq!(scanned.is_ok(), prepopulate, "{codec:?}: a scan from memory");
            if prepopulate {
                assert_eq!(scanned.unwrap().len(), 5001);
            }
        }
    }
}

/// A memtable holding a range deletion is flushed without filling the cache: what it holds was
/// mostly just dropped, and would otherwise keep its memory in the cache until compaction.
#[test]
fn a_flush_of_dropped_data_leaves_the_cache_alone() {
    use lsm::{Error, ReadOptions};
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default().prepopulate_block_cache(true)).unwrap();
    for i in 0..5000u32 {
        db.put(format!("key{i:05}"), format!("value{i}")).unwrap();
    }
    db.delete_range("key01000", "key05000").unwrap();
    db.flush().unwrap();
    assert_eq!(db.stats().block_cache_bytes, 0, "nothing cached");
    let memory_only = ReadOptions::new().cache_only(true);
    assert!(matches!(db.get_with("key00007", &memory_only), Err(Error::WouldBlock)));
    assert_eq!(db.get("key00007").unwrap().as_deref(), Some(&b"value7"[..]));
    assert_eq!(db.get("key04000").unwrap(), None);
}

/// A memtable frozen by `flush_in_background` (to return the memory of data the application
/// just dropped) is flushed without filling the cache either; a flush of a full memtable does
/// fill it.
#[test]
fn a_flush_to_return_memory_leaves_the_cache_alone() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default().prepopulate_block_cache(true)).unwrap();
    for i in 0..5000u32 {
        db.put(format!("key{i:05}"), format!("value{i}")).unwrap();
    }
    assert!(db.flush_in_background(0).unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while db.num_files_at_level(0) == 0 {
        assert!(std::time::Instant::now() < deadline, "the background flush never ran");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(db.stats().block_cache_bytes, 0, "nothing cached");
    for i in 0..5000u32 {
        db.put(format!("more{i:05}"), format!("value{i}")).unwrap();
    }
    db.flush().unwrap();
    assert!(db.stats().block_cache_bytes > 0, "an ordinary flush fills the cache");
}

/// With a row cache, a key read again from a table is answered from its row (counted as a
/// hit), and answers stay right: a snapshot older than a table does not take that table's row
/// for a version it must not see, rows of tables a compaction replaced are dropped, and a
/// cache-only read of a mapped table can be served by a row.
#[test]
fn the_row_cache_answers_repeated_reads_without_stale_versions() {
    use lsm::ReadOptions;
    for mode in [TableReadMode::Pread, TableReadMode::Mmap] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::default().table_read_mode(mode).row_cache_size(1 << 20)).unwrap();
        for i in 0..1000u32 {
            db.put(format!("key{i:04}"), format!("old{i}")).unwrap();
        }
        db.delete("key0007").unwrap();
        db.flush().unwrap();
        let old = db.snapshot();
        for round in 0..2 {
            for i in 0..1000u32 {
                let want = (i != 7).then(|| format!("old{i}"));
                assert_eq!(db.get(format!("key{i:04}")).unwrap().as_deref(), want.as_deref().map(str::as_bytes));
            }
            let s = db.stats();
            assert_eq!((s.row_cache_hits, s.row_cache_misses), (1000 * round, 1000), "{mode:?} round {round}");
        }
        assert!(db.stats().row_cache_bytes > 1000 * 8);
        let memory_only = ReadOptions::new().cache_only(true);
        assert_eq!(db.get_with("key0042", &memory_only).unwrap().as_deref(), Some(&b"old42"[..]), "{mode:?}");
        // A newer table over the first: the latest reads see it, the old snapshot does not.
        for i in (0..1000u32).step_by(2) {
            db.put(format!("key{i:04}"), format!("new{i}")).unwrap();
        }
        db.flush().unwrap();
        let at_old = ReadOptions::new().snapshot(&old);
        for _ in 0..2 {
            for i in 0..1000u32 {
                let key = format!("key{i:04}");
                let latest = if i % 2 == 0 { Some(format!("new{i}")) } else { (i != 7).then(|| format!("old{i}")) };
                assert_eq!(db.get(&key).unwrap().as_deref(), latest.as_deref().map(str::as_bytes), "{mode:?} {key}");
                let then = (i != 7).then(|| format!("old{i}"));
                assert_eq!(db.get_with(&key, &at_old).unwrap().as_deref(), then.as_deref().map(str::as_bytes));
            }
        }
        // One table after a full compaction: the replaced tables' rows are gone, the answers
        // the same.
        let before = db.stats().row_cache_bytes;
        drop(old);
        db.compact_range::<&[u8], _>(..).unwrap();
        assert!(db.stats().row_cache_bytes < before, "{mode:?}");
        assert_eq!(db.get("key0002").unwrap().as_deref(), Some(&b"new2"[..]));
        assert_eq!(db.get("key0003").unwrap().as_deref(), Some(&b"old3"[..]));
        assert_eq!(db.get("key0007").unwrap(), None);
    }
}

/// A lookup with `fill_row_cache(false)` (what a read-modify-write reads with) answers the same,
/// from a cached row when there is one, but leaves no row behind; an ordinary lookup does.
#[test]
fn lookups_without_fill_row_cache_leave_no_rows() {
    use lsm::ReadOptions;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default().row_cache_size(1 << 20)).unwrap();
    for i in 0..100u32 {
        db.put(format!("key{i:03}"), format!("value{i}")).unwrap();
    }
    db.flush().unwrap();
    let no_rows = ReadOptions::new().fill_row_cache(false);
    for i in 0..100u32 {
        let got = db.get_with(format!("key{i:03}"), &no_rows).unwrap();
        assert_eq!(got.as_deref(), Some(format!("value{i}").as_bytes()));
    }
    let s = db.stats();
    assert_eq!((s.row_cache_bytes, s.row_cache_hits, s.row_cache_misses), (0, 0, 100), "no row kept");
    assert_eq!(db.get_with("absent", &no_rows).unwrap(), None);
    // An ordinary lookup keeps its row, and a later lookup without filling still uses it.
    assert_eq!(db.get("key042").unwrap().as_deref(), Some(&b"value42"[..]));
    assert!(db.stats().row_cache_bytes > 0);
    assert_eq!(db.get_with("key042", &no_rows).unwrap().as_deref(), Some(&b"value42"[..]));
    assert_eq!(db.stats().row_cache_hits, 1);
}

/// With `charge_table_readers` (the default) the block cache's size bounds cached blocks and
/// the open tables' indexes and filters together; without it, blocks fill the whole cache and
/// the tables' memory comes on top. Either way `memory_usage` counts both.
#[test]
fn the_block_cache_bounds_blocks_and_table_metadata_together() {
    let dir = tempfile::tempdir().unwrap();
    {
        let opts = Options::default().write_buffer_size(256 << 10).block_size(1024).disable_auto_compactions(true);
        let db = Db::open(dir.path(), opts).unwrap();
        for i in 0..60_000u32 {
            db.put(format!("key{i:06}"), format!("{i}-{}", "v".repeat(40))).unwrap();
        }
        db.flush().unwrap();
    }
    const CACHE: usize = 512 << 10;
    for charge in [true, false] {
        let db = Db::open(dir.path(), Options::default().block_cache_size(CACHE).charge_table_readers(charge)).unwrap();
        // Let the reopened tree finish compacting its L0 first: while a compaction runs, its
        // inputs and outputs are open together and the tables' memory is briefly twice as much.
        db.wait_for_compactions().unwrap();
        for i in (0..60_000u32).step_by(7) {
            assert!(db.get(format!("key{i:06}")).unwrap().is_some());
        }
        let stats = db.stats();
        let (blocks, tables) = (stats.block_cache_bytes, stats.table_readers_bytes);
        assert!(tables > 64 << 10 && tables < CACHE / 2, "the tables' indexes and filters: {tables}");
        // The cache's shards are each bounded to within a block of their share.
        let slack = 16 * 2048;
        if charge {
            assert!(blocks + tables <= CACHE + slack, "charged: blocks {blocks} + tables {tables} within {CACHE}");
            assert!(blocks + tables > CACHE - slack - 16 * 2048, "charged: the cache is used: {blocks} + {tables}");
        } else {
            assert!(blocks <= CACHE + slack && blocks > CACHE - 2 * slack, "uncharged: blocks {blocks} fill {CACHE}");
        }
        assert!(db.memory_usage() >= blocks + tables, "memory_usage counts blocks and tables");
    }
}

/// With `charge_memtables` the block cache's size bounds what the memtables hold too: as the
/// active memtable fills, cached blocks make room for it, and once it is flushed the blocks
/// get the room back. Without it, blocks fill the cache and the memtables come on top.
#[test]
fn charged_memtables_take_their_room_from_the_cached_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let key = |i: u32| format!("key{i:07}");
    const KEYS: u32 = 150_000;
    {
        let opts = Options::default().write_buffer_size(1 << 20).block_size(1024).disable_auto_compactions(true);
        let db = Db::open(dir.path(), opts).unwrap();
        for i in 0..KEYS {
            db.put(key(i), format!("{i}-{}", "v".repeat(40))).unwrap();
        }
        db.flush().unwrap();
    }
    const CACHE: usize = 8 << 20;
    for charge in [true, false] {
        let opts = Options::default()
            .block_cache_size(CACHE)
            .write_buffer_size(16 << 20)
            .disable_auto_compactions(true)
            .charge_memtables(charge);
        let db = Db::open(dir.path(), opts).unwrap();
        // Two MiB of new keys stay in the active memtable (beside its lookup structures').
        for i in 0..15_000u32 {
            db.put(format!("new{i:07}"), "n".repeat(100)).unwrap();
        }
        let read_all = || {
            for i in (0..KEYS).step_by(3) {
                assert!(db.get(key(i)).unwrap().is_some());
            }
        };
        read_all();
        let stats = db.stats();
        let (blocks, tables) = (stats.block_cache_bytes, stats.table_readers_bytes);
        let memtables = db.memory_usage() - blocks - tables - stats.row_cache_bytes;
        assert!(memtables > 3 << 20, "the memtable holds the new keys and its lookup structures: {memtables}");
        // The shards are bounded to within a block of their share, the charge to within a MiB.
        let slack = 16 * 2048;
        if charge {
            assert!(blocks + tables + memtables <= CACHE + (1 << 20) + slack, "{blocks} + {tables} + {memtables}");
            assert!(
                blocks + tables + memtables > CACHE - 2 * slack,
                "the cache is used: {blocks} + {tables} + {memtables}"
            );
        } else {
            assert!(blocks + tables <= CACHE + slack && blocks + tables > CACHE - 2 * slack, "{blocks} + {tables}");
        }
        db.flush().unwrap();
        read_all();
        let after = db.stats().block_cache_bytes;
        if charge {
            assert!(after > blocks + (1 << 20), "a flushed memtable gives its room back: {blocks} -> {after}");
        } else {
            assert!(after.abs_diff(blocks) <= 2 * slack, "uncharged, the flush changes nothing: {blocks} -> {after}");
        }
    }
}
