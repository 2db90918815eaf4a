//! A full disk: writes fail with an error (never a crash: the WAL's space is reserved before it
//! is mapped), reads keep working, nothing acknowledged is lost, and once space is back the
//! database resumes by itself.
//!
//! Runs on a small tmpfs mounted for the test, which needs root; without it the test says so
//! and passes, unless `SHALE_REQUIRE_MOUNT=1` (CI) makes it fail instead.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lsm::{Db, Error, Options};

/// A tmpfs of `size` mounted for the test, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn value(i: u32) -> Vec<u8> {
    format!("{i:08}-{}", "v".repeat(1000)).into_bytes()
}

#[test]
fn a_full_disk_fails_writes_keeps_reads_and_resumes_when_space_returns() {
    let Some(disk) = SmallDisk::mount("8m") else {
        assert!(std::env::var("SHALE_REQUIRE_MOUNT").is_err(), "cannot mount a tmpfs (root needed)");
        eprintln!("skipped: cannot mount a tmpfs here (root needed)");
        return;
    };
    let filler: PathBuf = disk.path().join("filler");
    std::fs::write(&filler, vec![0u8; 5 << 20]).unwrap();
    let dir = disk.path().join("db");
    let opts = Options::default().write_buffer_size(256 << 10).compression(lsm::Compression::None);
    let db = Db::open(&dir, opts.clone()).unwrap();
    let mut acknowledged = 0u32;
    let failure = loop {
        match db.put(format!("key{acknowledged:06}"), value(acknowledged)) {
            Ok(()) => acknowledged += 1,
            Err(e) => break e,
        }
        assert!(acknowledged < 20_000, "the disk never filled up");
    };
    assert!(
        matches!(&failure, Error::Io(_) | Error::Poisoned(_)) && failure.to_string().contains("space"),
        "a full disk is an I/O error naming the cause: {failure}"
    );
    // Still full: a write that needs more space than the disk has keeps failing (a small one may
    // fit in the WAL space already reserved once an automatic retry — once a second, so on a
    // slow machine during the reads below — clears the error).
    assert!(db.put(b"more", vec![b'x'; 4 << 20]).is_err(), "still full: writes keep failing");
    // Reads keep working, and nothing acknowledged is missing.
    for i in (0..acknowledged).step_by(7) {
        assert_eq!(db.get(format!("key{i:06}")).unwrap().as_deref(), Some(&value(i)[..]));
    }
    // Space comes back: within a few automatic retries (once a second) writes work again.
    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while db.put(b"after", b"space is back").is_err() {
        assert!(Instant::now() < deadline, "the database never resumed");
        std::thread::sleep(Duration::from_millis(200));
    }
    for i in 0..200u32 {
        db.put(format!("late{i:04}"), value(i)).unwrap();
    }
    db.close().unwrap();
    let db = Db::open(&dir, opts).unwrap();
    for i in 0..acknowledged {
        assert_eq!(db.get(format!("key{i:06}")).unwrap().as_deref(), Some(&value(i)[..]), "key{i:06} after reopen");
    }
    assert_eq!(db.get(b"after").unwrap().as_deref(), Some(&b"space is back"[..]));
    assert!(db.get(b"late0199").unwrap().is_some());
}
