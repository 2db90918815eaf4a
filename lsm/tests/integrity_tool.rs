//! `shale-ldb`, the command-line tool, on real database directories.

mod common;

use std::path::Path;
use std::process::Command;

use lsm::{Db, Options};

fn ldb(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_shale-ldb")).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

/// The one file in `dir` whose name ends with `suffix`, as a command-line argument.
fn file_ending(dir: &Path, suffix: &str) -> String {
    common::only_file(dir, suffix).display().to_string()
}

fn build(dir: &Path) {
    let db = Db::open(dir, Options::default()).unwrap();
    db.put(b"alpha", b"1").unwrap();
    db.put(b"beta", b"2").unwrap();
    db.flush().unwrap();
    db.put(b"gamma", b"\x00\x01").unwrap();
    db.close().unwrap();
}

#[test]
fn verify_dump_get_and_scan_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let d = dir.path().to_str().unwrap();
    let (code, text) = ldb(&["verify", d]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("verify: OK") && text.contains("1 live tables"), "{text}");
    // The dumps read files as they are (get and scan below open the database).
    let (_, text) = ldb(&["dump-wal", &file_ending(dir.path(), ".log")]);
    assert!(text.contains("Put gamma => \\x00\\x01"), "{text}");
    let manifest = dir.path().join(std::fs::read_to_string(dir.path().join("CURRENT")).unwrap().trim());
    let (_, text) = ldb(&["dump-manifest", manifest.to_str().unwrap()]);
    assert!(text.contains("+ L0 table") && text.contains("[alpha .. beta]"), "{text}");
    let sst = file_ending(dir.path(), ".sst");
    let (_, text) = ldb(&["dump-sst", &sst]);
    assert!(text.contains("alpha @1 Put => 1"), "{text}");
    let (_, text) = ldb(&["dump-sst", &sst, "--stats"]);
    assert!(text.contains("num_entries: 2"), "{text}");
    let (code, text) = ldb(&["get", d, "beta"]);
    assert_eq!((code, text.trim()), (0, "2"));
    let (code, text) = ldb(&["scan", d, "b"]);
    assert_eq!(code, 0);
    assert_eq!(text, "beta => 2\ngamma => \\x00\\x01\n");
    assert_eq!(ldb(&["get", d, "nope"]).0, 1);
    assert_eq!(ldb(&["bogus"]).0, 2);
}

#[test]
fn verify_reports_damage_and_repair_rebuilds() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let d = dir.path().to_str().unwrap();
    let sst = file_ending(dir.path(), ".sst");
    let mut bytes = std::fs::read(&sst).unwrap();
    bytes[5] ^= 0x01;
    std::fs::write(&sst, &bytes).unwrap();
    let (code, text) = ldb(&["verify", d]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("PROBLEMS FOUND") && text.contains("checksum"), "{text}");
    std::fs::remove_file(dir.path().join("CURRENT")).unwrap();
    let (code, text) = ldb(&["repair", d]);
    assert_eq!(code, 1, "a table was lost, and repair says so: {text}");
    assert!(text.contains("moved to"), "{text}");
    let (code, text) = ldb(&["verify", d]);
    assert_eq!(code, 0, "{text}");
    let (code, text) = ldb(&["get", d, "gamma"]);
    assert_eq!((code, text.trim()), (0, "\\x00\\x01"), "the WAL's write came back");
}
