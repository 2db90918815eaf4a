//! Storage unit tests: strings, databases, the expiry cycle, SWAPDB across restarts; and
//! [`filtered_storage`] for the other modules' tests.

use std::sync::Arc;

use super::{ShaleFilter, Storage};

/// Storage over an engine whose compaction runs the Shale filter.
pub(super) fn filtered_storage(dir: &std::path::Path) -> Storage {
    let filter = Arc::new(ShaleFilter::default());
    let opts = lsm::Options::default().compaction_filter(Arc::clone(&filter) as Arc<dyn lsm::CompactionFilter>);
    let db = lsm::Db::open(dir, opts).unwrap();
    filter.attach(&db);
    Storage::new(db).unwrap()
}

mod basics {
    use super::super::*;

    #[test]
    fn strings_expire_and_databases_flush_apart() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::new(lsm::Db::open(dir.path(), lsm::Options::default()).unwrap()).unwrap();
        let cx = ExecContext::new();
        s.set_string(&cx, 0, b"a", Bytes::from_static(b"1"), 0).unwrap();
        s.set_string(&cx, 0, b"gone", Bytes::from_static(b"x"), now_ms() - 1).unwrap();
        s.set_string(&cx, 1, b"a", Bytes::from_static(b"2"), 0).unwrap();
        s.set_string(&cx, 65535, b"last", Bytes::from_static(b"3"), 0).unwrap();
        assert_eq!(s.get(&cx, 0, b"a").unwrap().unwrap().body, "1");
        assert_eq!(s.get(&cx, 0, b"gone").unwrap(), None, "an expired key is never returned");
        assert_eq!((s.dbsize(0), s.dbsize(1)), (2, 1), "an expired key counts until it is reclaimed, as in Redis");
        s.flushdb(&cx, 0).unwrap();
        assert_eq!((s.dbsize(0), s.dbsize(1), s.dbsize(65535)), (0, 1, 1));
        s.flushdb(&cx, 65535).unwrap();
        assert_eq!(s.dbsize(65535), 0);
        s.flushall(&cx).unwrap();
        assert_eq!(s.get(&cx, 1, b"a").unwrap(), None);
    }

    #[test]
    fn counts_follow_each_keys_last_write_in_a_batch() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::new(lsm::Db::open(dir.path(), lsm::Options::default()).unwrap()).unwrap();
        let cx = ExecContext::new();
        s.set_string(&cx, 0, b"old", Bytes::from_static(b"1"), 0).unwrap();
        let pdb = s.phys(0);
        let mut b = lsm::WriteBatch::new();
        // Written then deleted, deleted then written, written twice (the second with a TTL).
        s.put_into(&mut b, 0, b"gone", &Meta::string(Bytes::from_static(b"x"), 0));
        b.delete(meta_key(pdb, b"gone"));
        b.delete(meta_key(pdb, b"old"));
        s.put_into(&mut b, 0, b"old", &Meta::string(Bytes::from_static(b"2"), 0));
        s.put_into(&mut b, 0, b"new", &Meta::string(Bytes::from_static(b"3"), 0));
        s.put_into(&mut b, 0, b"new", &Meta::string(Bytes::from_static(b"4"), now_ms() + 100_000));
        s.write(&cx, b).unwrap();
        assert_eq!(s.dbsize(0), 2);
        assert_eq!(s.keyspace_counts(0).expires, 1);
        assert_eq!(s.get(&cx, 0, b"gone").unwrap(), None);
    }

    #[test]
    fn counts_of_a_batch_that_clears_a_database_count_only_what_comes_after() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::new(lsm::Db::open(dir.path(), lsm::Options::default()).unwrap()).unwrap();
        let cx = ExecContext::new();
        for key in [&b"x"[..], b"y", b"z"] {
            s.set_string(&cx, 5, key, Bytes::from_static(b"1"), 0).unwrap();
        }
        s.set_string(&cx, 6, b"other", Bytes::from_static(b"1"), 0).unwrap();
        let (five, six) = (s.phys(5), s.phys(6));
        let mut b = lsm::WriteBatch::new();
        // Written before the clear (gone with it), the clear, then written again and anew.
        s.put_into(&mut b, 5, b"before", &Meta::string(Bytes::from_static(b"x"), 0));
        s.put_into(&mut b, 6, b"kept", &Meta::string(Bytes::from_static(b"x"), 0));
        b.delete_range(meta_key(five, b""), meta_end(five));
        s.put_into(&mut b, 5, b"x", &Meta::string(Bytes::from_static(b"2"), 0));
        s.put_into(&mut b, 5, b"after", &Meta::string(Bytes::from_static(b"3"), now_ms() + 100_000));
        s.put_into(&mut b, 5, b"after", &Meta::string(Bytes::from_static(b"4"), 0));
        b.delete(meta_key(six, b"other"));
        s.write(&cx, b).unwrap();
        assert_eq!((s.dbsize(5), s.dbsize(6)), (2, 1));
        assert_eq!(s.keyspace_counts(5).expires, 0, "the last write of `after` has no TTL");
        assert_eq!(s.get(&cx, 5, b"before").unwrap(), None);
        assert_eq!(s.get(&cx, 5, b"y").unwrap(), None);
    }
}

