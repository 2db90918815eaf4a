//! Power loss at random points: the fault injector keeps, for every file, what its last fsync
//! made durable, and at the cut builds the directory as a machine that lost power there would
//! leave it (unsynced bytes and never-synced files gone), then fails every later operation.
//! Under `SyncMode::Always` opening that image gives exactly the acknowledged writes; under the
//! default `EverySec` a prefix of them. Never anything invented, every batch whole.
//!
//! `SHALE_POWER_CUTS` (default 500 per mode) scales the number of cut points.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lsm::fault::{FaultInjector, IoOp};
use lsm::{Db, Options, SyncMode, WriteBatch, WriteOptions};
use rand::{Rng, SeedableRng};

#[derive(Debug)]
struct PowerCut {
    dir: PathBuf,
    image: PathBuf,
    cut_at: u64,
    ops: AtomicU64,
    /// File -> its content as of its last fsync (a WAL's or a table's).
    durable: Mutex<HashMap<PathBuf, Vec<u8>>>,
}

impl PowerCut {
    /// The directory a power loss now would leave: synced content of WALs and tables, the
    /// manifests and CURRENT as they are (every manifest append is fsynced before it counts, and
    /// a torn last edit is what recovery expects), nothing else.
    fn build_image(&self, durable: &HashMap<PathBuf, Vec<u8>>) {
        std::fs::create_dir_all(&self.image).unwrap();
        for e in std::fs::read_dir(&self.dir).unwrap() {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            let target = self.image.join(&name);
            if let Some(content) = durable.get(&path) {
                std::fs::write(&target, content).unwrap();
            } else if name == "CURRENT" || name.starts_with("MANIFEST-") {
                if let Ok(content) = std::fs::read(&path) {
                    std::fs::write(&target, content).unwrap();
                }
            }
        }
    }
}

impl FaultInjector for PowerCut {
    fn check(&self, op: IoOp, path: &Path) -> std::io::Result<()> {
        let mut durable = self.durable.lock().unwrap();
        let n = self.ops.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.cut_at {
            self.build_image(&durable);
        }
        if n >= self.cut_at {
            return Err(std::io::Error::other("power lost"));
        }
        // The fsync about to run makes the file's present content durable.
        if matches!(op, IoOp::WalSync | IoOp::TableSync) {
            if let Ok(content) = std::fs::read(path) {
                durable.insert(path.to_path_buf(), content);
            }
        }
        Ok(())
    }
}

fn value(i: u32) -> Vec<u8> {
    format!("{i:06}-{}", "p".repeat(100)).into_bytes()
}

#[test]
fn a_power_cut_anywhere_keeps_exactly_the_acknowledged_writes_when_every_write_syncs() {
    power_cuts(SyncMode::Always);
}

#[test]
fn a_power_cut_anywhere_keeps_a_prefix_of_the_acknowledged_writes_by_default() {
    power_cuts(SyncMode::EverySec);
}

fn power_cuts(mode: SyncMode) {
    let cuts: u64 = std::env::var("SHALE_POWER_CUTS").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xc0ffee);
    for trial in 0..cuts {
        let root = tempfile::tempdir().unwrap();
        let (dir, image) = (root.path().join("db"), root.path().join("image"));
        let cut_at = rng.random_range(1..450u64);
        let faults = Arc::new(PowerCut {
            dir: dir.clone(),
            image: image.clone(),
            cut_at,
            ops: AtomicU64::new(0),
            durable: Mutex::new(HashMap::new()),
        });
        let opts = Options::default()
            .write_buffer_size(32 << 10)
            .level0_file_num_compaction_trigger(2)
            .sync_mode(mode)
            .fault_injector(Arc::clone(&faults) as Arc<dyn FaultInjector>);
        let mut acked = BTreeSet::new();
        // The cut may come while the database opens (its first manifest write): then nothing
        // was acknowledged.
        if let Ok(db) = Db::open(&dir, opts) {
            for i in 0..400u32 {
                let mut b = WriteBatch::new();
                b.put(format!("log{i:06}"), value(i)).put(format!("pair{i:06}"), value(i));
                if db.write(b, &WriteOptions::default()).is_err() {
                    break;
                }
                acked.insert(i);
            }
        }
        if !image.exists() {
            continue; // the workload finished before the cut
        }
        let db = Db::open(&image, Options::default())
            .unwrap_or_else(|e| panic!("trial {trial} (cut at op {cut_at}): the image does not open: {e}"));
        let mut present = BTreeSet::new();
        for kv in db.prefix(b"log") {
            let (k, v) = kv.unwrap();
            let i: u32 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
            assert_eq!(&v[..], &value(i)[..], "trial {trial}: log{i} holds what was written");
            assert_eq!(
                db.get(format!("pair{i:06}")).unwrap().as_deref(),
                Some(&value(i)[..]),
                "trial {trial}: batch {i} is whole"
            );
            present.insert(i);
        }
        if mode == SyncMode::Always {
            assert_eq!(present, acked, "trial {trial} (cut at op {cut_at}): exactly the acknowledged writes");
        } else {
            let prefix: BTreeSet<u32> = acked.iter().copied().take(present.len()).collect();
            assert_eq!(present, prefix, "trial {trial} (cut at op {cut_at}): a prefix of the acknowledged writes");
        }
    }
}
