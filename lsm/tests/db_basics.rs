//! Everyday behaviour of `Db`: reads and writes, snapshots, iterators, reopen, locking.

use std::sync::Arc;

use lsm::{Db, Error, Options, ReadOptions, WriteBatch, WriteOptions};

fn small() -> Options {
    Options::default().write_buffer_size(16 << 10).block_size(512)
}

#[test]
fn put_get_delete_and_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small()).unwrap();
    assert_eq!(db.get(b"missing").unwrap(), None);
    db.put(b"k", b"v1").unwrap();
    db.put(b"k", b"v2").unwrap();
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v2"[..]));
    db.delete(b"k").unwrap();
    assert_eq!(db.get(b"k").unwrap(), None);
    db.put(b"", b"empty key works").unwrap();
    assert_eq!(db.get(b"").unwrap().as_deref(), Some(&b"empty key works"[..]));
    let big = vec![7u8; 300_000]; // larger than a WAL block and a memtable
    db.put(b"big", &big).unwrap();
    assert_eq!(db.get(b"big").unwrap().as_deref(), Some(&big[..]));
    db.flush().unwrap();
    assert_eq!(db.get(b"big").unwrap().as_deref(), Some(&big[..]));
    assert_eq!(db.get(b"k").unwrap(), None, "tombstone survives flush");
}

#[test]
fn batches_are_atomic_and_numbered() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small()).unwrap();
    let before = db.latest_sequence();
    let mut b = WriteBatch::new();
    b.put(b"a", b"1").put(b"b", b"2").delete(b"a");
    db.write(b, &WriteOptions::synced()).unwrap();
    assert_eq!(db.latest_sequence(), before + 3);
    assert_eq!(db.get(b"a").unwrap(), None);
    assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
    db.write(WriteBatch::new(), &WriteOptions::default()).unwrap();
    assert_eq!(db.latest_sequence(), before + 3, "an empty batch takes no sequence number");
}

#[test]
fn data_and_sequence_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut seq;
    {
        let db = Db::open(dir.path(), small()).unwrap();
        for i in 0..5000u32 {
            db.put(format!("key{i:05}"), format!("value{i}")).unwrap();
        }
        for i in (0..5000u32).step_by(3) {
            db.delete(format!("key{i:05}")).unwrap();
        }
        seq = db.latest_sequence();
        assert!(db.stats().flushes > 1, "small buffers produce many flushes");
    }
    for _ in 0..2 {
        let db = Db::open(dir.path(), small()).unwrap();
        assert_eq!(db.latest_sequence(), seq);
        for i in 0..5000u32 {
            let want = (i % 3 != 0).then(|| format!("value{i}").into_bytes());
            assert_eq!(db.get(format!("key{i:05}")).unwrap().map(|b| b.to_vec()), want, "key {i}");
        }
        assert_eq!(db.prefix(b"key").count(), 5000 - 1667);
        db.put(b"after-reopen", b"x").unwrap();
        assert_eq!(db.latest_sequence(), seq + 1);
        seq += 1;
        db.close().unwrap();
    }
}

#[test]
fn snapshots_see_a_frozen_view_across_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small()).unwrap();
    for i in 0..100u32 {
        db.put(format!("k{i:03}"), b"old").unwrap();
    }
    let snap = db.snapshot();
    for i in 0..100u32 {
        if i % 2 == 0 {
            db.put(format!("k{i:03}"), b"new").unwrap();
        } else {
            db.delete(format!("k{i:03}")).unwrap();
        }
    }
    db.put(b"k999", b"added later").unwrap();
    db.flush().unwrap();
    let at = ReadOptions::new().snapshot(&snap);
    for i in 0..100u32 {
        assert_eq!(db.get_with(format!("k{i:03}"), &at).unwrap().as_deref(), Some(&b"old"[..]));
    }
    assert_eq!(db.get_with(b"k999", &at).unwrap(), None);
    let old: Vec<_> = db.range_with::<&[u8], _>(.., &at).map(|r| r.unwrap()).collect();
    assert_eq!(old.len(), 100);
    assert!(old.iter().all(|(_, v)| v == "old"));
    assert_eq!(db.range::<&[u8], _>(..).count(), 51);
}

