//! The execution context's keyspace events: what a command records for
//! `notify-keyspace-events` while it runs (see [`crate::services::notifications`]).

use bytes::Bytes;

use super::ExecContext;
use crate::services::notifications::{self, KeyEvent};

impl ExecContext {
    /// Sets the notification classes to record events of (`notify-keyspace-events`) for a
    /// command; `reading` if it is a read-only one (whose misses are `keymiss` events).
    pub fn set_notify_flags(&self, flags: u32, reading: bool) {
        self.notify_flags.set(flags);
        self.reading.set(reading);
    }

    /// True if events of `class` are recorded.
    pub fn notifies(&self, class: u32) -> bool {
        notifications::enabled(self.notify_flags.get(), class)
    }

    /// Records that `key` of logical database `db` had `event` (of `class`), if that class is
    /// published.
    pub fn notify(&self, class: u32, event: &'static str, db: u32, key: &[u8]) {
        if self.notifies(class) {
            self.events.borrow_mut().push(KeyEvent { class, event, db, key: Bytes::copy_from_slice(key) });
        }
    }

    /// How many events are recorded so far (for [`ExecContext::notify_each`]).
    pub fn event_mark(&self) -> usize {
        self.events.borrow().len()
    }

    /// Takes back the events recorded after `mark` (to record others before them).
    pub fn events_since(&self, mark: usize) -> Vec<KeyEvent> {
        let mut events = self.events.borrow_mut();
        let mark = mark.min(events.len());
        events.drain(mark..).collect()
    }

    /// Records `events` again (see [`ExecContext::events_since`]).
    pub fn restore_events(&self, mut events: Vec<KeyEvent>) {
        self.events.borrow_mut().append(&mut events);
    }

    /// Records `event` for each of `keys` of `db` after a write that created some of them,
    /// with each key's `new` event (recorded by that write, after `mark`) right before its own,
    /// as Redis orders them when one command sets several keys (MSET).
    pub fn notify_each<'k>(
        &self,
        mark: usize,
        (class, event): (u32, &'static str),
        db: u32,
        keys: impl Iterator<Item = &'k Bytes>,
    ) {
        let mut created = self.events_since(mark);
        let mut events = self.events.borrow_mut();
        for key in keys {
            if let Some(i) = created.iter().position(|e| e.db == db && e.key == key) {
                events.push(created.remove(i));
            }
            if notifications::enabled(self.notify_flags.get(), class) {
                events.push(KeyEvent { class, event, db, key: key.clone() });
            }
        }
        events.append(&mut created);
    }

    /// Runs `f` with its lookups counted as reads (their misses are `keymiss` events): what a
    /// write command reads its sources with (the STORE variants, COPY), as Redis does.
    pub fn as_read<T>(&self, f: impl FnOnce() -> T) -> T {
        let was = self.reading.replace(true);
        let out = f();
        self.reading.set(was);
        out
    }

    /// Records a read's miss of `key` (event `keymiss`) while a read-only command runs; once per
    /// key and command (a command may look a key up more than once).
    pub fn note_miss(&self, db: u32, key: &[u8]) {
        if !self.reading.get() {
            return;
        }
        let mut events = self.events.borrow_mut();
        if !events.iter().any(|e| e.event == "keymiss" && e.db == db && e.key == key) {
            events.push(KeyEvent {
                class: notifications::KEY_MISS,
                event: "keymiss",
                db,
                key: Bytes::copy_from_slice(key),
            });
        }
    }

    /// The events recorded since the last call (to publish, or to drop when the writes they
    /// describe failed).
    pub fn take_events(&self) -> Vec<KeyEvent> {
        std::mem::take(&mut *self.events.borrow_mut())
    }
}
