//! When keys were last used, and how often: `OBJECT IDLETIME`, `OBJECT FREQ`, `DEBUG OBJECT`'s
//! `lru_seconds_idle`, and `RESTORE … IDLETIME | FREQ`.
//!
//! Redis keeps 24 bits beside every value: the second it was last touched (LRU), or under an
//! LFU `maxmemory-policy` the minute its counter last decayed and a logarithmic access counter.
//! Shale's values live on disk, and writing a time into a key's record on every read would
//! turn every read into a write. Instead one fixed table in memory remembers the keys used
//! most recently, a cell per key hash:
//!
//! ```text
//! cell (u64) = tag u32 (high bits of the key's hash, never 0) | payload u32
//! payload    = LRU: seconds since the server started (+ 2^31), at the last access
//!              LFU: minutes (16 bits, Redis's `ldt`) << 8 | counter (8 bits)
//! ```
//!
//! A key's cell is the one its hash (seeded with its database) selects; a later access of
//! another key with the same cell takes it over. A key whose cell holds another tag (or
//! nothing) counts as untouched since the server started: idle for the server's uptime, and
//! with the frequency of a new key (5) decayed over it — what Redis reports for keys loaded at
//! startup and not used since. With [`CELLS`] cells (4 MiB) the keys of the last ~half million
//! distinct accesses are remembered exactly; a key displaced by later traffic only ever looks
//! idler than it is. The cells follow the policy in force when they were written: after a
//! switch between LRU and LFU policies, values take a while to adjust (Redis says the same).
//!
//! Which commands touch a key is decided where commands run (`exec::gate::run_command`):
//! every command touches its keys except those Redis runs with `LOOKUP_NOTOUCH` or without a
//! lookup (TYPE, TTL, EXISTS, OBJECT, …, see [`touches`]).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use rand::Rng;

/// Cells in the table (a power of two).
pub const CELLS: usize = 1 << 19;
/// What the LRU payload's clock reads at the server's start.
const EPOCH_OFFSET: u64 = 1 << 31;
/// A new key's LFU counter (Redis's `LFU_INIT_VAL`).
pub const LFU_INIT: u8 = 5;

/// The table (see the module docs).
pub struct AccessTimes {
    cells: Box<[AtomicU64]>,
    /// Unix time when the table was made, in seconds.
    started_unix: u64,
    /// An LFU `maxmemory-policy` is in force.
    lfu: AtomicBool,
    /// `lfu-log-factor`.
    log_factor: AtomicU32,
    /// `lfu-decay-time` (minutes per counter step down; 0: never).
    decay_time: AtomicU32,
}

impl std::fmt::Debug for AccessTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessTimes").field("lfu", &self.lfu).finish_non_exhaustive()
    }
}

impl Default for AccessTimes {
    fn default() -> Self {
        AccessTimes {
            cells: (0..CELLS).map(|_| AtomicU64::new(0)).collect(),
            started_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
            lfu: AtomicBool::new(false),
            log_factor: AtomicU32::new(10),
            decay_time: AtomicU32::new(1),
        }
    }
}

/// What the table knows of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// Seconds since the last access (LRU policies).
    pub idle: u64,
    /// The access counter, decayed to now (LFU policies).
    pub freq: u8,
    /// The 24-bit value Redis would hold in the object's `lru` field (`DEBUG OBJECT lru:`).
    pub lru_field: u32,
    /// `DEBUG OBJECT lru_seconds_idle:`: Redis reads the `lru` field as an LRU clock whatever
    /// the policy (under LFU the number means nothing, but it is what Redis prints).
    pub lru_seconds_idle: u64,
}

impl AccessTimes {
    /// Follows `maxmemory-policy`, `lfu-log-factor` and `lfu-decay-time`.
    pub fn configure(&self, policy: &str, log_factor: i64, decay_time: i64) {
        self.lfu.store(policy.ends_with("lfu"), Ordering::Relaxed);
        self.log_factor.store(log_factor.clamp(0, i64::from(u32::MAX)) as u32, Ordering::Relaxed);
        self.decay_time.store(decay_time.clamp(0, i64::from(u32::MAX)) as u32, Ordering::Relaxed);
    }

    /// True under an LFU policy (`OBJECT FREQ` answers, `OBJECT IDLETIME` refuses).
    pub fn lfu(&self) -> bool {
        self.lfu.load(Ordering::Relaxed)
    }

    fn slot(&self, db: u32, key: &[u8]) -> (&AtomicU64, u64) {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(key, u64::from(db));
        let tag = (h >> 32) | 1;
        (&self.cells[h as usize & (CELLS - 1)], tag << 32)
    }

