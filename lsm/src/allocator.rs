//! Handing freed memory back to the OS, for [`Options::memory_release`](crate::Options::memory_release),
//! and what the allocator counts as allocated. The program that picks the global allocator
//! picks which of these to call: the `jemalloc` feature only makes jemalloc's available.
//!
//! Neither allocator does it on its own soon enough for a database that frees a memtable's
//! worth of memory at once. jemalloc keeps freed pages for seconds (its decay). glibc's malloc
//! raises its mmap threshold to the largest block freed so far, so after the first large free
//! most blocks come from its heaps, and a heap gives back only its top: with 10 M random
//! writes and a 64 MiB write buffer it held about 100 MB free once the writes were done.

/// jemalloc's options as a program sets them, in a static it exports under jemalloc's
/// `malloc_conf` name (`_rjem_malloc_conf` for tikv-jemallocator), read before `main`:
///
/// ```ignore
/// #[export_name = "_rjem_malloc_conf"]
/// static MALLOC_CONF: lsm::allocator::MallocConf = lsm::allocator::MallocConf::new(c"dirty_decay_ms:1000");
/// ```
#[cfg(feature = "jemalloc")]
#[repr(transparent)]
#[derive(Debug)]
pub struct MallocConf(*const std::ffi::c_char);

#[cfg(feature = "jemalloc")]
impl MallocConf {
    /// The options `conf` (jemalloc's `name:value,…` syntax).
    pub const fn new(conf: &'static std::ffi::CStr) -> Self {
        MallocConf(conf.as_ptr())
    }
}

// SAFETY: it points at a `'static` C string, which is immutable and lives for the whole program.
#[cfg(feature = "jemalloc")]
unsafe impl Sync for MallocConf {}

/// Bytes the engines of this process hold outside the allocator, in anonymous mappings of their
/// own: memtables' value chunks, point indexes and bloom filters, which are unmapped (given
/// back to the OS at once) when a memtable is dropped.
pub fn mapped_bytes() -> usize {
    crate::pages::mapped_bytes()
}

/// Bytes the program has allocated from jemalloc and not yet freed (`stats.allocated`; the
/// feature turns jemalloc's statistics on). Only meaningful in a program whose global
/// allocator is tikv-jemallocator.
#[cfg(feature = "jemalloc")]
pub fn jemalloc_allocated() -> Option<usize> {
    jemalloc_stat(c"stats.allocated")
}

/// Where jemalloc's memory beyond what is allocated goes: bytes in pages holding live
/// allocations (`stats.active`: allocated plus the free space of partly used slabs), and its own
/// metadata (`stats.metadata`: extent records, radix tree, per-thread caches' bookkeeping).
#[cfg(feature = "jemalloc")]
pub fn jemalloc_active_and_metadata() -> Option<(usize, usize)> {
    Some((jemalloc_stat(c"stats.active")?, jemalloc_stat(c"stats.metadata")?))
}

/// Bytes of jemalloc's pages that are resident (`stats.resident`: active pages, metadata, and
/// freed pages not yet handed back to the OS).
#[cfg(feature = "jemalloc")]
pub fn jemalloc_resident() -> Option<usize> {
    jemalloc_stat(c"stats.resident")
}

/// Bytes the program has allocated from glibc's malloc and not yet freed: heap blocks in use
/// plus mmap'd blocks (`mallinfo2`).
#[cfg(target_env = "gnu")]
pub fn glibc_allocated() -> usize {
    // SAFETY: takes no pointers; returns the counters by value.
    let m = unsafe { libc::mallinfo2() };
    m.uordblks + m.hblkhd
}

/// One of jemalloc's `size_t` statistics, refreshed first (they are cached per `epoch`).
#[cfg(feature = "jemalloc")]
fn jemalloc_stat(name: &std::ffi::CStr) -> Option<usize> {
    let mut epoch: u64 = 1;
    let mut value: usize = 0;
    let mut len = std::mem::size_of::<usize>();
    // SAFETY: NUL-terminated control names; `epoch` is written from a valid u64, and the
    // statistic read into a usize whose size is passed in `len`, as these controls expect.
    let ok = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"epoch".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&mut epoch as *mut u64).cast(),
            std::mem::size_of::<u64>(),
        ) == 0
            && tikv_jemalloc_sys::mallctl(
                name.as_ptr(),
                (&mut value as *mut usize).cast(),
                &mut len,
                std::ptr::null_mut(),
                0,
            ) == 0
    };
    ok.then_some(value)
}

/// Turns jemalloc's background threads on or off (its `background_thread` control, what
/// Redis's `jemalloc-bg-thread` sets). With them, freed pages go back to the OS as they age
/// (jemalloc's 10-second decay) even while the program makes no allocator calls; without,
/// the decay only advances inside allocator calls, so an idle process keeps what it freed.
/// False if jemalloc refused. Only with the `jemalloc` feature, in a program whose global
/// allocator is tikv-jemallocator.
#[cfg(feature = "jemalloc")]
pub fn jemalloc_background_thread(on: bool) -> bool {
    let mut value = on;
    // SAFETY: a NUL-terminated mallctl name; the new value is a `bool` (what this control
    // takes) that lives across the call, and nothing is read back.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            c"background_thread".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&mut value as *mut bool).cast(),
            std::mem::size_of::<bool>(),
        ) == 0
    }
}

/// Returns every jemalloc arena's freed pages to the OS (`arena.<MALLCTL_ARENAS_ALL>.purge`,
/// what Redis's `MEMORY PURGE` does). Only with the `jemalloc` feature, in a program whose
/// global allocator is tikv-jemallocator.
#[cfg(feature = "jemalloc")]
pub fn purge() {
    // SAFETY: a NUL-terminated mallctl name (4096 is MALLCTL_ARENAS_ALL); this control reads
    // and writes nothing. A failed purge only leaves the pages with the allocator.
    let _ = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arena.4096.purge".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
}

/// Returns the free pages of every glibc malloc arena to the OS (`malloc_trim(0)`, which also
/// releases whole free pages inside a heap, not only its top). Costs a walk of the arenas'
/// free lists: about a millisecond with a few hundred MB of heap.
#[cfg(target_env = "gnu")]
pub fn trim() {
    // SAFETY: takes no pointers; only moves free memory from the allocator to the OS.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(all(test, target_env = "gnu"))]
mod tests {
    /// This process's resident set.
    fn rss_kb() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .unwrap()
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap()
    }

    #[test]
    fn a_trim_gives_freed_heap_pages_back() {
        // Blocks under the mmap threshold's floor (128 KiB) come from a heap, and a small block
        // after each keeps free() alone from giving its pages back: only a heap's top can be.
        let (blocks, pins): (Vec<Vec<u8>>, Vec<Vec<u8>>) =
            (0..2048).map(|_| (vec![1u8; 64 * 1024], vec![2u8; 64])).unzip();
        let before_free = rss_kb();
        drop(blocks);
        super::trim();
        let after = rss_kb();
        assert!(pins.iter().all(|p| p[0] == 2));
        // 128 MiB were freed; other tests' threads may allocate meanwhile, so ask for half.
        assert!(before_free.saturating_sub(after) > 64 * 1024, "rss {before_free} kB -> {after} kB");
    }
}
