//! Where the VM lives between scripts, and the guard of whoever runs Lua on it.
//!
//! The VM is *taken out* of its slot whole and put back when the guard drops, instead of being
//! locked in place, so the guard owns what it holds (`'static`): a connection that runs a
//! pipeline of scripts keeps its guard in its [`crate::exec::Session`] from one script to the
//! next (see [`crate::scripting::call`]) and takes the VM once per run of scripts rather than
//! once per script. Two executor threads serving two pipelines of scripts then hand the VM over
//! once per run, not twice per script (each hand-over a sleep and a wake-up of a thread): at
//! P16 a fifth to a third less server CPU per script than a VM locked per script. A thread
//! that finds the VM taken polls for it briefly before it sleeps ([`SPIN_FOR`]), which turns
//! most hand-overs between short scripts into no sleep at all.
//!
//! Whoever holds the guard never *waits* for a key stripe (see `call.rs`), and a session lets
//! go of its guard before any command but a script runs, so a guard kept between scripts can
//! never be part of a deadlock.
//!
//! **Spare VMs.** EVAL scripts that run on a connection's own task (see `call.rs`) must never
//! wait, for the VM either: they take one of the [`Spares`], VMs that hold only compiled EVAL
//! scripts (no function libraries, whose local state their functions share, so FCALL stays on
//! the one VM). A spare is made when none is idle, up to one per core, and dropped when it
//! comes back after a `SCRIPT FLUSH` (a generation number tells). What a script can leave behind
//! in a VM for later scripts — `math.random`'s sequence, `cjson`'s settings — all VMs of a
//! generation share ([`super::Shared`]); globals and library tables are read-only.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{Shared, Vm};

/// How long a thread that wants the VM polls for it before it sleeps. A script of a few
/// commands holds the VM for 10–20 µs, and a sleep and a wake-up cost about as much again
/// (two context switches); polling that briefly catches most hand-overs awake. Measured with
/// EVALSHA from 50 clients at `-P 1` on two cores: an INCR + EXPIRE script 44K → 55K calls/s
/// (server CPU 31 → 27 µs a call); a lone GET script, whose turns are shorter than the poll,
/// 110K → 105K (the poll takes CPU from the connections' threads); polling 30 or 100 µs
/// gained less and cost the GET script more.
const SPIN_FOR: Duration = Duration::from_micros(15);

/// The VM's home: `None` while someone holds it.
#[derive(Debug)]
pub(crate) struct VmSlot {
    vm: Mutex<Home>,
    returned: Condvar,
}

/// What the slot's lock guards.
#[derive(Debug)]
struct Home {
    vm: Option<Box<Vm>>,
    /// Threads asleep until the VM comes back: a guard that returns it wakes one only if there
    /// is one (a wake-up is a system call even when nobody sleeps).
    sleepers: usize,
}

impl VmSlot {
    pub(crate) fn new(vm: Vm) -> Arc<Self> {
        Arc::new(VmSlot { vm: Mutex::new(Home { vm: Some(Box::new(vm)), sleepers: 0 }), returned: Condvar::new() })
    }

    /// Takes the VM, waiting while someone else holds it: for [`SPIN_FOR`] by polling, then
    /// asleep until it comes back.
    pub(crate) fn take(self: &Arc<Self>) -> VmGuard {
        let until = Instant::now() + SPIN_FOR;
        while Instant::now() < until {
            if let Some(guard) = self.try_take() {
                return guard;
            }
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        }
        let mut home = self.vm.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(vm) = home.vm.take() {
                return VmGuard { home: Owner::Slot(Arc::clone(self)), vm: Some(vm) };
            }
            home.sleepers += 1;
            home = self.returned.wait(home).unwrap_or_else(|e| e.into_inner());
            home.sleepers -= 1;
        }
    }

    /// Takes the VM if nobody holds it.
    pub(crate) fn try_take(self: &Arc<Self>) -> Option<VmGuard> {
        let vm = self.vm.lock().unwrap_or_else(|e| e.into_inner()).vm.take()?;
        Some(VmGuard { home: Owner::Slot(Arc::clone(self)), vm: Some(vm) })
    }
}

/// The spare VMs (see the module docs).
#[derive(Debug)]
pub(crate) struct Spares {
    idle: Mutex<Idle>,
    /// Most spares alive at once.
    max: usize,
}

#[derive(Debug)]
struct Idle {
    /// Spares nobody holds, with their generation.
    vms: Vec<(u64, Box<Vm>)>,
    /// Spares alive (idle or held).
    made: usize,
    /// Bumped by `SCRIPT FLUSH`: a spare of an older generation is dropped, not reused.
    generation: u64,
    /// What the VMs of this generation share.
    shared: Shared,
}