#[test]
fn a_flush_writes_only_the_versions_some_reader_can_see() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let entries_flushed = |db: &Db| db.live_files().iter().filter(|f| f.level == 0).map(|f| f.entries).sum::<u64>();
    // A counter rewritten a thousand times, and a key deleted after many writes: one version
    // each reaches the table (the tombstone stays: a table below may hold the key).
    for i in 0..1000u32 {
        db.put(b"counter", i.to_string()).unwrap();
        db.put(b"gone", i.to_string()).unwrap();
    }
    db.delete(b"gone").unwrap();
    db.flush().unwrap();
    assert_eq!(entries_flushed(&db), 2);
    assert_eq!(db.get(b"counter").unwrap().as_deref(), Some(&b"999"[..]));
    assert_eq!(db.get(b"gone").unwrap(), None);

    // Snapshots split the versions into stripes: the newest of each stripe stays.
    for i in 0..10u32 {
        db.put(b"k", format!("a{i}")).unwrap();
    }
    let first = db.snapshot();
    for i in 0..10u32 {
        db.put(b"k", format!("b{i}")).unwrap();
    }
    let second = db.snapshot();
    db.delete(b"k").unwrap();
    db.put(b"k", b"c").unwrap();
    db.flush().unwrap();
    assert_eq!(entries_flushed(&db), 2 + 3, "a9, b9 and c");
    let at = |s| db.get_with(b"k", &ReadOptions::new().snapshot(s)).unwrap();
    assert_eq!(at(&first).as_deref(), Some(&b"a9"[..]));
    assert_eq!(at(&second).as_deref(), Some(&b"b9"[..]));
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"c"[..]));
    drop((first, second));
    drop(db);
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!((db.get(b"k").unwrap().as_deref(), db.get(b"gone").unwrap()), (Some(&b"c"[..]), None));
}

#[test]
fn cursor_seeks_and_changes_direction() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small()).unwrap();
    for k in ["b", "d", "f", "h"] {
        db.put(k, k.to_uppercase()).unwrap();
    }
    db.flush().unwrap();
    db.put(b"d", b"D2").unwrap();
    db.delete(b"f").unwrap();
    let mut it = db.iter(&ReadOptions::default());
    it.seek(b"c").unwrap();
    assert_eq!((it.key(), it.value()), (&b"d"[..], &b"D2"[..]));
    it.next().unwrap();
    assert_eq!(it.key(), b"h", "f is deleted");
    it.prev().unwrap();
    assert_eq!(it.key(), b"d");
    it.prev().unwrap();
    assert_eq!(it.key(), b"b");
    it.prev().unwrap();
    assert!(!it.valid());
    it.seek_for_prev(b"g").unwrap();
    assert_eq!(it.key(), b"d");
    it.seek_for_prev(b"d").unwrap();
    assert_eq!(it.key(), b"d");
    it.next().unwrap();
    assert_eq!(it.key(), b"h");
    it.next().unwrap();
    assert!(!it.valid());
    it.seek_to_last().unwrap();
    assert_eq!(it.key(), b"h");
    it.seek(b"z").unwrap();
    assert!(!it.valid());
    it.status().unwrap();
}

#[test]
fn range_and_prefix_from_both_ends() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small()).unwrap();
    for i in 0..20u32 {
        db.put(format!("a{i:02}"), b"").unwrap();
        db.put(format!("b{i:02}"), b"").unwrap();
    }
    fn keys(r: impl Iterator<Item = lsm::Result<(lsm::Bytes, lsm::Bytes)>>) -> Vec<String> {
        r.map(|kv| String::from_utf8(kv.unwrap().0.to_vec()).unwrap()).collect()
    }
    assert_eq!(keys(db.prefix(b"b")).len(), 20);
    assert_eq!(keys(db.range(&b"a05"[..]..&b"a08"[..])), ["a05", "a06", "a07"]);
    assert_eq!(keys(db.range(&b"a05"[..]..=&b"a08"[..]).rev()), ["a08", "a07", "a06", "a05"]);
    // Meeting in the middle yields every key exactly once.
    let mut r = db.prefix(b"a");
    let mut seen = Vec::new();
    loop {
        match (r.next(), r.next_back()) {
            (None, None) => break,
            (f, b) => seen.extend(f.into_iter().chain(b).map(|kv| kv.unwrap().0)),
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 20);
    use std::ops::Bound::{Excluded, Unbounded};
    let r = db.range::<&[u8], _>((Excluded(&b"b17"[..]), Unbounded));
    assert_eq!(keys(r), ["b18", "b19"]);
}