mod random_keys {
    use super::super::*;

    #[test]
    fn randomkey_picks_every_key_of_a_small_database_alike() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::new(lsm::Db::open(dir.path(), lsm::Options::default()).unwrap()).unwrap();
        let cx = ExecContext::new();
        assert_eq!(s.random_key(&cx, 0).unwrap(), None);
        // `foo` follows the narrow gap after `bar`: a seek to a random point alone hardly
        // ever lands on it.
        s.set_string(&cx, 0, b"bar", Bytes::from_static(b"1"), 0).unwrap();
        s.set_string(&cx, 0, b"foo", Bytes::from_static(b"2"), 0).unwrap();
        let foo = (0..400).filter(|_| s.random_key(&cx, 0).unwrap().unwrap() == "foo").count();
        assert!((120..=280).contains(&foo), "foo picked {foo} times of 400");
    }
}

mod cycle {
    use super::super::*;

    fn storage(dir: &std::path::Path) -> Storage {
        Storage::new(lsm::Db::open(dir, lsm::Options::default()).unwrap()).unwrap()
    }

    #[test]
    fn active_cycle_deletes_due_keys_in_bounded_batches_and_skips_stale_entries() {
        let dir = tempfile::tempdir().unwrap();
        let s = storage(dir.path());
        let cx = ExecContext::new();
        let now = now_ms();
        for i in 0..10u32 {
            s.set_string(&cx, 3, format!("due{i}").as_bytes(), Bytes::from_static(b"v"), now - 10).unwrap();
        }
        s.set_string(&cx, 3, b"later", Bytes::from_static(b"v"), now + 60_000).unwrap();
        // A key whose TTL was replaced: its old index entry is stale and must not delete it.
        s.set_string(&cx, 3, b"renewed", Bytes::from_static(b"v"), now - 5).unwrap();
        s.set_string(&cx, 3, b"renewed", Bytes::from_static(b"v2"), 0).unwrap();
        assert_eq!(s.expire_cycle(&ExecContext::new(), now, 4).unwrap(), (4, true), "a batch stops at its budget");
        assert_eq!(s.expire_cycle(&ExecContext::new(), now, 100).unwrap(), (6, false));
        assert_eq!(s.expire_cycle(&ExecContext::new(), now, 100).unwrap(), (0, false), "entries are consumed");
        assert_eq!(s.get(&cx, 3, b"renewed").unwrap().unwrap().body, "v2");
        assert!(s.get(&cx, 3, b"later").unwrap().is_some());
        let raw_due = s.engine().get(meta_key(3, b"due0")).unwrap();
        assert_eq!(raw_due, None, "deleted from the engine, not just hidden");
    }

