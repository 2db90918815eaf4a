//! Compaction reclaims space, keeps levels sorted, respects snapshots and filters, and never
//! brings deleted keys back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use lsm::{CompactionFilter, Db, Decision, Options, ReadOptions, WriteBatch, WriteOptions};

/// Small everything, so a few megabytes exercise every level.
fn small() -> Options {
    Options::default()
        .write_buffer_size(64 << 10)
        .target_file_size_base(64 << 10)
        .max_bytes_for_level_base(256 << 10)
        .level0_file_num_compaction_trigger(4)
}

fn key(i: u64) -> String {
    format!("key{i:08}")
}

fn fill(db: &Db, range: std::ops::Range<u64>, round: u64) {
    let mut b = WriteBatch::new();
    for i in range {
        b.put(key(i), format!("round{round}-{i}-{}", "x".repeat(40)));
        if b.len() >= 500 {
            db.write(std::mem::take(&mut b), &WriteOptions::default()).unwrap();
        }
    }
    db.write(b, &WriteOptions::default()).unwrap();
}

fn assert_levels_sorted(db: &Db) {
    let files = db.live_files();
    for level in 1..7 {
        let lf: Vec<_> = files.iter().filter(|f| f.level == level).collect();
        for w in lf.windows(2) {
            assert!(
                w[0].largest_key < w[1].smallest_key,
                "L{level} tables {} and {} overlap",
                w[0].number,
                w[1].number
            );
        }
    }
}

#[test]
fn overwrites_are_reclaimed_by_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small().compression(lsm::Compression::None)).unwrap();
    const N: u64 = 100_000;
    fill(&db, 0..N, 0);
    db.compact_range::<&[u8], _>(..).unwrap();
    let one_copy = db.stats().total_bytes();
    for round in 1..10 {
        fill(&db, 0..N, round);
    }
    db.compact_range::<&[u8], _>(..).unwrap();
    let stats = db.stats();
    assert!(stats.total_bytes() < 2 * one_copy, "live {} bytes vs one copy {one_copy}\n{stats}", stats.total_bytes());
    assert!(stats.compactions > 0 && stats.write_amplification > 1.0, "{stats}");
    assert!(stats.levels[0].files == 0, "manual compaction empties L0\n{stats}");
    assert_levels_sorted(&db);
    for i in (0..N).step_by(997) {
        assert_eq!(db.get(key(i)).unwrap().unwrap(), format!("round9-{i}-{}", "x".repeat(40)).as_bytes());
    }
    // Every table file on disk is live; obsolete ones were deleted.
    let on_disk = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "sst"))
        .count();
    assert_eq!(on_disk, db.live_files().len());
}

#[test]
fn background_compaction_builds_sorted_levels() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small()).unwrap();
    // Scattered keys so tables overlap and real merges (not just moves) happen.
    let mut b = WriteBatch::new();
    for i in 0..200_000u64 {
        let k = (i * 7_919) % 200_000;
        b.put(key(k), format!("v{k}"));
        if b.len() >= 1000 {
            db.write(std::mem::take(&mut b), &WriteOptions::default()).unwrap();
        }
    }
    db.write(b, &WriteOptions::default()).unwrap();
    db.flush().unwrap();
    // Background compaction settles once no level is over its target: waiting for it returns
    // then, not before.
    db.wait_for_compactions().unwrap();
    let stats = db.stats();
    assert!(stats.levels.iter().all(|l| l.score < 1.0), "every level within its target\n{stats}");
    assert!(stats.levels[2].files > 0, "data reached L2\n{stats}");
    assert_levels_sorted(&db);
    assert_eq!(db.range::<&[u8], _>(..).count(), 200_000);
    for k in (0..200_000u64).step_by(1013) {
        assert_eq!(db.get(key(k)).unwrap().unwrap(), format!("v{k}").as_bytes());
    }
    // The range read above opened every live table: their filters alone hold 10 bits a key.
    let readers: usize = db.property("lsm.estimate-table-readers-mem").unwrap().parse().unwrap();
    assert!(readers >= 200_000 * 10 / 8, "{readers} bytes of indexes and filters for 200,000 keys");
    assert!(db.property("lsm.stats").unwrap().contains("Write amplification"));
    assert_eq!(db.property("lsm.num-files-at-level0").unwrap(), stats.levels[0].files.to_string());
}