    /// Whole seconds since the table was made, by the coarse clock the server refreshes every
    /// 100 ms ([`crate::services::clients::coarse_now_ms`]): every command touches its keys,
    /// and reading the system clock for each was measured at 1.5 % of a pipelined GET. Redis's
    /// LRU clock is as coarse (it ticks at `hz`).
    fn uptime(&self) -> u64 {
        (crate::services::clients::coarse_now_ms() / 1000).saturating_sub(self.started_unix)
    }

    /// The LRU payload's clock: seconds since the server started, plus 2^31 so that a RESTORE
    /// can place an access before the start.
    fn seconds(&self) -> u32 {
        (self.uptime() + EPOCH_OFFSET).min(u64::from(u32::MAX)) as u32
    }

    /// Redis's LFU clock: minutes, modulo 2^16.
    fn minutes(&self) -> u16 {
        ((self.started_unix + self.uptime()) / 60) as u16
    }

    /// Starts loading the cell of `key` in `db` into the CPU's cache. The table is larger
    /// than the caches, so a touch of a key not used lately waits on memory (measured: 6 % of
    /// a pipelined GET); called before a command runs, the load overlaps with its work and the
    /// touch after it finds the cell cached.
    pub fn prefetch(&self, db: u32, key: &[u8]) {
        lsm::prefetch(self.slot(db, key).0.as_ptr());
    }

    /// Records an access of `key` in `db`: under LRU its time, under LFU a (probabilistic,
    /// logarithmic) counter increment after the decay since its last one, as Redis's
    /// `updateLFU`.
    pub fn touch(&self, db: u32, key: &[u8]) {
        let (cell, tag) = self.slot(db, key);
        let payload = if self.lfu() {
            let old = cell.load(Ordering::Relaxed);
            // A key the table does not hold starts at a new key's counter, as a value Redis
            // creates (or loads) does; accesses after that count.
            let counter = if old & !0xffff_ffff == tag { self.log_incr(self.decayed(old as u32)) } else { LFU_INIT };
            (u32::from(self.minutes()) << 8) | u32::from(counter)
        } else {
            self.seconds()
        };
        // Unchanged (the same second, or an LFU counter that did not move) is not written: a
        // hot key's cell then stays a shared, clean cache line for every thread reading it.
        let value = tag | u64::from(payload);
        if cell.load(Ordering::Relaxed) != value {
            cell.store(value, Ordering::Relaxed);
        }
    }

    /// `RESTORE … IDLETIME seconds`: the key was last used that long ago (LRU policies only,
    /// as in Redis).
    pub fn set_idle(&self, db: u32, key: &[u8], idle: u64) {
        if self.lfu() {
            return;
        }
        let (cell, tag) = self.slot(db, key);
        let at = u64::from(self.seconds()).saturating_sub(idle) as u32;
        cell.store(tag | u64::from(at), Ordering::Relaxed);
    }

    /// `RESTORE … FREQ n` (LFU policies only, as in Redis).
    pub fn set_freq(&self, db: u32, key: &[u8], freq: u8) {
        if !self.lfu() {
            return;
        }
        let (cell, tag) = self.slot(db, key);
        cell.store(tag | u64::from((u32::from(self.minutes()) << 8) | u32::from(freq)), Ordering::Relaxed);
    }

    /// What is known of `key` in `db` (see the module docs for keys the table lost).
    pub fn get(&self, db: u32, key: &[u8]) -> Access {
        let (cell, tag) = self.slot(db, key);
        let v = cell.load(Ordering::Relaxed);
        let mine = v & !0xffff_ffff == tag;
        let now = u64::from(self.seconds());
        let lfu = self.lfu();
        let (idle, freq, payload) = match (mine, lfu) {
            (true, false) => (now.saturating_sub(v & 0xffff_ffff), LFU_INIT, v as u32),
            (true, true) => (0, self.decayed(v as u32), v as u32),
            (false, false) => (now - EPOCH_OFFSET, LFU_INIT, 0),
            (false, true) => {
                let start = (self.started_unix / 60) as u16;
                let at_start = (u32::from(start) << 8) | u32::from(LFU_INIT);
                (0, self.decayed(at_start), at_start)
            }
        };
        // Redis's `lru` field: the LRU clock (seconds, 24 bits) at the last access, or the LFU
        // word itself.
        let clock = ((self.started_unix + now - EPOCH_OFFSET) & 0xff_ffff) as u32;
        let lru_field = if lfu { payload & 0xff_ffff } else { clock.wrapping_sub(idle as u32) & 0xff_ffff };
        // Redis's `estimateObjectIdleTime`, in seconds.
        let lru_seconds_idle = if clock >= lru_field {
            u64::from(clock - lru_field)
        } else {
            u64::from(clock) + u64::from(0xff_ffff - lru_field)
        };
        Access { idle, freq, lru_field, lru_seconds_idle }
    }