impl Spares {
    pub(crate) fn new(max: usize, shared: Shared) -> Arc<Self> {
        Arc::new(Spares { idle: Mutex::new(Idle { vms: Vec::new(), made: 0, generation: 0, shared }), max })
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An idle spare, or a new one if fewer than the most are alive; `None` (never waiting)
    /// if all are held or a new one cannot start.
    pub(crate) fn try_take(self: &Arc<Self>) -> Option<VmGuard> {
        let mut idle = self.idle();
        let generation = idle.generation;
        while let Some((made_in, vm)) = idle.vms.pop() {
            if made_in == generation {
                return Some(VmGuard { home: Owner::Spare(Arc::clone(self), generation), vm: Some(vm) });
            }
            idle.made -= 1;
        }
        if idle.made >= self.max {
            return None;
        }
        idle.made += 1;
        let shared = idle.shared.clone();
        drop(idle);
        match Vm::new(Arc::default(), &shared) {
            Ok(vm) => Some(VmGuard { home: Owner::Spare(Arc::clone(self), generation), vm: Some(Box::new(vm)) }),
            Err(e) => {
                tracing::warn!(target: "shale::scripting", error = %e, "a spare Lua VM failed to start");
                self.idle().made -= 1;
                None
            }
        }
    }

    /// `SCRIPT FLUSH`: idle spares go now, held ones when they come back; new ones share
    /// `shared`.
    pub(crate) fn flush(&self, shared: Shared) {
        let mut idle = self.idle();
        idle.generation += 1;
        idle.shared = shared;
        idle.made -= idle.vms.len();
        idle.vms.clear();
    }

    /// Bytes the idle spares' Lua states use.
    pub(crate) fn memory(&self) -> usize {
        self.idle().vms.iter().map(|(_, vm)| vm.lua.used_memory()).sum()
    }

    fn give_back(&self, generation: u64, vm: Box<Vm>) {
        let mut idle = self.idle();
        if generation == idle.generation {
            idle.vms.push((generation, vm));
        } else {
            idle.made -= 1;
            drop(idle);
            drop(vm);
        }
    }
}

/// Where a guard's VM goes back to.
enum Owner {
    /// The one VM's slot.
    Slot(Arc<VmSlot>),
    /// The spares, as of the generation it was taken in.
    Spare(Arc<Spares>, u64),
}

/// The VM, taken out of its slot (or the spares); it goes back when this drops (a panic too).
pub(crate) struct VmGuard {
    home: Owner,
    vm: Option<Box<Vm>>,
}

impl VmGuard {
    /// True for a spare VM (EVAL scripts only).
    pub(crate) fn is_spare(&self) -> bool {
        matches!(self.home, Owner::Spare(..))
    }
}

impl std::fmt::Debug for VmGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmGuard").finish_non_exhaustive()
    }
}

impl Deref for VmGuard {
    type Target = Vm;
    fn deref(&self) -> &Vm {
        self.vm.as_deref().expect("a guard holds its VM until it drops")
    }
}

impl DerefMut for VmGuard {
    fn deref_mut(&mut self) -> &mut Vm {
        self.vm.as_deref_mut().expect("a guard holds its VM until it drops")
    }
}

impl Drop for VmGuard {
    fn drop(&mut self) {
        let Some(vm) = self.vm.take() else { return };
        match &self.home {
            Owner::Slot(slot) => {
                let mut home = slot.vm.lock().unwrap_or_else(|e| e.into_inner());
                home.vm = Some(vm);
                let sleepers = home.sleepers;
                drop(home);
                if sleepers > 0 {
                    slot.returned.notify_one();
                }
            }
            Owner::Spare(spares, generation) => spares.give_back(*generation, vm),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vm_goes_home_when_its_guard_drops_and_waiters_get_it() {
        let slot = VmSlot::new(Vm::new(Arc::default(), &Shared::default()).unwrap());
        let guard = slot.take();
        assert!(slot.try_take().is_none(), "held by the guard");
        let waiter = {
            let slot = Arc::clone(&slot);
            std::thread::spawn(move || {
                let vm = slot.take();
                vm.scripts.len()
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!waiter.is_finished(), "the waiter waits while the guard lives");
        drop(guard);
        assert_eq!(waiter.join().unwrap(), 0);
        assert!(slot.try_take().is_some(), "back home after the waiter's guard dropped");
    }

    #[test]
    fn spares_are_taken_without_waiting_up_to_the_most_and_replaced_after_a_flush() {
        let spares = Spares::new(2, Shared::default());
        let (a, b) = (spares.try_take().unwrap(), spares.try_take().unwrap());
        assert!(a.is_spare() && spares.try_take().is_none(), "two at most, and no waiting");
        let a_vm: *const Vm = &*a;
        drop(a);
        let again = spares.try_take().expect("the idle one, again");
        assert!(std::ptr::eq(&*again, a_vm));
        spares.flush(Shared::default());
        assert!(spares.try_take().is_none(), "both still held: none may be made yet");
        drop(again);
        let fresh = spares.try_take().expect("the stale one was dropped, a new one made");
        drop(b);
        assert!(spares.try_take().is_some());
        drop(fresh);
        let idle = spares.idle();
        assert_eq!((idle.vms.len(), idle.made), (2, 2), "the two of the current generation, idle");
    }

    #[test]
    fn a_panic_while_holding_the_vm_returns_it() {
        let slot = VmSlot::new(Vm::new(Arc::default(), &Shared::default()).unwrap());
        let held = Arc::clone(&slot);
        let result = std::thread::spawn(move || {
            let _vm = held.take();
            panic!("a script's command panicked");
        })
        .join();
        assert!(result.is_err());
        assert!(slot.try_take().is_some());
    }
}
