//! Memory a memtable holds for its whole life, taken from the OS as an anonymous mapping
//! instead of from the global allocator, so that dropping the memtable gives it back at once.
//!
//! A memtable's value chunks, bloom filter and point index are tens of megabytes that are all
//! freed together when its flush lands. From the allocator, they would not go back to the OS:
//! glibc's malloc raises its mmap threshold to the largest block freed so far (up to 32 MiB), so
//! after the first flush it carves every later chunk out of its heaps, and a heap keeps the
//! pages of freed blocks mapped (measured with 10 M random writes and a 64 MiB write buffer:
//! about 100 MB held free by malloc after the fills, the process's peak 248 MB where RocksDB's
//! was 203 MB). A mapping is unmapped when dropped, whatever allocator the program uses.
//!
//! The kernel hands out mapped pages zeroed and makes them resident when first touched: a
//! point index or a bloom filter sized for a full memtable costs only the pages written so far,
//! and all-zero is each one's empty state.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize};

/// Bytes in live mappings of this module, over the whole process (see
/// [`crate::allocator::mapped_bytes`]).
static MAPPED: AtomicUsize = AtomicUsize::new(0);

/// Bytes this process's engines hold in mappings of their own rather than from the allocator.
pub(crate) fn mapped_bytes() -> usize {
    MAPPED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Below this many bytes a block comes from the allocator: a mapping costs two system calls
/// and rounds up to whole pages, which a small memtable (tests, tiny write buffers) should not pay.
const MIN_MAPPED: usize = 64 * 1024;

/// Element types whose all-zero bit pattern is a valid value (what a fresh mapping holds).
///
/// # Safety
/// An implementor must be valid when every byte of it is zero, and need no drop.
pub(crate) unsafe trait Zeroed: Sized {}
// SAFETY: all three are plain integers (atomics of them), valid at zero and without drop glue.
unsafe impl Zeroed for u8 {}
unsafe impl Zeroed for AtomicU64 {}
unsafe impl Zeroed for AtomicUsize {}

/// `len` zeroed elements of `T`, in an anonymous mapping of their own (or from the allocator
/// when small, or when the mapping fails), freed when dropped.
pub(crate) struct Pages<T: Zeroed> {
    ptr: NonNull<T>,
    len: usize,
    mapped: bool,
}

// SAFETY: `Pages` owns its memory like a `Box<[T]>`: sending or sharing it is sending or
// sharing the `T`s.
unsafe impl<T: Zeroed + Send> Send for Pages<T> {}
unsafe impl<T: Zeroed + Sync> Sync for Pages<T> {}

impl<T: Zeroed> Pages<T> {
    /// `len` zeroed elements (at least one). `populate` asks the kernel to make every page
    /// resident now, in one call, for memory that is about to be written from end to end.
    pub(crate) fn zeroed(len: usize, populate: bool) -> Pages<T> {
        let len = len.max(1);
        let bytes = len.checked_mul(std::mem::size_of::<T>()).expect("a block's size fits in usize");
        if bytes >= MIN_MAPPED {
            if let Some(ptr) = map(bytes, populate) {
                MAPPED.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
                return Pages { ptr: ptr.cast(), len, mapped: true };
            }
        }
        let layout = std::alloc::Layout::array::<T>(len).expect("a block's size fits in isize");
        // SAFETY: the layout's size is not zero (`len >= 1` and `T` is not zero-sized: it is one
        // of the integer types `Zeroed` is implemented for).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr.cast::<T>()).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Pages { ptr, len, mapped: false }
    }

    /// The first element, for code that writes through raw pointers (the value arena).
    pub(crate) fn as_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// Bytes the block takes.
    pub(crate) fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// Makes every page of a mapped block resident and writable now, as a write to each would,
    /// without changing what the block holds (`MADV_POPULATE_WRITE`, Linux 5.14+). True if the
    /// kernel did; a block from the allocator, or an older kernel, is left as it is.
    ///
    /// This is for a block another thread fills in random order and reads before it writes (a
    /// point index): a page read first is the shared zero page, and the write that follows
    /// replaces it, which costs the writer a second fault and a TLB flush on every CPU the
    /// process runs on. Populated from a background thread, the writer meets no fault at all.
    pub(crate) fn populate(&self) -> bool {
        if !self.mapped {
            return false;
        }
        // SAFETY: the mapping made in `zeroed`, with its length; MADV_POPULATE_WRITE changes
        // no byte of it (it faults pages in as writable, keeping the data already there).
        unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.bytes(), libc::MADV_POPULATE_WRITE) == 0 }
    }
}

