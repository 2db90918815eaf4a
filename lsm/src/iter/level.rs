//! A cursor over one sorted, non-overlapping level: opens one table at a time.

use std::sync::Arc;

use super::InternalIterator;
use crate::key;
use crate::manifest::FileMeta;
use crate::sstable::{Fetch, TableIter};
use crate::Result;

/// Concatenates the tables of a level (ordered by key, not overlapping), opening each lazily.
#[derive(Debug)]
pub struct LevelIter {
    files: Vec<Arc<FileMeta>>,
    index: usize,
    current: Option<TableIter>,
    fetch: Fetch,
}

impl LevelIter {
    /// A cursor over `files`, which must be one level's tables in key order.
    pub fn new(files: Vec<Arc<FileMeta>>, fill_cache: bool) -> Self {
        Self::with_fetch(files, Fetch { fill_cache, cache_only: false })
    }

    /// [`LevelIter::new`] reading blocks (and opening tables) the way `fetch` says.
    pub fn with_fetch(files: Vec<Arc<FileMeta>>, fetch: Fetch) -> Self {
        LevelIter { files, index: 0, current: None, fetch }
    }

    fn open(&mut self, i: usize) -> Result<()> {
        self.index = i;
        self.current = None;
        if let Some(f) = self.files.get(i) {
            self.current = Some(f.table_fetch(self.fetch.cache_only)?.iter_fetch(self.fetch));
        }
        Ok(())
    }

    fn cur_valid(&self) -> bool {
        self.current.as_ref().is_some_and(|c| c.valid())
    }

    fn skip_forward(&mut self) -> Result<()> {
        while !self.cur_valid() && self.index + 1 < self.files.len() {
            self.open(self.index + 1)?;
            if let Some(c) = self.current.as_mut() {
                c.seek_to_first()?;
            }
        }
        if !self.cur_valid() {
            self.current = None;
        }
        Ok(())
    }

    fn skip_backward(&mut self) -> Result<()> {
        while !self.cur_valid() && self.index > 0 && self.current.is_some() {
            self.open(self.index - 1)?;
            if let Some(c) = self.current.as_mut() {
                c.seek_to_last()?;
            }
        }
        if !self.cur_valid() {
            self.current = None;
        }
        Ok(())
    }

    fn guarded(&mut self, f: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        let r = f(self);
        if r.is_err() {
            self.current = None;
        }
        r
    }
}

impl InternalIterator for LevelIter {
    fn valid(&self) -> bool {
        self.cur_valid()
    }
    fn key(&self) -> &[u8] {
        self.current.as_ref().map_or(&[], |c| c.key())
    }
    fn value(&self) -> &[u8] {
        self.current.as_ref().map_or(&[], |c| c.value())
    }
    fn value_bytes(&self) -> bytes::Bytes {
        self.current.as_ref().map(|c| c.value_bytes()).unwrap_or_default()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.guarded(|s| {
            s.open(0)?;
            if let Some(c) = s.current.as_mut() {
                c.seek_to_first()?;
            }
            s.skip_forward()
        })
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.guarded(|s| {
            s.open(s.files.len().saturating_sub(1))?;
            if let Some(c) = s.current.as_mut() {
                c.seek_to_last()?;
            }
            s.skip_backward()
        })
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.guarded(|s| {
            // First file whose largest key is >= target.
            let i = s.files.partition_point(|f| key::compare(&f.largest, target).is_lt());
            if i >= s.files.len() {
                s.current = None;
                return Ok(());
            }
            s.open(i)?;
            if let Some(c) = s.current.as_mut() {
                c.seek(target)?;
            }
            s.skip_forward()
        })
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        self.guarded(|s| {
            // Last file whose smallest key is <= target.
            let i = s.files.partition_point(|f| key::compare(&f.smallest, target).is_le());
            if i == 0 {
                s.current = None;
                return Ok(());
            }
            s.open(i - 1)?;
            if let Some(c) = s.current.as_mut() {
                c.seek_for_prev(target)?;
            }
            s.skip_backward()
        })
    }
    fn next(&mut self) -> Result<()> {
        self.guarded(|s| {
            if let Some(c) = s.current.as_mut() {
                c.next()?;
            }
            s.skip_forward()
        })
    }
    fn prev(&mut self) -> Result<()> {
        self.guarded(|s| {
            if let Some(c) = s.current.as_mut() {
                c.prev()?;
            }
            s.skip_backward()
        })
    }
}