    #[test]
    fn a_ttl_moved_later_without_an_entry_is_indexed_again_and_expires_at_its_new_time() {
        let dir = tempfile::tempdir().unwrap();
        let s = storage(dir.path());
        let cx = ExecContext::new();
        let now = now_ms();
        let index = |s: &Storage| {
            let entries: Vec<_> = s.engine().range(b"X".to_vec()..b"Y".to_vec()).map(|kv| kv.unwrap().0).collect();
            entries.iter().map(|k| u64::from_be_bytes(k[1..9].try_into().unwrap())).collect::<Vec<_>>()
        };
        s.set_string(&cx, 0, b"k", Bytes::from_static(b"1"), now + 1_000).unwrap();
        // An INCR keeping the TTL, then an EXPIRE pushing it later: metadata only.
        s.rewrite_string(&cx, 0, b"k", Bytes::from_static(b"2"), (now + 1_000, now + 1_000)).unwrap();
        s.rewrite_string(&cx, 0, b"k", Bytes::from_static(b"3"), (now + 5_000, now + 1_000)).unwrap();
        assert_eq!(index(&s), vec![now + 1_000], "no entry per rewrite");
        // A TTL moved earlier gets its own entry.
        s.rewrite_string(&cx, 0, b"k", Bytes::from_static(b"4"), (now + 3_000, now + 5_000)).unwrap();
        assert_eq!(index(&s), vec![now + 1_000, now + 3_000]);
        s.rewrite_string(&cx, 0, b"k", Bytes::from_static(b"5"), (now + 9_000, now + 3_000)).unwrap();

        // The first entry comes due: the key lives on, indexed again at its TTL.
        assert_eq!(s.expire_cycle(&ExecContext::new(), now + 1_500, 100).unwrap(), (0, false));
        assert_eq!(index(&s), vec![now + 3_000, now + 9_000]);
        assert_eq!(s.expire_cycle(&ExecContext::new(), now + 3_500, 100).unwrap(), (0, false));
        assert_eq!(index(&s), vec![now + 9_000], "an entry already there is not written twice");
        assert!(s.engine().get(meta_key(0, b"k")).unwrap().is_some());
        // At its TTL it is deleted; an entry that comes due after it had passed deletes it too.
        assert_eq!(s.expire_cycle(&ExecContext::new(), now + 9_000, 100).unwrap(), (1, false));
        assert_eq!(s.engine().get(meta_key(0, b"k")).unwrap(), None);
        assert!(index(&s).is_empty());
        s.set_string(&cx, 0, b"late", Bytes::from_static(b"1"), now + 1_000).unwrap();
        s.rewrite_string(&cx, 0, b"late", Bytes::from_static(b"2"), (now + 2_000, now + 1_000)).unwrap();
        assert_eq!(s.expire_cycle(&ExecContext::new(), now + 2_500, 100).unwrap(), (1, false));
        assert_eq!(s.engine().get(meta_key(0, b"late")).unwrap(), None);
    }

    #[test]
    fn swapdb_survives_restart_and_expiry_follows_the_data() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = storage(dir.path());
            let cx = ExecContext::new();
            s.set_string(&cx, 0, b"k", Bytes::from_static(b"zero"), 0).unwrap();
            s.set_string(&cx, 1, b"k", Bytes::from_static(b"one"), 0).unwrap();
            s.set_string(&cx, 1, b"t", Bytes::from_static(b"ttl"), now_ms() - 1).unwrap();
            s.swap_databases(&cx, 0, 1).unwrap();
            assert_eq!(s.get(&cx, 0, b"k").unwrap().unwrap().body, "one");
            assert_eq!(s.get(&cx, 1, b"k").unwrap().unwrap().body, "zero");
            s.swap_databases(&cx, 1, 2).unwrap();
            assert_eq!(s.get(&cx, 2, b"k").unwrap().unwrap().body, "zero");
            assert_eq!((0..16).filter(|&db| s.dbsize(db) > 0).collect::<Vec<_>>(), vec![0, 2]);
            s.engine().clone().close().unwrap();
        }
        let s = storage(dir.path());
        let cx = ExecContext::new();
        assert_eq!(s.get(&cx, 0, b"k").unwrap().unwrap().body, "one");
        assert_eq!(s.get(&cx, 1, b"k").unwrap(), None);
        assert_eq!(s.get(&cx, 2, b"k").unwrap().unwrap().body, "zero");
        assert_eq!(
            s.expire_cycle(&ExecContext::new(), now_ms(), 10).unwrap().0,
            1,
            "the expired key of (now) db 0 is found"
        );
        s.flushdb(&cx, 0).unwrap();
        assert_eq!((s.dbsize(0), s.dbsize(2)), (0, 1));
    }
}

mod layout {
    use super::super::*;

