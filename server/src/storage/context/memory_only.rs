//! The execution context's memory-only mode: a command tried on a connection's own (async)
//! thread reads memory only, and anything that would need the disk (or too long a walk) makes
//! its outcome void, so that it runs again on an executor thread.

use super::{ExecContext, MEMORY_ONLY_STEPS};

impl ExecContext {
    /// Starts memory-only mode: reads that would need disk I/O fail instead, and
    /// [`ExecContext::end_memory_only`] tells whether any did.
    pub fn begin_memory_only(&self) {
        self.memory_only.set(true);
        self.missed.set(false);
        self.memory_steps.set(MEMORY_ONLY_STEPS);
    }

    /// Counts one record a range read steps over: false (and the command is void) once a
    /// memory-only attempt has stepped over [`MEMORY_ONLY_STEPS`] of them, so a long range
    /// (SMEMBERS of a large set that memory holds whole) runs on an executor thread rather
    /// than keep a connection's thread, and every connection it serves, for milliseconds.
    pub(in crate::storage) fn step(&self) -> bool {
        if !self.memory_only.get() {
            return true;
        }
        match self.memory_steps.get() {
            0 => {
                self.missed.set(true);
                false
            }
            n => {
                self.memory_steps.set(n - 1);
                true
            }
        }
    }

    /// Whether a walk of `n` records fits what a memory-only attempt may still step over
    /// (always, outside memory-only mode); if not, the command is void at once rather than
    /// after stepping over as many as it may (see [`ExecContext::step`]).
    pub(in crate::storage) fn may_step(&self, n: usize) -> bool {
        if self.memory_only.get() && n > self.memory_steps.get() {
            self.missed.set(true);
            return false;
        }
        true
    }

    /// True in memory-only mode (a connection's task runs the command).
    pub fn memory_only(&self) -> bool {
        self.memory_only.get()
    }

    /// Makes the command running in memory-only mode void, for a reason of its own (a script
    /// that would have to wait, or names a key it did not declare): it runs again where it
    /// may block. Outside memory-only mode it does nothing.
    pub fn void(&self) {
        if self.memory_only.get() {
            self.missed.set(true);
        }
    }

    /// True if the command running in memory-only mode needed the disk (its outcome is void).
    pub fn voided(&self) -> bool {
        self.memory_only.get() && self.missed.get()
    }

    /// Ends memory-only mode; true if some read could not be answered from memory, so the
    /// command's outcome is void and it must run again where it may block.
    pub fn end_memory_only(&self) -> bool {
        self.memory_only.set(false);
        self.missed.replace(false)
    }

    /// Notes the outcome of an engine read: a memory-only read that needed the disk voids the
    /// command (see [`ExecContext::end_memory_only`]).
    pub(super) fn noted<T>(&self, read: lsm::Result<T>) -> lsm::Result<T> {
        if matches!(read, Err(lsm::Error::WouldBlock)) {
            self.missed.set(true);
        }
        read
    }

    /// A command tried in memory-only mode that takes a raw engine cursor runs again on an
    /// executor thread whatever its walk found (the cursor reads memory only, but its errors
    /// are not always the command's reply); [`ExecContext::range`] notes its misses instead.
    /// Work too long for a connection's thread (rewriting a whole collection) voids it the
    /// same way. True if the context was in memory-only mode.
    pub(in crate::storage) fn void_memory_only(&self) -> bool {
        let memory_only = self.memory_only.get();
        if memory_only {
            self.missed.set(true);
        }
        memory_only
    }
}
