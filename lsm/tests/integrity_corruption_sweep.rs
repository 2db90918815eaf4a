//! Random damage to every kind of file (tables, WAL, MANIFEST, CURRENT): bit flips and
//! truncations at random offsets. Whatever happens, the engine either returns the right data
//! or an error. "Right" is the written state, except that damage to the WAL's last records may
//! look exactly like a torn write and lose them: then the state must be a prefix of the writes
//! (nothing reordered, no hole, nothing invented). Silent wrong data is counted, and must be 0.
//!
//! `SHALE_SWEEP_TRIALS` (default 400) scales the number of trials.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::files_named;
use lsm::{Compression, Db, Options};
use rand::{Rng, SeedableRng};

const TABLE_KEYS: u32 = 600;
const WAL_WRITES: u32 = 40;

fn opts() -> Options {
    let codec = if Compression::Snappy.is_available() { Compression::Snappy } else { Compression::None };
    Options::default().compression(codec).block_size(512).disable_auto_compactions(true)
}

/// Two flushed tables and a WAL of single puts; returns the directory and, for each prefix of
/// the WAL writes, the expected state.
fn build(dir: &Path) -> Vec<State> {
    let db = Db::open(dir, opts()).unwrap();
    let mut state = BTreeMap::new();
    for half in 0..2 {
        for i in (half * TABLE_KEYS / 2)..((half + 1) * TABLE_KEYS / 2) {
            let (k, v) =
                (format!("key{i:05}").into_bytes(), format!("table-value-{i}-{}", "y".repeat(i as usize % 30)));
            db.put(&k, &v).unwrap();
            state.insert(k, v.into_bytes());
        }
        db.flush().unwrap();
    }
    let mut prefixes = vec![state.clone()];
    for w in 0..WAL_WRITES {
        // Overwrites and new keys, so a lost or reordered write shows.
        let k = format!("key{:05}", (w * 37) % (TABLE_KEYS + 20)).into_bytes();
        let v = format!("wal-value-{w}").into_bytes();
        db.put(&k, &v).unwrap();
        state.insert(k, v);
        prefixes.push(state.clone());
    }
    db.close().unwrap();
    prefixes
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
    }
}

fn damageable(dir: &Path) -> Vec<PathBuf> {
    files_named(dir, |n| n.ends_with(".sst") || n.ends_with(".log") || n.starts_with("MANIFEST-") || n == "CURRENT")
}

#[derive(Debug, Default)]
struct Tally {
    errors: u64,
    exact: u64,
    prefix: u64,
    silent_wrong: Vec<String>,
}

/// Keys and values.
type State = BTreeMap<Vec<u8>, Vec<u8>>;

/// Reads everything (a scan and every point get); `Err` if any read reported an error.
fn read_state(db: &Db, keys: &[Vec<u8>]) -> Result<(State, State), ()> {
    let mut scanned = BTreeMap::new();
    for kv in db.range::<&[u8], _>(..) {
        let (k, v) = kv.map_err(|_| ())?;
        scanned.insert(k.to_vec(), v.to_vec());
    }
    let mut got = BTreeMap::new();
    for k in keys {
        if let Some(v) = db.get(k).map_err(|_| ())? {
            got.insert(k.clone(), v.to_vec());
        }
    }
    Ok((scanned, got))
}

#[test]
fn random_damage_gives_the_right_data_or_an_error_never_wrong_data() {
    let trials: u64 = std::env::var("SHALE_SWEEP_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    let pristine = tempfile::tempdir().unwrap();
    let prefixes = build(pristine.path());
    let full = prefixes.last().unwrap().clone();
    let keys: Vec<Vec<u8>> = (0..TABLE_KEYS + 20).map(|i| format!("key{i:05}").into_bytes()).collect();
    let files = damageable(pristine.path());
    assert!(files.iter().any(|f| f.extension().is_some_and(|e| e == "log")), "{files:?}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let mut tally = Tally::default();
    for trial in 0..trials {
        let work = tempfile::tempdir().unwrap();
        let dir = work.path().join("db");
        copy_dir(pristine.path(), &dir);
        let victim = dir.join(files[trial as usize % files.len()].file_name().unwrap());
        let mut bytes = std::fs::read(&victim).unwrap();
        if bytes.is_empty() {
            continue;
        }
        let what = if rng.random_bool(0.5) {
            let at = rng.random_range(0..bytes.len());
            bytes[at] ^= 1 << rng.random_range(0..8);
            format!("bit flip at {at}")
        } else {
            let at = rng.random_range(0..bytes.len());
            bytes.truncate(at);
            format!("truncated to {at}")
        };
        std::fs::write(&victim, &bytes).unwrap();
        let label = format!("trial {trial}: {} {what}", victim.file_name().unwrap().to_string_lossy());
        let Ok(db) = Db::open(&dir, opts()) else {
            tally.errors += 1;
            continue;
        };
        match read_state(&db, &keys) {
            Err(()) => tally.errors += 1,
            Ok((scanned, got)) if scanned == full && got == full => tally.exact += 1,
            Ok((scanned, got)) => {
                let is_wal = victim.extension().is_some_and(|e| e == "log");
                if is_wal && scanned == got && prefixes.contains(&scanned) {
                    tally.prefix += 1;
                } else {
                    tally.silent_wrong.push(format!(
                        "{label}: {} keys scanned, {} expected",
                        scanned.len(),
                        full.len()
                    ));
                }
            }
        }
        drop(db);
    }
    eprintln!(
        "sweep: {trials} trials, {} errors, {} exact, {} WAL prefixes, {} silent wrong",
        tally.errors,
        tally.exact,
        tally.prefix,
        tally.silent_wrong.len()
    );
    assert!(tally.silent_wrong.is_empty(), "silent wrong data: {:#?}", tally.silent_wrong);
    assert!(tally.errors > 0 && tally.exact > 0, "the sweep exercised both outcomes: {tally:?}");
}
