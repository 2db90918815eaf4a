//! A million small keys written in scattered order across many flushes and compactions: every
//! point read and a full scan in both directions must be exact, before and after reopening.
//!
//! `LSM_TEST_KEYS` changes the key count (default 1,000,000).

use lsm::{Db, Options, WriteBatch, WriteOptions};

fn n() -> u64 {
    std::env::var("LSM_TEST_KEYS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000)
}

/// A permutation of `0..n` (multiplication by a number coprime with n, mod n).
fn scattered(i: u64, n: u64) -> u64 {
    const STEP: u64 = 7_919 * 104_729; // a product of primes; n is a power-of-ten multiple here
    (i * STEP) % n
}

fn key(i: u64) -> [u8; 16] {
    let mut k = *b"k000000000000000";
    let digits = format!("{i:015}");
    k[1..].copy_from_slice(digits.as_bytes());
    k
}

fn value(i: u64) -> [u8; 16] {
    let mut v = [0u8; 16];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v[8..].copy_from_slice(&(!i).to_le_bytes());
    v
}

#[test]
fn million_small_keys_across_many_flushes() {
    let n = n();
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default().write_buffer_size(4 << 20);
    {
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        let mut batch = WriteBatch::new();
        for i in 0..n {
            let k = scattered(i, n);
            batch.put(key(k), value(k));
            if batch.len() == 1000 {
                db.write(std::mem::take(&mut batch), &WriteOptions::default()).unwrap();
            }
        }
        db.write(batch, &WriteOptions::default()).unwrap();
        db.flush().unwrap();
        let stats = db.stats();
        assert!(stats.flushes >= 10, "expected many flushes: {stats}");
        assert!(stats.compactions >= 1, "expected L0 compactions: {stats}");
        verify(&db, n);
    }
    let db = Db::open(dir.path(), opts).unwrap();
    verify(&db, n);
}

fn verify(db: &Db, n: u64) {
    let mut seen = std::collections::HashSet::new();
    for i in 0..n {
        seen.insert(scattered(i, n));
    }
    assert_eq!(seen.len() as u64, n, "the test's key order must be a permutation");
    for i in 0..n {
        let got = db.get(key(i)).unwrap();
        assert_eq!(got.as_deref(), Some(&value(i)[..]), "key {i}");
    }
    for i in [n, n + 1, n * 2] {
        assert_eq!(db.get(key(i)).unwrap(), None);
    }
    let mut count = 0u64;
    for (i, kv) in db.range::<&[u8], _>(..).enumerate() {
        let (k, v) = kv.unwrap();
        assert_eq!((k.as_ref(), v.as_ref()), (&key(i as u64)[..], &value(i as u64)[..]));
        count += 1;
    }
    assert_eq!(count, n);
    let back = db.range::<&[u8], _>(..).rev().take(1000).map(|kv| kv.unwrap().0).collect::<Vec<_>>();
    assert_eq!(back.first().map(|k| k.to_vec()), Some(key(n - 1).to_vec()));
    assert_eq!(back.len(), 1000.min(n as usize));
}
