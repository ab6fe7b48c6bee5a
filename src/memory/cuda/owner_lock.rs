//! A lock biased towards the one thread that owns what it guards (a thread's cache): the owner
//! enters and leaves with plain stores, no atomic read-modify-write (each costs about as much as
//! the rest of a cache hit), while another thread — a release, a statistics call — is rare and
//! pays for both: it raises a flag, then makes every thread of the process execute a memory
//! barrier (Linux `membarrier`, as userspace RCU does), then waits until the owner is outside.
//!
//! The owner stores `busy`, then reads `drain`; a visitor stores `drain`, then (after the barrier)
//! reads `busy`. The barrier forbids both reads from missing the other's store, so either the
//! visitor sees the owner inside and waits, or the owner sees the visitor and queues behind it
//! on `exclusive`. Where `membarrier` is missing (an old kernel, a sandbox, valgrind, qemu-user)
//! the owner uses a full fence instead; under ThreadSanitizer (`--cfg dlpx_tsan`), which sees
//! neither, it takes `exclusive` as a plain spin lock.

use std::cell::UnsafeCell;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, Ordering};
use std::sync::Once;

pub struct OwnerLock<T> {
    /// The owner is inside.
    busy: AtomicBool,
    /// A visitor wants in: the owner takes `exclusive` instead.
    drain: AtomicBool,
    /// Held by a visitor, or by the owner while a visitor is about.
    exclusive: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: `value` is reached only inside the protocol above, which orders every access.
unsafe impl<T: Send> Sync for OwnerLock<T> {}

/// Whether `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` is registered for this process.
static LIGHT: AtomicBool = AtomicBool::new(false);
static REGISTER: Once = Once::new();

/// Registers the process for expedited memory barriers; call before the first lock is made
/// (an owner that saw `LIGHT` false keeps using full fences, which is always correct).
pub fn prepare() {
    REGISTER.call_once(|| {
        #[cfg(all(target_os = "linux", not(dlpx_tsan)))]
        {
            const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;
            // SAFETY: a syscall with no pointer argument.
            let registered =
                unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) };
            LIGHT.store(registered == 0, Ordering::Release);
        }
    });
}

/// Every thread of the process executes a full memory barrier before this returns.
fn heavy_barrier() {
    #[cfg(all(target_os = "linux", not(dlpx_tsan)))]
    if LIGHT.load(Ordering::Acquire) {
        const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
        // SAFETY: a syscall with no pointer argument.
        if unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) } == 0 {
            return;
        }
        // Registered, yet refused (never seen): an owner's store still leaves its store buffer
        // within microseconds, so wait far longer than that before reading `busy`.
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    fence(Ordering::SeqCst);
}

impl<T> OwnerLock<T> {
    pub fn new(value: T) -> OwnerLock<T> {
        OwnerLock {
            busy: AtomicBool::new(false),
            drain: AtomicBool::new(false),
            exclusive: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// The owner's access.
    ///
    /// # Safety
    /// Only one thread ever calls `owner` on this lock, and never from inside `f` or a visit.
    #[inline]
    pub unsafe fn owner<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        if cfg!(dlpx_tsan) {
            // ThreadSanitizer sees neither membarrier nor fences: a plain spin lock it understands.
            return self.owner_queued(f);
        }
        self.busy.store(true, Ordering::Relaxed);
        match LIGHT.load(Ordering::Relaxed) {
            true => compiler_fence(Ordering::SeqCst),
            false => fence(Ordering::SeqCst),
        }
        if self.drain.load(Ordering::Acquire) {
            self.busy.store(false, Ordering::Release);
            return self.owner_queued(f);
        }
        // SAFETY: `busy` is set and no visitor was about (see the module's comment): no other
        // reference to the value exists until `busy` is cleared.
        let result = f(unsafe { &mut *self.value.get() });
        self.busy.store(false, Ordering::Release);
        result
    }

    #[cold]
    fn owner_queued<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        self.lock_exclusive();
        // SAFETY: `exclusive` is held: visitors wait for it, and the owner is this thread.
        let result = f(unsafe { &mut *self.value.get() });
        self.exclusive.store(false, Ordering::Release);
        result
    }

    fn lock_exclusive(&self) {
        while self.exclusive.swap(true, Ordering::Acquire) {
            std::thread::yield_now();
        }
    }

    fn try_lock_exclusive(&self, tries: usize) -> bool {
        (0..tries).any(|_| {
            let taken = !self.exclusive.swap(true, Ordering::Acquire);
            if !taken {
                std::thread::yield_now();
            }
            taken
        })
    }
}

/// Runs `f` on the value of each of `locks` from a thread that owns none of them, with one
/// barrier for all. When not `patient` (at exit, where an owner may have stopped inside), a
/// lock still held after a while is skipped.
pub fn visit_all<T>(locks: &[&OwnerLock<T>], patient: bool, mut f: impl FnMut(&mut T)) {
    const TRIES: usize = 10_000;
    let held: Vec<&OwnerLock<T>> = locks
        .iter()
        .copied()
        .filter(|lock| match patient {
            true => {
                lock.lock_exclusive();
                true
            }
            false => lock.try_lock_exclusive(TRIES),
        })
        .collect();
    for lock in &held {
        lock.drain.store(true, Ordering::Relaxed);
    }
    heavy_barrier();
    for lock in &held {
        let mut tries = 0;
        while lock.busy.load(Ordering::Acquire) && (patient || tries < TRIES) {
            tries += 1;
            std::thread::yield_now();
        }
        if !lock.busy.load(Ordering::Acquire) {
            // SAFETY: `exclusive` is held and the owner is outside; it stays out (it sees
            // `drain` and queues on `exclusive`) until both are cleared below.
            f(unsafe { &mut *lock.value.get() });
        }
    }
    for lock in held {
        lock.drain.store(false, Ordering::Release);
        lock.exclusive.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn visitors_never_overlap_the_owner() {
        prepare();
        let lock = Arc::new(OwnerLock::new((0u64, 0u64)));
        let owner = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                for _ in 0..200_000 {
                    // SAFETY: this thread is the lock's only owner.
                    unsafe {
                        lock.owner(|v| {
                            v.0 += 1;
                            v.1 += 1;
                        })
                    };
                }
            })
        };
        let mut seen = 0;
        while !owner.is_finished() {
            visit_all(&[&*lock], true, |v| {
                assert_eq!(v.0, v.1, "a visitor saw the owner half way");
                seen = v.0;
            });
        }
        owner.join().unwrap();
        visit_all(&[&*lock], true, |v| assert_eq!(*v, (200_000, 200_000)));
        assert!(seen <= 200_000);
    }
}