    #[test]
    fn data_of_another_layout_is_refused_not_misread() {
        let dir = tempfile::tempdir().unwrap();
        {
            // Keys written by a server that had no layout record (and so no pick index).
            let db = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
            db.put(meta_key(0, b"k"), Meta::string(Bytes::from_static(b"v"), 0).encode()).unwrap();
            let err = Storage::new(db).unwrap_err().to_string();
            assert!(err.contains("older shale-server"), "{err}");
        }
        let db = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
        db.put(LAYOUT_KEY, [9u8, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
        let err = Storage::new(db).unwrap_err().to_string();
        assert!(err.contains("key layout 9;"), "{err}");
    }

    #[test]
    fn layout_2_data_is_upgraded_members_move_into_pick_records() {
        use std::ops::Bound;

        use super::super::collection::element_key;
        use super::super::picks::pick_key;
        let dir = tempfile::tempdir().unwrap();
        let seed = 77u64;
        {
            // What a layout-2 server wrote: every member of a set, sorted set or hash has an
            // element record (holding its value) and an empty pick record.
            let db = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
            db.put(LAYOUT_KEY, layout_record(2, seed)).unwrap();
            let mut b = lsm::WriteBatch::new();
            for (key, kind, uid, members) in [
                (&b"s"[..], KeyType::Set, 7u64, vec![(&b"a"[..], Vec::new()), (b"b", Vec::new())]),
                (b"z", KeyType::ZSet, 8, vec![(b"m", encode_score(1.5).to_vec())]),
                (b"h", KeyType::Hash, 9, vec![(b"f", b"v".to_vec())]),
            ] {
                let body = Header { count: members.len() as u64, ..Header::default() }.body(kind);
                b.put(meta_key(0, key), Meta { kind, expire_at_ms: 0, uid, body }.encode());
                for (m, v) in &members {
                    b.put(element_key(0, uid, m), v);
                    b.put(pick_key(0, uid, seed, m), b"");
                }
            }
            // Many members, so the upgrade writes several batches.
            for i in 0..10_000u32 {
                b.put(element_key(0, 7, format!("n{i}").as_bytes()), b"");
            }
            db.write(b, &lsm::WriteOptions::default()).unwrap();
        }
        let s = Storage::new(lsm::Db::open(dir.path(), lsm::Options::default()).unwrap()).unwrap();
        assert_eq!(s.pick_seed(), seed);
        assert_eq!(s.engine().get(LAYOUT_KEY).unwrap().unwrap()[0], LAYOUT_VERSION);
        let cx = ExecContext::new();
        let v = s.view(&cx, 0);
        let set: Vec<Bytes> = v.members(7, Bound::Unbounded).map(|kv| kv.unwrap().0).collect();
        assert_eq!(set.len(), 10_002);
        assert_eq!(v.member(7, b"a").unwrap().as_deref(), Some(&b""[..]));
        assert_eq!(v.member(8, b"m").unwrap().map(|s| decode_score(&s)), Some(1.5));
        for uid in [7, 8] {
            assert_eq!(v.elements(uid, Bound::Unbounded).count(), 0, "element records of {uid} are gone");
        }
        // A hash's field record holds its value (and no ordinal: its pick record had none).
        assert_eq!(v.field_with_ordinal(9, b"f").unwrap(), Some((None, Bytes::from_static(b"v"))));
        assert_eq!(v.elements(9, Bound::Unbounded).count(), 0);
        drop(s);
        // Opened again: nothing left to upgrade, the same data.
        let s = Storage::new(lsm::Db::open(dir.path(), lsm::Options::default()).unwrap()).unwrap();
        let v = s.view(&cx, 0);
        assert_eq!(v.members(7, Bound::Unbounded).count(), 10_002);
    }

    #[test]
    fn an_upgrade_cut_short_resumes_without_copying_a_field_twice() {
        use std::ops::Bound;

        use super::super::collection::element_key;
        use super::super::field_order::encode_field;
        use super::super::picks::pick_key;
        let dir = tempfile::tempdir().unwrap();
        let seed = 5u64;
        let field = |i: u32| format!("f{i:05}").into_bytes();
        let n = 10_000u32;
        {
            // Layout 3, as an upgrade to 4 left it when it stopped after its first batch: the
            // hash's fields up to f04095 rewritten (and the progress record saying so), the
            // rest still element records beside pick records holding their ordinals.
            let db = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
            db.put(LAYOUT_KEY, layout_record(3, seed)).unwrap();
            let mut b = lsm::WriteBatch::new();
            let header = Header { count: u64::from(n), ..Header::default() };
            let table = Meta { kind: KeyType::Hash, expire_at_ms: 0, uid: 9, body: header.body(KeyType::Hash) };
            b.put(meta_key(0, b"h"), with_order(&table, &header, Some(u64::from(n))).encode());
            for i in 0..n {
                let (f, ordinal) = (field(i), u64::from(n - i));
                b.put(element_key(0, 9, &f), format!("v{i}"));
                if i < 4096 {
                    b.put(pick_key(0, 9, seed, &f), encode_field(Some(ordinal), format!("v{i}").as_bytes()));
                } else {
                    b.put(pick_key(0, 9, seed, &f), ordinal.to_be_bytes());
                }
            }
            let mut progress = 9u64.to_be_bytes().to_vec();
            progress.extend_from_slice(&field(4095));
            b.put(b"S:upgrade-progress", progress);
            db.write(b, &lsm::WriteOptions::default()).unwrap();
        }
        let s = Storage::new(lsm::Db::open(dir.path(), lsm::Options::default()).unwrap()).unwrap();
        assert_eq!(s.engine().get(LAYOUT_KEY).unwrap().unwrap()[0], LAYOUT_VERSION);
        assert_eq!(s.engine().get(b"S:upgrade-progress").unwrap(), None);
        let cx = ExecContext::new();
        let v = s.view(&cx, 0);
        for i in (0..n).step_by(97).chain([4095, 4096, n - 1]) {
            let got = v.field_with_ordinal(9, &field(i)).unwrap();
            assert_eq!(got, Some((Some(u64::from(n - i)), Bytes::from(format!("v{i}")))), "field {i}");
        }
        assert_eq!(v.elements(9, Bound::Unbounded).count(), 0);
        // A compact hash lists its fields in ordinal order: the reverse of their names here.
        let meta = v.get(b"h").unwrap().unwrap();
        let fields = v.hash_fields(&meta).unwrap();
        assert_eq!(fields.len(), n as usize);
        assert_eq!(fields[0].0, Bytes::from(field(n - 1)));
        assert_eq!(fields[n as usize - 1].0, Bytes::from(field(0)));
        let mut each = Vec::new();
        v.each_field(&meta, |f, value| each.push((Bytes::copy_from_slice(f), Bytes::copy_from_slice(value)))).unwrap();
        assert!(each == fields, "each_field lists what hash_fields lists, in its order");
    }

    #[test]
    fn a_replica_refuses_an_older_layout_instead_of_upgrading_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
        db.put(LAYOUT_KEY, layout_record(3, 1)).unwrap();
        let err = super::super::layout(&db, false).unwrap_err().to_string();
        assert!(err.contains("key layout 3") && err.contains("replica"), "{err}");
        assert_eq!(db.get(LAYOUT_KEY).unwrap().unwrap()[0], 3, "nothing was rewritten");
        assert_eq!(super::super::layout(&db, true).unwrap(), 1);
        assert_eq!(db.get(LAYOUT_KEY).unwrap().unwrap()[0], LAYOUT_VERSION);
    }

    #[test]
    fn an_empty_keyspace_gets_a_layout_and_keeps_its_seed() {
        let dir = tempfile::tempdir().unwrap();
        let seed = {
            let s = Storage::new(lsm::Db::open(dir.path(), lsm::Options::default()).unwrap()).unwrap();
            s.pick_seed()
        };
        let s = Storage::new(lsm::Db::open(dir.path(), lsm::Options::default()).unwrap()).unwrap();
        assert_eq!(s.pick_seed(), seed, "pick records stay findable after a restart");
    }
}

mod meta_keys {
    use super::super::{meta_key, MetaKeys};

    #[test]
    fn a_run_of_metadata_keys_reads_back_as_each_was_built() {
        let mut metas = MetaKeys::default();
        let keys: [(u16, &[u8]); 4] = [(0, b"a"), (7, b""), (65535, b"a longer key"), (1, b"b")];
        for (pdb, key) in keys {
            metas.push(pdb, key);
        }
        let want: Vec<Vec<u8>> = keys.iter().map(|&(pdb, key)| meta_key(pdb, key)).collect();
        assert_eq!(metas.iter().map(<[u8]>::to_vec).collect::<Vec<_>>(), want);
        assert_eq!(MetaKeys::default().iter().count(), 0);
    }
}