/// An anonymous private mapping of `bytes`, or `None` if the kernel refuses one.
fn map(bytes: usize, populate: bool) -> Option<NonNull<u8>> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | if populate { libc::MAP_POPULATE } else { 0 };
    // SAFETY: a fresh anonymous mapping at an address the kernel picks; nothing aliases it.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        return None;
    }
    NonNull::new(p.cast())
}

impl<T: Zeroed> std::ops::Deref for Pages<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised (zeroed, and `T` is valid at zero) elements owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Zeroed> Drop for Pages<T> {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: the mapping made in `zeroed` with this length, unmapped once. A failure
            // (which only an invalid range could cause) would leave the pages mapped, not corrupt.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.bytes()) };
            MAPPED.fetch_sub(self.bytes(), std::sync::atomic::Ordering::Relaxed);
        } else {
            let layout = std::alloc::Layout::array::<T>(self.len).expect("allocated with it");
            // SAFETY: allocated in `zeroed` with this layout, freed once; `T` has no drop.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), layout) };
        }
    }
}

impl<T: Zeroed> std::fmt::Debug for Pages<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pages").field("len", &self.len).field("mapped", &self.mapped).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// Whether `[start, start + len)` is in one of this process's mappings, by `/proc/self/maps`.
    fn is_mapped(start: usize, len: usize) -> bool {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines().any(|l| {
            let range = l.split_whitespace().next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            let (a, b) = (usize::from_str_radix(a, 16).unwrap(), usize::from_str_radix(b, 16).unwrap());
            a <= start && start + len <= b
        })
    }

    #[test]
    fn a_large_block_is_its_own_zeroed_writable_mapping() {
        let p: Pages<AtomicU64> = Pages::zeroed(1 << 20, false);
        assert!(p.mapped);
        assert_eq!(p.len(), 1 << 20);
        assert!(p.iter().step_by(4099).all(|w| w.load(Ordering::Relaxed) == 0));
        p[12345].store(7, Ordering::Relaxed);
        assert_eq!(p[12345].load(Ordering::Relaxed), 7);
        assert!(is_mapped(p.as_ptr() as usize, p.bytes()));
    }

    #[test]
    fn a_small_block_comes_from_the_allocator_zeroed() {
        let p: Pages<u8> = Pages::zeroed(100, false);
        assert!(!p.mapped);
        assert!(p.iter().all(|&b| b == 0));
        let q: Pages<AtomicUsize> = Pages::zeroed(0, true);
        assert_eq!((q.len(), q[0].load(Ordering::Relaxed)), (1, 0));
    }

    /// Pages of `p` the kernel has resident, by `mincore`.
    fn resident_pages<T: Zeroed>(p: &Pages<T>) -> usize {
        let pages = p.bytes().div_ceil(4096);
        let mut vec = vec![0u8; pages];
        // SAFETY: `p`'s own page-aligned mapping and a vector of one byte per page of it.
        let rc = unsafe { libc::mincore(p.as_ptr().cast(), p.bytes(), vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 == 1).count()
    }

    #[test]
    fn populating_a_block_makes_it_resident_and_keeps_its_contents() {
        let p: Pages<AtomicUsize> = Pages::zeroed(1 << 17, false);
        assert!(p.mapped);
        let pages = p.bytes() / 4096;
        assert!(resident_pages(&p) < pages / 2, "a fresh mapping has no pages yet");
        p[1000].store(42, Ordering::Relaxed);
        assert!(p.populate());
        assert_eq!(resident_pages(&p), pages);
        assert_eq!(p[1000].load(Ordering::Relaxed), 42);
        assert!(p.iter().enumerate().all(|(i, w)| i == 1000 || w.load(Ordering::Relaxed) == 0));
        let small: Pages<u8> = Pages::zeroed(100, false);
        assert!(!small.populate(), "a block from the allocator is not a mapping of its own");
    }

    #[test]
    fn a_populated_block_is_resident_and_zeroed() {
        let p: Pages<u8> = Pages::zeroed(256 * 1024, true);
        assert!(p.mapped && p.iter().all(|&b| b == 0));
        // SAFETY: the block's own memory, written within its length.
        unsafe { p.as_ptr().add(256 * 1024 - 1).write(9) };
        assert_eq!(p[256 * 1024 - 1], 9);
    }
}
