//! The memtable charges what its entries really occupy, so `write_buffer_size` bounds memory:
//! checked with an allocator that counts live bytes, plus the value chunks the memtable maps
//! from the OS itself (`lsm::allocator::mapped_bytes`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use lsm::memtable::Memtable;

/// The system allocator, counting live bytes as allocators hand them out (16-byte classes).
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

fn charged(layout: Layout) -> isize {
    layout.size().next_multiple_of(16) as isize
}

// SAFETY: every call is forwarded to `System` unchanged; the counter is only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(charged(layout), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(charged(layout), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn fill(m: &Memtable, n: u64, key_len: usize, value_len: usize) {
    let value = vec![b'v'; value_len];
    for i in 0..n {
        let mut key = format!("{i:0width$}", width = key_len).into_bytes();
        key.truncate(key_len);
        m.insert(i + 1, lsm::key::ValueKind::Put, &key, &value);
    }
}

#[test]
fn approximate_size_is_the_memory_the_entries_take_and_a_dropped_memtable_gives_it_all_back() {
    for (key_len, value_len) in [(16, 100), (24, 10), (60, 400), (8, 0)] {
        let before = LIVE.load(Ordering::Relaxed) + lsm::allocator::mapped_bytes() as isize;
        let m = Memtable::new(1);
        fill(&m, 50_000, key_len, value_len);
        let live = (LIVE.load(Ordering::Relaxed) + lsm::allocator::mapped_bytes() as isize - before) as f64;
        let charged = m.approximate_size() as f64;
        // Within 15 %: write_buffer_size then means memory, not bytes written.
        assert!(
            (charged / live - 1.0).abs() < 0.15,
            "key {key_len} B, value {value_len} B: charged {charged}, heap {live}"
        );
        drop(m);
        let left = LIVE.load(Ordering::Relaxed) + lsm::allocator::mapped_bytes() as isize - before;
        assert!(left.abs() < 4096, "key {key_len} B, value {value_len} B: {left} bytes still held");
    }
}