#[test]
fn a_range_read_from_one_end_tells_where_that_end_stands() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small()).unwrap();
    for k in ["a", "b", "c"] {
        db.put(k, b"").unwrap();
    }
    let mut r = db.range(&b"a"[..]..&b"z"[..]);
    assert_eq!((r.front_key(), r.back_key()), (None, None), "nothing read yet");
    assert_eq!(&r.next().unwrap().unwrap().0[..], b"a");
    assert_eq!(r.front_key(), Some(&b"a"[..]));
    r.next().unwrap().unwrap();
    assert_eq!((r.front_key(), r.back_key()), (Some(&b"b"[..]), None));
    r.next().unwrap().unwrap();
    assert!(r.next().is_none());
    assert_eq!(r.front_key(), None, "used up");
    let mut r = db.range(&b"a"[..]..&b"z"[..]);
    r.next_back().unwrap().unwrap();
    assert_eq!((r.front_key(), r.back_key()), (None, Some(&b"c"[..])));
    r.next().unwrap().unwrap();
    assert_eq!((r.front_key(), r.back_key()), (None, None), "read from both ends");
    use std::ops::Bound::{Excluded, Included};
    assert_eq!(r.bounds(), (Included(&b"a"[..]), Excluded(&b"z"[..])));
}

#[test]
fn ranges_hand_out_exact_bytes_of_every_size_that_outlive_the_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small()).unwrap();
    // Keys and values from empty to past a block (512 bytes here), in the memtable and in
    // tables, read from both ends; the entries are kept after the cursor is gone.
    let sizes = [0usize, 1, 3, 100, 511, 512, 513, 3000, 4096, 5000];
    let value = |i: usize| -> Vec<u8> { (0..sizes[i % sizes.len()]).map(|j| (i * 31 + j) as u8).collect() };
    let key = |i: usize| format!("k{i:03}{}", "x".repeat(sizes[(i + 3) % sizes.len()]));
    for i in 0..120 {
        db.put(key(i), value(i)).unwrap();
        if i == 60 {
            db.flush().unwrap();
        }
    }
    let forward: Vec<_> = db.prefix(b"k").map(|kv| kv.unwrap()).collect();
    let backward: Vec<_> = db.prefix(b"k").rev().map(|kv| kv.unwrap()).collect();
    assert_eq!(forward.len(), 120);
    let mut expected: Vec<(String, Vec<u8>)> = (0..120).map(|i| (key(i), value(i))).collect();
    expected.sort();
    for (i, (k, v)) in forward.iter().enumerate() {
        assert_eq!((&k[..], &v[..]), (expected[i].0.as_bytes(), &expected[i].1[..]), "forward {i}");
    }
    for (i, (k, v)) in backward.iter().rev().enumerate() {
        assert_eq!((&k[..], &v[..]), (expected[i].0.as_bytes(), &expected[i].1[..]), "backward {i}");
    }
}

#[test]
fn concurrent_writers_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small()).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..2000u32 {
                    let sync = i % 100 == 0;
                    let mut b = WriteBatch::new();
                    b.put(format!("t{t}-{i:05}"), format!("{t}:{i}"));
                    db.write(b, &WriteOptions { sync }).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(db.latest_sequence(), 16_000);
    assert_eq!(db.range::<&[u8], _>(..).count(), 16_000);
    for t in 0..8 {
        assert_eq!(db.get(format!("t{t}-01999")).unwrap().as_deref(), Some(format!("{t}:1999").as_bytes()));
    }
}

