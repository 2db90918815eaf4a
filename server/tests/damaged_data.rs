//! shale-server refuses to start on a damaged data directory, says which file, names the tool
//! that inspects and repairs it, and changes nothing.

mod common;

use std::process::{Command, Stdio};

#[test]
fn a_damaged_manifest_stops_the_server_with_a_message_naming_the_tool() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let db = lsm::Db::open(&data, lsm::Options::default()).unwrap();
        db.put(b"Mkey", b"value").unwrap();
        db.flush().unwrap();
        db.close().unwrap();
    }
    let current = std::fs::read_to_string(data.join("CURRENT")).unwrap();
    let manifest = data.join(current.trim());
    let mut bytes = std::fs::read(&manifest).unwrap();
    bytes[10] ^= 0x01;
    std::fs::write(&manifest, &bytes).unwrap();
    let before: Vec<_> = std::fs::read_dir(&data).unwrap().map(|e| e.unwrap().file_name()).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_shale-server"))
        .args(["--port", &common::free_port().to_string(), "--dir", data.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("shale-ldb repair") && stderr.contains(current.trim()), "{stderr}");
    let after: Vec<_> = std::fs::read_dir(&data).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(before, after, "nothing was created or deleted");
}
