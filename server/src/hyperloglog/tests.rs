//! HLL layout tests: sparse and dense agree, corrupt values are refused, PFSELFTEST passes.

use super::*;

#[test]
fn sparse_and_dense_agree_and_promote() {
    let mut sparse = Hll::new();
    let mut dense = Hll::new();
    dense.to_dense().unwrap();
    for j in 0..5000u32 {
        let e = j.to_string();
        assert_eq!(sparse.add(e.as_bytes(), 3000).unwrap(), dense.add(e.as_bytes(), 3000).unwrap());
        if j == 100 {
            assert!(sparse.is_sparse());
            assert_eq!(sparse.registers(), dense.registers());
        }
    }
    assert!(!sparse.is_sparse(), "5000 elements outgrow 3000 sparse bytes");
    assert_eq!(sparse.registers(), dense.registers());
    let (n, refreshed) = sparse.count().unwrap();
    assert!(refreshed && (4800..5200).contains(&n), "{n}");
    assert_eq!(sparse.count().unwrap(), (n, false), "cached");
}

#[test]
fn empty_and_corrupt() {
    let mut h = Hll::new();
    assert_eq!(h.as_bytes().len(), HEADER + 2);
    assert_eq!(h.count().unwrap().0, 0);
    assert_eq!(h.decode_sparse(), "Z:16384");
    assert_eq!(Hll::from_bytes(b"HYLL".to_vec()), Err(NotHll));
    let mut bad = Hll::new().into_bytes();
    bad[HEADER + 1] = 0x10; // XZERO now covers too few registers
    let mut bad = Hll::from_bytes(bad).unwrap();
    bad.invalidate();
    assert_eq!(bad.count(), Err(Corrupt));
}

#[test]
fn self_test_passes() {
    self_test(3000).unwrap();
}
