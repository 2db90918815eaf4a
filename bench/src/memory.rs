//! The process's memory, as every benchmark reports it: resident set (split into anonymous
//! memory and mapped files), its peak so far, and the engine's own accounting of memtables,
//! block cache and open tables' indexes and filters, and what the allocator counts as allocated
//! (the rest of the anonymous memory, beyond the engine's own mappings, is what the allocator
//! holds free or loses to fragmentation).

use serde::Serialize;

/// Memory in MiB when a benchmark ended.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Memory {
    /// Resident set size now.
    pub rss_mb: f64,
    /// Of it, anonymous memory (heap: memtables, block cache, index and filter blocks).
    pub anon_mb: f64,
    /// Of it, pages of mapped files (tables read with `--mmap_read`, the binary).
    pub file_mb: f64,
    /// The largest resident set since the process started (`VmHWM`; what `time -v` reports as
    /// maximum resident set size).
    pub peak_mb: f64,
    /// The engine's memtables, active and frozen.
    pub memtables_mb: Option<f64>,
    /// The engine's block cache.
    pub block_cache_mb: Option<f64>,
    /// The open tables' decoded indexes and bloom filters.
    pub tables_mb: Option<f64>,
    /// Bytes allocated and not freed, as the global allocator counts them (`None`: it does not
    /// say).
    pub allocated_mb: Option<f64>,
    /// Of the allocator's memory beyond `allocated_mb`: the free space inside its pages that
    /// hold live allocations, and its own metadata (jemalloc only).
    pub slab_free_mb: Option<f64>,
    pub allocator_metadata_mb: Option<f64>,
    /// The size of the engine's own anonymous mappings (memtables' value chunks, point indexes,
    /// blooms), which are outside the allocator; a page of them is resident once touched.
    pub mapped_mb: f64,
}

impl Memory {
    /// Reads `/proc/self/status` (zeros where it is missing) and, with a database, its memory
    /// accounting.
    pub fn measure(db: Option<&lsm::Db>) -> Memory {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let mut m = parse_status(&status);
        m.allocated_mb = allocated_bytes().map(|b| mib(b as u64));
        #[cfg(feature = "jemalloc")]
        if let (Some((active, metadata)), Some(allocated)) =
            (lsm::allocator::jemalloc_active_and_metadata(), lsm::allocator::jemalloc_allocated())
        {
            m.slab_free_mb = Some(mib(active.saturating_sub(allocated) as u64));
            m.allocator_metadata_mb = Some(mib(metadata as u64));
        }
        m.mapped_mb = mib(lsm::allocator::mapped_bytes() as u64);
        if let Some(db) = db {
            let stats = db.stats();
            let (cache, tables) = (stats.block_cache_bytes, stats.table_readers_bytes);
            m.block_cache_mb = Some(mib(cache as u64));
            // What the engine holds besides blocks, table metadata and rows: its memtables.
            let rest = db.memory_usage().saturating_sub(cache + tables + stats.row_cache_bytes);
            m.memtables_mb = Some(mib(rest as u64));
            m.tables_mb = Some(mib(tables as u64));
        }
        m
    }

    /// One line for the text report.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "rss {:.1} MB (anon {:.1}, file {:.1}), peak {:.1} MB",
            self.rss_mb, self.anon_mb, self.file_mb, self.peak_mb
        );
        if let (Some(mem), Some(cache)) = (self.memtables_mb, self.block_cache_mb) {
            s.push_str(&format!("; memtables {mem:.1} MB, block cache {cache:.1} MB"));
        }
        if let Some(tables) = self.tables_mb {
            s.push_str(&format!(", table indexes and filters {tables:.1} MB"));
        }
        if let Some(allocated) = self.allocated_mb {
            s.push_str(&format!("; allocated {allocated:.1} MB + mapped by the engine {:.1} MB", self.mapped_mb));
        }
        if let (Some(free), Some(meta)) = (self.slab_free_mb, self.allocator_metadata_mb) {
            s.push_str(&format!("; jemalloc: {free:.1} MB free in used pages, metadata {meta:.1} MB"));
        }
        s
    }
}

/// What this program's global allocator counts as allocated.
fn allocated_bytes() -> Option<usize> {
    #[cfg(feature = "jemalloc")]
    return lsm::allocator::jemalloc_allocated();
    #[cfg(all(target_env = "gnu", not(feature = "jemalloc")))]
    return Some(lsm::allocator::glibc_allocated());
    #[allow(unreachable_code)]
    None
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

/// The RSS fields of a `/proc/<pid>/status` text.
fn parse_status(status: &str) -> Memory {
    let kb = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0.0, |k| mib(k * 1024))
    };
    Memory {
        rss_mb: kb("VmRSS:"),
        anon_mb: kb("RssAnon:"),
        file_mb: kb("RssFile:") + kb("RssShmem:"),
        peak_mb: kb("VmHWM:"),
        memtables_mb: None,
        block_cache_mb: None,
        tables_mb: None,
        allocated_mb: None,
        slab_free_mb: None,
        allocator_metadata_mb: None,
        mapped_mb: 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_read_in_mib() {
        let status = "Name:\tdb_bench\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nRssAnon:\t   81920 kB\n\
                      RssFile:\t   19456 kB\nRssShmem:\t    1024 kB\n";
        let m = parse_status(status);
        assert_eq!((m.rss_mb, m.anon_mb, m.file_mb, m.peak_mb), (100.0, 80.0, 20.0, 200.0));
        assert_eq!(parse_status("").rss_mb, 0.0);
    }

    #[test]
    fn this_process_has_a_resident_set_and_a_peak() {
        let m = Memory::measure(None);
        if std::path::Path::new("/proc/self/status").exists() {
            assert!(m.rss_mb > 0.0 && m.peak_mb >= m.rss_mb, "{m:?}");
            assert!((m.anon_mb + m.file_mb - m.rss_mb).abs() < 1.0, "{m:?}");
        }
    }
}
