//! Helpers shared by the engine's integration tests.

#![allow(dead_code)] // each test file uses part of this

use std::path::{Path, PathBuf};

pub mod cursor;

/// The files directly in `dir` whose name satisfies `keep`, sorted.
pub fn files_named(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && keep(&p.file_name().unwrap().to_string_lossy()))
        .collect();
    v.sort();
    v
}

/// The one file in `dir` whose name ends with `suffix`.
pub fn only_file(dir: &Path, suffix: &str) -> PathBuf {
    let mut v = files_named(dir, |n| n.ends_with(suffix));
    assert_eq!(v.len(), 1, "{v:?}");
    v.pop().unwrap()
}