#[test]
fn deleted_keys_never_reappear_after_compaction_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), small()).unwrap();
        fill(&db, 0..30_000, 0);
        db.compact_range::<&[u8], _>(..).unwrap(); // old versions now at the bottom
        for i in (0..30_000).filter(|i| i % 3 == 0) {
            db.delete(key(i)).unwrap();
        }
        fill(&db, 30_000..40_000, 1); // push the tombstones down through flushes
        db.compact_range(key(0)..key(15_000)).unwrap();
        for i in (0..30_000).step_by(3) {
            assert_eq!(db.get(key(i)).unwrap(), None, "key {i} came back");
        }
    }
    let db = Db::open(dir.path(), small()).unwrap();
    db.compact_range::<&[u8], _>(..).unwrap();
    for i in 0..40_000u64 {
        assert_eq!(db.get(key(i)).unwrap().is_some(), i >= 30_000 || i % 3 != 0, "key {i}");
    }
    assert_eq!(db.prefix(b"key").count(), 40_000 - 10_000);
    // At the bottom, no tombstone is left and every entry is live.
    let entries: u64 = db.live_files().iter().map(|f| f.entries).sum();
    assert_eq!(entries, 30_000);
}

#[test]
fn snapshots_keep_their_versions_through_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small()).unwrap();
    fill(&db, 0..20_000, 0);
    let snap = db.snapshot();
    fill(&db, 0..20_000, 1);
    for i in (0..20_000).step_by(2) {
        db.delete(key(i)).unwrap();
    }
    db.compact_range::<&[u8], _>(..).unwrap();
    let at = ReadOptions::new().snapshot(&snap);
    for i in (0..20_000u64).step_by(101) {
        assert_eq!(db.get_with(key(i), &at).unwrap().unwrap(), format!("round0-{i}-{}", "x".repeat(40)).as_bytes());
        let now = db.get(key(i)).unwrap();
        assert_eq!(now.is_some(), i % 2 == 1);
    }
    assert_eq!(db.range_with::<&[u8], _>(.., &at).count(), 20_000);
    drop((snap, at));
    // With the snapshot gone, the next full compaction drops round 0 and the tombstones.
    db.compact_range::<&[u8], _>(..).unwrap();
    let entries: u64 = db.live_files().iter().map(|f| f.entries).sum();
    assert_eq!(entries, 10_000);
}

/// Removes keys whose value says "expired", rewrites "old" values, counts calls.
struct Expiry(AtomicU64);

impl CompactionFilter for Expiry {
    fn filter(&self, _level: usize, _key: &[u8], value: &[u8]) -> Decision {
        self.0.fetch_add(1, Ordering::Relaxed);
        match value {
            b"expired" => Decision::Remove,
            b"old" => Decision::ChangeValue(b"new".to_vec()),
            _ => Decision::Keep,
        }
    }
    fn name(&self) -> &str {
        "expiry"
    }
}

#[test]
fn compaction_filter_removes_and_rewrites() {
    let dir = tempfile::tempdir().unwrap();
    let filter = Arc::new(Expiry(AtomicU64::new(0)));
    // A buffer that holds all 3000 writes: no automatic compaction runs the filter early.
    let db = Db::open(dir.path(), small().write_buffer_size(1 << 20).compaction_filter(filter.clone())).unwrap();
    // An older live version underneath: removal must not uncover it.
    for i in 0..3000u64 {
        db.put(key(i), b"live").unwrap();
    }
    db.compact_range::<&[u8], _>(..).unwrap();
    let snap = db.snapshot();
    for i in 0..3000u64 {
        let v: &[u8] = match i % 3 {
            0 => b"expired",
            1 => b"old",
            _ => b"keep",
        };
        db.put(key(i), v).unwrap();
    }
    db.flush().unwrap();
    // Before compaction the filter has not run: every value is as written.
    assert_eq!(db.get(key(0)).unwrap().as_deref(), Some(&b"expired"[..]));
    db.compact_range::<&[u8], _>(..).unwrap();
    assert!(filter.0.load(Ordering::Relaxed) >= 3000);
    for i in 0..3000u64 {
        let want: Option<&[u8]> = match i % 3 {
            0 => None,
            1 => Some(b"new"),
            _ => Some(b"keep"),
        };
        assert_eq!(db.get(key(i)).unwrap().as_deref(), want, "key {i}");
        // The snapshot taken before the writes still sees the old live values.
        assert_eq!(db.get_with(key(i), &ReadOptions::new().snapshot(&snap)).unwrap().as_deref(), Some(&b"live"[..]));
    }
    drop(snap);
    drop(db);
    let db = Db::open(dir.path(), small()).unwrap();
    assert_eq!(db.prefix(b"key").count(), 2000, "removals survive reopen");
}

