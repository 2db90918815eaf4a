//! Handing freed memory back to the OS, for [`Options::memory_release`](crate::Options::memory_release).

/// Bytes the engines of this process hold outside the allocator, in anonymous mappings of their
/// own: memtables' value chunks, point indexes and bloom filters, which are unmapped (given
/// back to the OS at once) when a memtable is dropped.
pub fn mapped_bytes() -> usize {
    crate::pages::mapped_bytes()
}

/// Returns every jemalloc arena's freed pages to the OS (`arena.<MALLCTL_ARENAS_ALL>.purge`,
/// what Redis's `MEMORY PURGE` does). jemalloc otherwise keeps them for seconds; glibc's malloc
/// returns large frees by itself and needs nothing of the kind. Only with the `jemalloc`
/// feature, in a program whose global allocator is tikv-jemallocator.
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
