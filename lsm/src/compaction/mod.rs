//! Leveled compaction: the policy ([`picker`]) decides, the job ([`job`]) rewrites.
//!
//! L0 tables overlap; L1…L6 are each one sorted run. A level is due when its score (L0: file
//! count / trigger; deeper: bytes / target) reaches 1; the highest score goes first. L0→L1 takes
//! every L0 table and the L1 tables they overlap; Ln→Ln+1 takes one table, round robin, and its
//! overlaps; a table with nothing below is moved, not rewritten.

mod filter;
pub(crate) mod job;
pub mod picker;

pub use filter::{CompactionFilter, Decision};
pub use picker::{Choice, PickerConfig};