#[test]
fn block_cache_serves_repeated_reads_of_compressed_blocks() {
    if !lsm::Compression::Snappy.is_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small().compression(lsm::Compression::Snappy)).unwrap();
    fill(&db, 0..5000, 0);
    db.compact_range::<&[u8], _>(..).unwrap();
    assert_eq!(
        (db.stats().block_cache_hits, db.stats().block_cache_misses),
        (0, 0),
        "compaction reads are not counted"
    );
    for _ in 0..3 {
        for i in (0..5000).step_by(50) {
            db.get(key(i)).unwrap().unwrap();
        }
    }
    let s = db.stats();
    // The first round misses once per block, the next two hit.
    assert!(s.block_cache_misses <= 100 && s.block_cache_hits >= 200, "{s}");
    assert!(s.block_cache_bytes > 0);
    assert!(s.bloom_checks > 0);
    // A scan that does not fill the cache leaves its size alone.
    let before = db.stats().block_cache_bytes;
    let mut opts = ReadOptions::new();
    opts.fill_cache = false;
    assert_eq!(db.range_with::<&[u8], _>(.., &opts).count(), 5000);
    assert!(db.stats().block_cache_bytes <= before);
}

#[test]
fn bloom_filters_skip_tables_for_missing_keys() {
    let dir = tempfile::tempdir().unwrap();
    // A buffer that holds each round of 1000 writes: one table per flush.
    let db = Db::open(dir.path(), small().write_buffer_size(1 << 20).disable_auto_compactions(true)).unwrap();
    for t in 0..5 {
        fill(&db, t * 1000..t * 1000 + 1000, 0);
        db.flush().unwrap();
    }
    assert_eq!(db.stats().levels[0].files, 5);
    for i in 0..1000 {
        assert_eq!(db.get(format!("key{i:08}x")).unwrap(), None);
    }
    let s = db.stats();
    assert!(s.bloom_useful as f64 > 0.95 * s.bloom_checks as f64, "{s}");
}

