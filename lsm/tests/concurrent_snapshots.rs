//! Reads stay exact while writes, flushes and compactions run beside them: readers take
//! snapshots while two writers rewrite and delete a few thousand keys through tiny memtables
//! (a flush every few hundred writes, compactions all the time, a block cache and a row cache
//! small enough to evict), and check every point read and range scan at each snapshot against
//! what the writes up to it must have left.
//!
//! Each write is one batch that sets its key (or deletes it, or deletes a small range of keys)
//! and records its number under the writer's `last` key, so a snapshot tells the reader which
//! writes it holds; the schedule of writes is a function of their numbers, so the reader works
//! out the expected value of any key at that point on its own.
//!
//! `SHALE_CONCURRENT_WRITES` scales the writes per writer (default 20,000).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lsm::{Db, Options, ReadOptions, WriteBatch, WriteOptions};

/// Keys each writer owns (a writer's keys are `w<writer>-<key>`).
const KEYS: u64 = 1500;
const WRITERS: u64 = 2;

fn writes_per_writer() -> u64 {
    std::env::var("SHALE_CONCURRENT_WRITES").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000)
}

/// What write number `i` (from 1) of a writer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Put(u64),
    Delete(u64),
    /// Deletes keys `from..from + 8` (all below `KEYS`).
    DeleteRange(u64),
}

fn op(i: u64) -> Op {
    let h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 17;
    let key = h % KEYS;
    match i % 97 {
        0 => Op::DeleteRange(key.min(KEYS - 8)),
        n if n % 5 == 0 => Op::Delete(key),
        _ => Op::Put(key),
    }
}

fn key(writer: u64, k: u64) -> String {
    format!("w{writer}-{k:05}")
}

fn last_key(writer: u64) -> String {
    format!("last{writer}")
}

/// The value write `i` of `writer` gives its key: long enough that blocks hold few entries.
fn value(writer: u64, i: u64) -> Vec<u8> {
    let mut v = format!("{writer}:{i}:").into_bytes();
    v.resize(40 + (i % 60) as usize, b'.');
    v
}

/// The expected contents of one writer's keys after its writes `1..=upto`, built up
/// incrementally: `state[k]` is the write that last set key `k`, if it is set.
struct Model {
    writer: u64,
    applied: u64,
    state: Vec<Option<u64>>,
}

impl Model {
    fn new(writer: u64) -> Model {
        Model { writer, applied: 0, state: vec![None; KEYS as usize] }
    }

    /// Moves the model forward to write `upto` (a reader's snapshots only ever move forward).
    fn advance(&mut self, upto: u64) {
        assert!(upto >= self.applied, "writer {}: a later snapshot saw fewer writes", self.writer);
        for i in self.applied + 1..=upto {
            match op(i) {
                Op::Put(k) => self.state[k as usize] = Some(i),
                Op::Delete(k) => self.state[k as usize] = None,
                Op::DeleteRange(from) => self.state[from as usize..from as usize + 8].fill(None),
            }
        }
        self.applied = upto;
    }

    fn expected(&self, k: u64) -> Option<Vec<u8>> {
        self.state[k as usize].map(|i| value(self.writer, i))
    }
}

#[test]
fn snapshot_reads_stay_exact_while_writes_flushes_and_compactions_run() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default()
        .write_buffer_size(32 << 10)
        .block_size(256)
        .target_file_size_base(64 << 10)
        .max_bytes_for_level_base(256 << 10)
        .block_cache_size(64 << 10)
        .row_cache_size(16 << 10);
    let db = Db::open(dir.path(), opts).unwrap();
    let n = writes_per_writer();
    let done = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 1..=n {
                    let mut batch = WriteBatch::new();
                    match op(i) {
                        Op::Put(k) => batch.put(key(w, k), value(w, i)),
                        Op::Delete(k) => batch.delete(key(w, k)),
                        Op::DeleteRange(from) => batch.delete_range(key(w, from), key(w, from + 8)),
                    };
                    batch.put(last_key(w), i.to_string());
                    db.write(batch, &WriteOptions::default()).unwrap();
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let (db, done) = (db.clone(), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut models: Vec<Model> = (0..WRITERS).map(Model::new).collect();
                let mut rounds = 0u64;
                let mut rng = 0x2545_f491_4f6c_dd1d_u64 ^ r;
                while !done.load(Ordering::Acquire) || rounds < 3 {
                    let snap = db.snapshot();
                    let at = ReadOptions::new().snapshot(&snap);
                    for (w, model) in models.iter_mut().enumerate() {
                        let w = w as u64;
                        let upto = db
                            .get_with(last_key(w), &at)
                            .unwrap()
                            .map_or(0, |v| std::str::from_utf8(&v).unwrap().parse::<u64>().unwrap());
                        model.advance(upto);
                        // Point reads of keys the writer is busy with (near its latest writes)
                        // and of random ones.
                        for probe in 0..40u64 {
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            let k = if probe % 2 == 0 {
                                match op(upto.saturating_sub(rng % 16).max(1)) {
                                    Op::Put(k) | Op::Delete(k) | Op::DeleteRange(k) => k,
                                }
                            } else {
                                rng % KEYS
                            };
                            let got = db.get_with(key(w, k), &at).unwrap();
                            assert_eq!(
                                got.as_deref(),
                                model.expected(k).as_deref(),
                                "reader {r}: writer {w}'s key {k} after its write {upto} (round {rounds})"
                            );
                        }
                        // Every few rounds a scan of the writer's keys, both ways.
                        if rounds.is_multiple_of(8) {
                            let prefix = format!("w{w}-");
                            let got: BTreeMap<Vec<u8>, Vec<u8>> = db
                                .range_with(prefix.clone()..format!("w{w}."), &at)
                                .map(|kv| kv.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
                                .collect();
                            let want: BTreeMap<Vec<u8>, Vec<u8>> = (0..KEYS)
                                .filter_map(|k| model.expected(k).map(|v| (key(w, k).into_bytes(), v)))
                                .collect();
                            assert!(
                                got == want,
                                "reader {r}: a scan of writer {w}'s keys after its write {upto}: {} keys, {} expected",
                                got.len(),
                                want.len()
                            );
                            let mut it = db.iter(&at);
                            it.seek_for_prev(format!("w{w}.").as_bytes()).unwrap();
                            let mut back = Vec::new();
                            while it.valid() && it.key().starts_with(prefix.as_bytes()) {
                                back.push(it.key().to_vec());
                                it.prev().unwrap();
                            }
                            back.reverse();
                            assert!(
                                back.iter().eq(want.keys()),
                                "reader {r}: a backward scan of writer {w}'s keys after its write {upto}"
                            );
                        }
                    }
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Ordering::Release);
    for r in readers {
        let rounds = r.join().unwrap();
        assert!(rounds >= 3);
    }
    let stats = db.stats();
    assert!(stats.flushes > 10 && stats.compactions > 0, "flushes and compactions ran beside the readers: {stats}");
    // After everything settles, the latest state is the model's at the end.
    db.flush().unwrap();
    for w in 0..WRITERS {
        let mut model = Model::new(w);
        model.advance(n);
        for k in 0..KEYS {
            assert_eq!(
                db.get(key(w, k)).unwrap().as_deref(),
                model.expected(k).as_deref(),
                "writer {w}'s key {k} at the end"
            );
        }
    }
}
