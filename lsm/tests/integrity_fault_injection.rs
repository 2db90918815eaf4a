//! Injected I/O failures — the Nth WAL write, WAL fsync, WAL creation, table fsync, manifest
//! write or CURRENT rename fails with EIO or ENOSPC — always end in an `Err` for the writer and a read-only state
//! (or, for a full disk, a resume), never a panic, a hang or wrong data: after a reopen every
//! acknowledged write is there, with its value, and nothing that was never written appears.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lsm::fault::{FaultInjector, IoOp};
use lsm::{Db, Options, SyncMode, WriteBatch, WriteOptions};

/// Fails the `n`th operation of kind `op` (and, if `sticky`, every later one) with `errno`.
#[derive(Debug)]
struct FailNth {
    op: IoOp,
    n: u64,
    errno: i32,
    sticky: bool,
    seen: AtomicU64,
    fired: AtomicU64,
}

impl FaultInjector for FailNth {
    fn check(&self, op: IoOp, _path: &Path) -> std::io::Result<()> {
        if op != self.op {
            return Ok(());
        }
        let k = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if k == self.n || (self.sticky && k > self.n) {
            self.fired.fetch_add(1, Ordering::Relaxed);
            return Err(std::io::Error::from_raw_os_error(self.errno));
        }
        Ok(())
    }
}

fn value(i: u32) -> Vec<u8> {
    format!("{i:06}-{}", "v".repeat(200)).into_bytes()
}

/// Runs the workload against a database failing as `faults` says; returns the acknowledged
/// batch numbers and how many writes failed.
fn workload(dir: &Path, faults: Arc<FailNth>) -> (Vec<u32>, u32) {
    let opts = Options::default()
        .write_buffer_size(32 << 10)
        .level0_file_num_compaction_trigger(2)
        .sync_mode(SyncMode::EverySec)
        .fault_injector(faults);
    // Opening writes a manifest and renames CURRENT: that may fail too, with an error.
    let db = match Db::open(dir, opts) {
        Ok(db) => db,
        Err(_) => return (Vec::new(), 1),
    };
    let (mut acked, mut failed) = (Vec::new(), 0);
    for i in 0..1500u32 {
        let mut b = WriteBatch::new();
        b.put(format!("log{i:06}"), value(i)).put(format!("k{:03}", i % 100), value(i));
        match db.write(b, &WriteOptions::default()) {
            Ok(()) => acked.push(i),
            Err(_) => {
                failed += 1;
                if failed > 20 {
                    break;
                }
            }
        }
        // Reads keep working whatever happened to writes.
        if let Some(&last) = acked.last() {
            assert_eq!(db.get(format!("log{last:06}")).unwrap().as_deref(), Some(&value(last)[..]));
        }
    }
    let _ = db.close(); // may fail: the database may be read-only
    (acked, failed)
}

fn check_recovered(dir: &Path, acked: &[u32]) {
    let db = Db::open(dir, Options::default()).unwrap();
    let mut present = BTreeMap::new();
    for kv in db.prefix(b"log") {
        let (k, v) = kv.unwrap();
        present.insert(k.to_vec(), v.to_vec());
    }
    for &i in acked {
        let got = present.get(format!("log{i:06}").as_bytes());
        assert_eq!(got.map(|v| &v[..]), Some(&value(i)[..]), "acknowledged write {i} after reopen");
    }
    for (k, v) in &present {
        let i: u32 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
        assert_eq!(v, &value(i), "nothing invented: {}", String::from_utf8_lossy(k));
    }
}

#[test]
fn every_injected_failure_is_an_error_and_loses_no_acknowledged_write() {
    let cases = [
        (IoOp::WalWrite, libc_eio(), 40),
        (IoOp::WalWrite, libc_enospc(), 40),
        (IoOp::WalSync, libc_eio(), 2),
        (IoOp::WalCreate, libc_eio(), 2),
        (IoOp::WalCreate, libc_enospc(), 3),
        (IoOp::TableSync, libc_eio(), 2),
        (IoOp::TableSync, libc_enospc(), 3),
        (IoOp::ManifestWrite, libc_eio(), 3),
        (IoOp::Rename, libc_eio(), 1),
    ];
    for (op, errno, n) in cases {
        for sticky in [false, true] {
            let faults = Arc::new(FailNth { op, n, errno, sticky, seen: AtomicU64::new(0), fired: AtomicU64::new(0) });
            let dir = tempfile::tempdir().unwrap();
            // Bounded: a hang is a failure, not a stuck CI run.
            let (tx, rx) = std::sync::mpsc::channel();
            let (path, f) = (dir.path().to_path_buf(), Arc::clone(&faults));
            std::thread::spawn(move || {
                let _ = tx.send(workload(&path, f));
            });
            let (acked, failed) = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("{op:?} errno {errno} sticky {sticky}: the workload hung or panicked"));
            let fired = faults.fired.load(Ordering::Relaxed);
            assert!(fired > 0, "{op:?}: the fault was reached ({} ops seen)", faults.seen.load(Ordering::Relaxed));
            if matches!(op, IoOp::WalWrite) || sticky {
                assert!(failed > 0, "{op:?} errno {errno} sticky {sticky}: a writer saw the failure");
            }
            check_recovered(dir.path(), &acked);
        }
    }
}

fn libc_eio() -> i32 {
    5
}

fn libc_enospc() -> i32 {
    28
}

/// `Db::failed_write_groups` counts a failed write before its writer, or anyone waiting for
/// it, learns that it is done, and only failed ones.
#[test]
fn a_failed_write_is_counted_before_it_is_seen_done() {
    let faults = Arc::new(FailNth {
        op: IoOp::WalWrite,
        n: 2,
        errno: libc_enospc(),
        sticky: false,
        seen: AtomicU64::new(0),
        fired: AtomicU64::new(0),
    });
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default().fault_injector(faults)).unwrap();
    let put = |k: &str| {
        let mut b = WriteBatch::new();
        b.put(k.as_bytes(), b"v");
        b
    };
    db.write(put("a"), &WriteOptions::default()).unwrap();
    assert_eq!(db.failed_write_groups(), 0);
    let mut failing = put("b");
    let commit = db.write_async(&mut failing, &WriteOptions::default()).unwrap();
    db.wait_committed(commit.ticket());
    assert_eq!(db.failed_write_groups(), 1, "counted by the time the write is seen done");
    assert!(db.get(b"b").unwrap().is_none());
    db.resume().unwrap();
    db.write(put("c"), &WriteOptions::default()).unwrap();
    assert_eq!(db.failed_write_groups(), 1, "a successful write counts nothing");
}
