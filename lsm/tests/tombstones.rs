//! What tombstones cost readers, and how the engine takes that cost away: range reads stop at
//! their bounds instead of walking deleted keys to the next live one, the work they do is
//! counted (`Stats::iter_entries`), and tables whose entries are mostly tombstones are compacted
//! without waiting for a size trigger.

use std::time::{Duration, Instant};

use lsm::{Db, Options};

fn key(prefix: &str, i: u32) -> Vec<u8> {
    format!("{prefix}{i:08}").into_bytes()
}

#[test]
fn a_range_of_deleted_keys_costs_its_own_entries_only() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default().disable_auto_compactions(true)).unwrap();
    // Deleted ranges on both sides of the deleted range read, live keys only beyond them.
    for (prefix, n) in [("a", 20_000), ("b", 1000), ("c", 20_000)] {
        for i in 0..n {
            db.put(key(prefix, i), b"v").unwrap();
        }
        for i in 0..n {
            db.delete(key(prefix, i)).unwrap();
        }
    }
    for i in 0..100 {
        db.put(key("d", i), b"v").unwrap();
    }
    for flushed in [false, true] {
        if flushed {
            db.flush().unwrap();
        }
        let before = db.stats().iter_entries;
        assert_eq!(db.prefix(b"b").count(), 0);
        let forward = db.stats().iter_entries - before;
        // Every version of the deleted "b…" keys (put + tombstone), none of the "a…" or "c…" ones.
        assert!(forward <= 2000, "forward scan of a deleted range examined {forward} entries (flushed: {flushed})");
        let before = db.stats().iter_entries;
        assert!(db.range(&b"b"[..]..&b"c"[..]).next_back().is_none());
        let backward = db.stats().iter_entries - before;
        assert!(backward <= 2000, "backward scan examined {backward} entries (flushed: {flushed})");
        assert!(db.stats().iter_tombstones >= 1000);
    }
    // A bounded range still returns its live keys, from both ends.
    let live: Vec<_> = db.range(key("d", 10)..key("d", 13)).map(|kv| kv.unwrap().0).collect();
    assert_eq!(live, [key("d", 10), key("d", 11), key("d", 12)]);
    let back: Vec<_> = db.range(key("d", 10)..=key("d", 12)).rev().map(|kv| kv.unwrap().0).collect();
    assert_eq!(back, [key("d", 12), key("d", 11), key("d", 10)]);
    assert_eq!(db.range(&b"b"[..]..).next().unwrap().unwrap().0, key("d", 0));
}

#[test]
fn tables_full_of_tombstones_are_compacted_without_a_size_trigger() {
    let dir = tempfile::tempdir().unwrap();
    // Big level targets and an L0 trigger that two flushes never reach: only the deletion
    // trigger can start a compaction here.
    let opts = Options::default().level0_file_num_compaction_trigger(8).max_bytes_for_level_base(1 << 30);
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..20_000 {
        db.put(key("q", i), b"some value").unwrap();
    }
    db.flush().unwrap();
    for i in 0..20_000 {
        db.delete(key("q", i)).unwrap();
    }
    db.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = db.stats();
        if s.table_tombstones == 0 && s.tables_marked_for_compaction == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "tombstones never compacted away: {s}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(db.prefix(b"q").count(), 0);
    let before = db.stats().iter_entries;
    assert_eq!(db.prefix(b"q").count(), 0);
    assert_eq!(db.stats().iter_entries - before, 0, "nothing left for a reader to step over");
}

#[test]
fn a_snapshot_keeps_the_tombstones_it_needs_and_the_picker_does_not_spin() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default().level0_file_num_compaction_trigger(8).max_bytes_for_level_base(1 << 30);
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..5_000 {
        db.put(key("s", i), b"v").unwrap();
    }
    db.flush().unwrap();
    let snap = db.snapshot();
    for i in 0..5_000 {
        db.delete(key("s", i)).unwrap();
    }
    db.flush().unwrap();
    // Give the compaction threads time to do whatever they will do.
    std::thread::sleep(Duration::from_millis(500));
    let compactions = db.stats().compactions;
    std::thread::sleep(Duration::from_millis(500));
    assert!(db.stats().compactions <= compactions + 1, "compactions keep running while a snapshot pins tombstones");
    let old = db.range_with::<&[u8], _>(.., &lsm::ReadOptions::new().snapshot(&snap)).count();
    assert_eq!(old, 5_000, "the snapshot still sees every key");
    assert_eq!(db.prefix(b"s").count(), 0);
}