    /// Redis's `LFUDecrAndReturn`: the counter less one per `lfu-decay-time` minutes since
    /// its last decay.
    fn decayed(&self, word: u32) -> u8 {
        let ldt = (word >> 8) as u16;
        let counter = (word & 0xff) as u8;
        let now = self.minutes();
        // Minutes elapsed, modulo 2^16 as in Redis's `LFUTimeElapsed`.
        let elapsed = if now >= ldt { u32::from(now - ldt) } else { 65535 - u32::from(ldt) + u32::from(now) };
        let decay = self.decay_time.load(Ordering::Relaxed);
        let periods = elapsed.checked_div(decay).unwrap_or(0);
        counter.saturating_sub(periods.min(255) as u8)
    }

    /// Redis's `LFULogIncr`: one more with probability `1 / ((counter - 5) · factor + 1)`.
    fn log_incr(&self, counter: u8) -> u8 {
        if counter == 255 {
            return 255;
        }
        let base = f64::from(counter.saturating_sub(LFU_INIT));
        let p = 1.0 / (base * f64::from(self.log_factor.load(Ordering::Relaxed)) + 1.0);
        if rand::rng().random::<f64>() < p {
            counter + 1
        } else {
            counter
        }
    }
}

/// True if running `command` touches its keys (Redis's `lookupKey` without `LOOKUP_NOTOUCH`).
/// The commands that only look at a key's type, TTL or existence, or at the object itself,
/// leave its access time alone; RESTORE sets it itself (IDLETIME, FREQ).
pub fn touches(command: &str) -> bool {
    !matches!(
        command,
        "type"
            | "ttl"
            | "pttl"
            | "expiretime"
            | "pexpiretime"
            | "exists"
            | "object"
            | "debug"
            | "memory"
            | "restore"
            | "del"
            | "unlink"
            | "scan"
            | "keys"
            | "randomkey"
            | "dbsize"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_touched_key_is_not_idle_and_an_untouched_one_is_idle_since_start() {
        let t = AccessTimes::default();
        t.touch(0, b"a");
        assert_eq!(t.get(0, b"a").idle, 0);
        t.set_idle(0, b"a", 1000);
        assert_eq!(t.get(0, b"a").idle, 1000);
        // Never touched: idle for the uptime (0 here), the same key of another db is another key.
        t.set_idle(1, b"b", 50);
        assert_eq!(t.get(0, b"b").idle, 0);
        assert_eq!(t.get(1, b"b").idle, 50);
    }

    #[test]
    fn lfu_counters_start_at_five_grow_logarithmically_and_restore_sets_them() {
        let t = AccessTimes::default();
        t.configure("allkeys-lfu", 10, 1);
        assert_eq!(t.get(0, b"k").freq, LFU_INIT);
        t.touch(0, b"k");
        assert_eq!(t.get(0, b"k").freq, LFU_INIT, "created: a new key's counter");
        t.touch(0, b"k");
        // The first increment from 5 is certain (p = 1 at the initial value).
        assert_eq!(t.get(0, b"k").freq, LFU_INIT + 1);
        for _ in 0..10_000 {
            t.touch(0, b"k");
        }
        let f = t.get(0, b"k").freq;
        assert!((18..=142).contains(&f), "Redis's table for factor 10: 1K hits 18, 100K hits 142; got {f}");
        t.set_freq(0, b"k", 100);
        assert_eq!(t.get(0, b"k").freq, 100);
        // RESTORE's IDLETIME is ignored under LFU, FREQ under LRU, as in Redis.
        t.set_idle(0, b"k", 5);
        assert_eq!(t.get(0, b"k").freq, 100);
        t.configure("noeviction", 10, 1);
        t.set_freq(0, b"j", 9);
        assert_eq!(t.get(0, b"j").freq, LFU_INIT);
    }

    #[test]
    fn counters_decay_one_step_per_decay_period() {
        let t = AccessTimes::default();
        t.configure("volatile-lfu", 10, 1);
        let now = t.minutes();
        let word = |ago: u16, c: u32| (u32::from(now.wrapping_sub(ago)) << 8) | c;
        assert_eq!(t.decayed(word(0, 40)), 40);
        assert_eq!(t.decayed(word(3, 40)), 37);
        assert_eq!(t.decayed(word(100, 40)), 0);
        t.configure("volatile-lfu", 10, 0);
        assert_eq!(t.decayed(word(100, 40)), 40, "lfu-decay-time 0 never decays");
    }
}