#[test]
fn second_open_of_a_directory_is_refused_until_close() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert!(matches!(Db::open(dir.path(), Options::default()), Err(Error::Locked(_))));
    let clone = db.clone();
    db.close().unwrap();
    assert!(matches!(clone.put(b"x", b"y"), Err(Error::Closed)));
    assert!(matches!(clone.get(b"x"), Err(Error::Closed)));
    let again = Db::open(dir.path(), Options::default()).unwrap();
    drop(again);
    drop(clone);
    Db::open(dir.path(), Options::default()).unwrap();
}

#[test]
fn open_flags_are_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    assert!(Db::open(&path, Options::default().create_if_missing(false)).is_err());
    drop(Db::open(&path, Options::default()).unwrap());
    assert!(matches!(Db::open(&path, Options::default().error_if_exists(true)), Err(Error::InvalidArgument(_))));
    drop(Db::open(&path, Options::default().create_if_missing(false)).unwrap());
}

#[test]
fn every_codec_round_trips_and_mixes_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let codecs = [lsm::Compression::None, lsm::Compression::Snappy, lsm::Compression::Zstd];
    for (round, c) in codecs.into_iter().filter(|c| c.is_available()).enumerate() {
        let db = Db::open(dir.path(), small().compression(c)).unwrap();
        for i in 0..2000u32 {
            db.put(format!("r{round}-{i:05}"), format!("value {i} {}", "abc".repeat(10))).unwrap();
        }
        db.flush().unwrap();
        for r in 0..=round {
            assert_eq!(db.prefix(format!("r{r}-")).count(), 2000, "{c:?} reads round {r}");
        }
    }
}

#[test]
fn readers_run_while_writers_flush() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small()).unwrap();
    for i in 0..1000u32 {
        db.put(format!("stable{i:04}"), i.to_string()).unwrap();
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                db.put(format!("churn{}", i % 5000), vec![b'x'; 100]).unwrap();
                i += 1;
            }
        })
    };
    for round in 0..30 {
        let n = db.prefix(b"stable").filter(|kv| kv.is_ok()).count();
        assert_eq!(n, 1000, "round {round}");
        assert_eq!(db.get(b"stable0500").unwrap().as_deref(), Some(&b"500"[..]));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    // Flushes (and maybe compactions) ran while the readers read.
    assert!(db.stats().flushes > 0, "{}", db.stats());
}

#[test]
fn sync_mode_changes_at_runtime_and_writes_keep_working() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small().sync_mode(lsm::SyncMode::Never)).unwrap();
    assert_eq!(db.sync_mode(), lsm::SyncMode::Never);
    for (i, mode) in [lsm::SyncMode::Always, lsm::SyncMode::EverySec, lsm::SyncMode::Never].into_iter().enumerate() {
        db.set_sync_mode(mode).unwrap();
        assert_eq!(db.sync_mode(), mode);
        db.put(format!("k{i}"), b"v").unwrap();
    }
    drop(db);
    let db = Db::open(dir.path(), small()).unwrap();
    assert_eq!(db.sync_mode(), lsm::SyncMode::EverySec, "the mode is a runtime setting, not stored");
    assert!((0..3).all(|i| db.get(format!("k{i}")).unwrap().is_some()));
}

