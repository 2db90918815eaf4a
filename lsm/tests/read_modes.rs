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
