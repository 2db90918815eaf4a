//! A statistics counter bumped by every command on every thread (`total_commands_processed`,
//! the in-memory path's counts), kept in per-thread stripes ([`lsm::stripe`]): one shared
//! atomic's cache line moved between the two cores on nearly every command, and the increment
//! waiting for it was measured at 3-4 % of a pipelined PING's CPU.
//!
//! It answers the few calls of `AtomicU64` that statistics use. A total sums the stripes with
//! wrapping arithmetic, so a decrement counted on another thread's stripe than its increment
//! still leaves the exact total.

use std::sync::atomic::{AtomicU64, Ordering};

use lsm::stripe::Striped;

/// See the module docs.
#[derive(Debug, Default)]
pub struct Counter(Striped<AtomicU64>);

impl Counter {
    /// Adds `n`.
    #[inline]
    pub fn fetch_add(&self, n: u64, order: Ordering) {
        self.0.local().fetch_add(n, order);
    }

    /// Takes `n` away.
    #[inline]
    pub fn fetch_sub(&self, n: u64, order: Ordering) {
        self.0.local().fetch_sub(n, order);
    }

    /// The total.
    pub fn load(&self, order: Ordering) -> u64 {
        self.0.iter().fold(0u64, |sum, c| sum.wrapping_add(c.load(order)))
    }

    /// Sets the total to `n` (`CONFIG RESETSTAT`; counts made meanwhile may be lost, as with a
    /// plain atomic).
    pub fn store(&self, n: u64, order: Ordering) {
        for (i, c) in self.0.iter().enumerate() {
            c.store(if i == 0 { n } else { 0 }, order);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_are_exact_whichever_threads_count() {
        let c = Counter::default();
        std::thread::scope(|s| {
            for t in 0..20u64 {
                let c = &c;
                s.spawn(move || {
                    for _ in 0..1000 {
                        c.fetch_add(2, Ordering::Relaxed);
                    }
                    // Taken back on another thread than some of the additions.
                    c.fetch_sub(t, Ordering::Relaxed);
                });
            }
        });
        assert_eq!(c.load(Ordering::Relaxed), 20 * 2000 - (0..20).sum::<u64>());
        c.store(7, Ordering::Relaxed);
        assert_eq!(c.load(Ordering::Relaxed), 7);
    }
}
