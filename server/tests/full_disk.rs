//! A full disk under a real server: writes get `-MISCONF`, reads keep working, and writes work
//! again by themselves once space returns. Needs root to mount a small tmpfs; without it the
//! test says so and passes, unless `SHALE_REQUIRE_MOUNT=1` (CI).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::Server;
use redis::cmd;

#[test]
fn a_full_disk_answers_misconf_keeps_reads_and_recovers_by_itself() {
    let disk = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=24m", "tmpfs"])
        .arg(disk.path())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        assert!(std::env::var("SHALE_REQUIRE_MOUNT").is_err(), "cannot mount a tmpfs (root needed)");
        eprintln!("skipped: cannot mount a tmpfs here (root needed)");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(disk.path().to_path_buf());
    let filler = disk.path().join("filler");
    std::fs::write(&filler, vec![0u8; 16 << 20]).unwrap();
    let data = disk.path().join("data").display().to_string();
    let server = Server::start(&["--dir", &data, "--write-buffer-size", "1mb", "--compression", "none"]);
    let mut c = server.client();
    let value = "v".repeat(4000);
    let mut written = 0;
    let err = loop {
        match cmd("SET").arg(format!("k{written}")).arg(&value).query::<()>(&mut c) {
            Ok(()) => written += 1,
            Err(e) => break e,
        }
        assert!(written < 20_000, "the disk never filled up");
    };
    assert_eq!(err.code(), Some("MISCONF"), "{err}");
    assert!(err.to_string().contains("space"), "{err}");
    assert_eq!(cmd("GET").arg("k0").query::<String>(&mut c).unwrap(), value, "reads keep working");
    // The failed SET is not counted (its count change was taken back).
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), written as i64);
    assert_eq!(cmd("PING").query::<String>(&mut c).unwrap(), "PONG");
    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while cmd("SET").arg("after").arg("1").query::<()>(&mut c).is_err() {
        assert!(Instant::now() < deadline, "writes never resumed");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(cmd("GET").arg(format!("k{}", written - 1)).query::<String>(&mut c).unwrap(), value);
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), written as i64 + 1);
}