#[test]
fn concurrent_writers_of_large_batches_lose_nothing_and_read_their_writes() {
    // Batches of 100 updates from 4 threads, committed in shared groups. Keys of all threads
    // interleave (the same bloom lines and point-index slots), each key is written by one thread
    // several times, and a write that returned is visible; after all, every key holds its last
    // write, by a lookup and by a scan, and again after a reopen (the WAL replayed).
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default().write_buffer_size(4 << 20);
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    let (threads, rounds, keys) = (4u32, 150u32, 500u32);
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for r in 0..rounds {
                    let mut b = WriteBatch::new();
                    for j in 0..100 {
                        let k = (r * 100 + j) % keys;
                        b.put(format!("k{:06}", k * threads + t), format!("{t}:{r}:{j}"));
                    }
                    db.write(b, &WriteOptions::default()).unwrap();
                    let k = (r * 100 + 99) % keys;
                    let got = db.get(format!("k{:06}", k * threads + t)).unwrap();
                    assert_eq!(got.as_deref(), Some(format!("{t}:{r}:99").as_bytes()));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    // Each key's last write: the last round and position that wrote it.
    let expected = |t: u32, k: u32| {
        let last = (0..rounds * 100).rev().find(|n| n % keys == k).unwrap();
        format!("{t}:{}:{}", last / 100, last % 100)
    };
    let check = |db: &Db| {
        assert_eq!(db.latest_sequence(), u64::from(threads * rounds * 100));
        let all: Vec<_> = db.range::<&[u8], _>(..).collect::<Result<Vec<_>, _>>().unwrap();
        assert_eq!(all.len(), (threads * keys) as usize);
        for (key, value) in all {
            let n: u32 = std::str::from_utf8(&key[1..]).unwrap().parse().unwrap();
            let (k, t) = (n / threads, n % threads);
            assert_eq!(std::str::from_utf8(&value).unwrap(), expected(t, k), "k{n:06} by a scan");
            assert_eq!(db.get(&key).unwrap().as_deref(), Some(&value[..]), "k{n:06} by a lookup");
        }
    };
    check(&db);
    drop(db);
    check(&Db::open(dir.path(), opts).unwrap());
}

#[test]
fn concurrent_writers_share_group_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small()).unwrap();
    let before = db.latest_sequence();
    let threads: Vec<_> = (0..6u32)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..400u32 {
                    let mut b = WriteBatch::new();
                    b.put(format!("t{t}-{i}"), b"a").put(format!("t{t}-{i}-2"), b"b");
                    db.write(b, &WriteOptions::default()).unwrap();
                    // Read-your-writes: a returned write is visible.
                    assert!(db.get(format!("t{t}-{i}-2")).unwrap().is_some());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(db.latest_sequence(), before + 6 * 400 * 2);
    drop(db);
    let db = Db::open(dir.path(), small()).unwrap();
    assert!(db.get(b"t4-399-2").unwrap().is_some() && db.get(b"t5-399").unwrap().is_some());
}

#[test]
fn weak_handles_read_without_keeping_the_database_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small()).unwrap();
    db.put(b"k", b"v").unwrap();
    let weak = db.downgrade();
    assert_eq!(weak.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    drop(db);
    assert!(matches!(weak.get(b"k"), Err(Error::Closed)));
    // The directory is free again: the weak handle did not keep it locked.
    let db = Db::open(dir.path(), small()).unwrap();
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
}

#[test]
fn flush_in_background_freezes_only_a_big_enough_memtable() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert!(!db.flush_in_background(0).unwrap(), "an empty memtable is not frozen");
    for i in 0..1000u32 {
        db.put(i.to_be_bytes(), [7u8; 100]).unwrap();
    }
    assert!(!db.flush_in_background(1 << 20).unwrap(), "~100 KB is under the threshold");
    assert!(db.flush_in_background(1 << 10).unwrap());
    // The flush thread writes it to a table; the data stays readable throughout.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while db.num_files_at_level(0) == 0 {
        assert!(std::time::Instant::now() < deadline, "the frozen memtable was never flushed");
        assert_eq!(db.get(500u32.to_be_bytes()).unwrap().as_deref(), Some(&[7u8; 100][..]));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(db.stats().memtable_bytes, 0);
    assert_eq!(db.get(999u32.to_be_bytes()).unwrap().as_deref(), Some(&[7u8; 100][..]));
}

#[test]
fn memory_release_runs_after_each_flush_frees_a_memtable() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let opts = small().memory_release(Arc::new(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    }));
    let db = Db::open(dir.path(), opts).unwrap();
    db.put(b"k", b"v").unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing flushed, nothing released");
    for round in 1..=2 {
        db.put(format!("key{round}"), b"value").unwrap();
        db.flush().unwrap();
        // The flush thread runs the hook right after it drops the flushed memtable.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while calls.load(Ordering::SeqCst) < round && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(calls.load(Ordering::SeqCst), round);
    }
    assert_eq!(db.get(b"key2").unwrap().as_deref(), Some(&b"value"[..]));
}