#[test]
fn a_rate_limited_compaction_is_throttled_and_stops_at_close_without_loss() {
    let dir = tempfile::tempdir().unwrap();
    // 1 KiB/s: compacting this data would take minutes.
    let opts = small().level0_file_num_compaction_trigger(2).compaction_rate_limit(1024);
    let db = Db::open(dir.path(), opts).unwrap();
    for round in 0..3 {
        fill(&db, 0..1500, round);
        db.flush().unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(db.stats().compactions, 0, "the throttled compaction has not finished");
    let closing = std::time::Instant::now();
    db.close().unwrap();
    // Liveness, not speed: close does not wait out the throttle.
    assert!(closing.elapsed() < std::time::Duration::from_secs(10));
    let db = Db::open(dir.path(), small()).unwrap();
    for i in (0..1500).step_by(97) {
        let v = db.get(key(i)).unwrap().unwrap();
        assert!(v.starts_with(format!("round2-{i}-").as_bytes()), "nothing lost or reverted");
    }
    db.compact_range::<&[u8], _>(..).unwrap();
    assert_levels_sorted(&db);
}

#[test]
fn blocks_of_compacted_away_tables_leave_the_block_cache() {
    let dir = tempfile::tempdir().unwrap();
    let opts = small().compression(lsm::Compression::Snappy).block_cache_size(64 << 20).disable_auto_compactions(true);
    let db = Db::open(dir.path(), opts).unwrap();
    for round in 0..4 {
        fill(&db, 0..3000, round);
        db.flush().unwrap();
    }
    let read_all = |db: &Db| {
        for i in 0..3000 {
            assert!(db.get(key(i)).unwrap().is_some());
        }
    };
    read_all(&db);
    let before = db.stats().block_cache_bytes;
    assert!(before > 0, "compressed blocks were cached");
    // Every table is rewritten: the cache then holds the new tables' blocks only.
    db.compact_range::<&[u8], _>(..).unwrap();
    read_all(&db);
    // One decompressed copy of the data before and after; stale blocks would make it two.
    let after = db.stats().block_cache_bytes;
    assert!(after < before * 3 / 2, "cache {after} bytes after compaction, {before} before: stale blocks stayed");
}

/// `set_options` while open: auto compactions switched on later compact what piled up in L0;
/// a smaller write buffer rotates memtables sooner; a smaller block cache evicts down to it;
/// a codec change applies to the tables written next, and every key still reads back.
#[test]
fn options_change_while_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small().disable_auto_compactions(true).block_cache_size(8 << 20)).unwrap();
    for round in 0..6 {
        fill(&db, 0..2_000, round);
        db.flush().unwrap();
    }
    // Nothing would run: waiting for compactions returns at once.
    db.wait_for_compactions().unwrap();
    assert!(db.stats().levels[0].files >= 6, "no compaction while they are off");
    assert_eq!(db.stats().compactions, 0);

    db.set_options(&lsm::MutableOptions { disable_auto_compactions: Some(false), ..Default::default() }).unwrap();
    db.wait_for_compactions().unwrap();
    let stats = db.stats();
    assert!(stats.levels[0].files < 4, "L0 compacted once auto compactions came on\n{stats}");
    assert!(stats.levels.iter().all(|l| l.score < 1.0), "{stats}");
    assert!(stats.compactions > 0);

    // Reads fill the cache; shrinking it evicts down to the new size.
    for i in (0..2_000).step_by(7) {
        assert!(db.get(key(i)).unwrap().is_some());
    }
    db.set_options(&lsm::MutableOptions { block_cache_size: Some(16 << 10), ..Default::default() }).unwrap();
    assert!(db.stats().block_cache_bytes <= 16 << 10, "{} bytes cached", db.stats().block_cache_bytes);

    let flushes = db.stats().flushes;
    db.set_options(&lsm::MutableOptions {
        write_buffer_size: Some(16 << 10),
        compression: Some(lsm::Compression::None),
        ..Default::default()
    })
    .unwrap();
    fill(&db, 0..2_000, 9);
    db.flush().unwrap();
    assert!(db.stats().flushes >= flushes + 4, "a 16 KiB buffer rotates every few hundred writes");
    for i in (0..2_000).step_by(13) {
        assert_eq!(db.get(key(i)).unwrap().unwrap(), format!("round9-{i}-{}", "x".repeat(40)).as_bytes());
    }
    drop(db);
    let db = Db::open(dir.path(), small()).unwrap();
    assert_eq!(db.get(key(1_999)).unwrap().unwrap(), format!("round9-1999-{}", "x".repeat(40)).as_bytes());
}

/// Compaction sizes each output's bloom filter from its inputs' entries per byte instead of
/// collecting every key's hash. Inputs that mix large and tiny values put far more keys into an
/// output than that average predicts: the output is cut when its filter is full, so every
/// filter keeps its bits a key and absent keys stay rejected, and tables stay sorted.
#[test]
fn outputs_of_mixed_entry_sizes_keep_their_filters_sharp() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small().compression(lsm::Compression::None)).unwrap();
    let mut b = WriteBatch::new();
    for i in 0..40_000u64 {
        // The first 500 keys carry 4 KiB, the rest 4 bytes: ~80 bytes an entry on average,
        // ~30 in the outputs past the large values.
        let v = if i < 500 { vec![b'v'; 4096] } else { b"tiny".to_vec() };
        b.put(key(i), v);
        if b.len() >= 500 {
            db.write(std::mem::take(&mut b), &WriteOptions::default()).unwrap();
        }
    }
    db.write(b, &WriteOptions::default()).unwrap();
    db.compact_range::<&[u8], _>(..).unwrap();
    assert_levels_sorted(&db);
    // Keys within the tables' ranges that were never written: only the filters can reject them.
    let before = db.stats();
    let absent = 20_000u64;
    for i in 0..absent {
        assert_eq!(db.get(format!("key{i:08}x")).unwrap(), None);
    }
    let after = db.stats();
    let (checks, useful) = (after.bloom_checks - before.bloom_checks, after.bloom_useful - before.bloom_useful);
    assert!(checks >= absent * 9 / 10, "{checks} filter checks");
    let false_positives = checks - useful;
    assert!(false_positives * 40 < checks, "{false_positives} of {checks} absent keys passed a filter");
    for i in (0..40_000u64).step_by(7) {
        let want = if i < 500 { 4096 } else { 4 };
        assert_eq!(db.get(key(i)).unwrap().map(|v| v.len()), Some(want), "key {i}");
    }
}
