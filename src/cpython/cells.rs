//! State that only threads attached to the interpreter touch: every accessor takes the
//! [`Python`] token, so the compiler keeps it interpreter-only (docs/design.md, "The GIL is a
//! type"). With the GIL, that alone serialises the accesses; on a free-threaded interpreter each
//! access also takes the cell's [`FreeThreadedLock`] around a copy of a few words.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{layout, Python};

/// A lock a free-threaded interpreter needs and a GIL build skips (one load and a branch): held
/// only around copies of a few words, never while Python code runs, so it cannot deadlock and a
/// waiter spins.
pub struct FreeThreadedLock(AtomicBool);

impl Default for FreeThreadedLock {
    fn default() -> Self {
        Self::new()
    }
}

impl FreeThreadedLock {
    pub const fn new() -> Self {
        FreeThreadedLock(AtomicBool::new(false))
    }

    /// `f`, alone among the lock's holders (on a GIL build the GIL already makes it so).
    #[inline(always)]
    pub fn with<R>(&self, _py: Python<'_>, f: impl FnOnce() -> R) -> R {
        if !layout::free_threaded() {
            return f();
        }
        while self.0.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            std::hint::spin_loop();
        }
        let result = f();
        self.0.store(false, Ordering::Release);
        result
    }
}

/// A value computed once, in the interpreter's world, that never blocks. (A blocking once-cell
/// could deadlock: its initialiser runs Python code, which may hand the GIL to a thread that then
/// waits on the cell while holding the GIL.) Two threads may both compute it; the first to finish
/// wins and the other's value is dropped unused, so values must be cheap to discard (leaked
/// duplicates of immortal objects at worst).
pub struct GilCell<T: Copy> {
    value: UnsafeCell<Option<T>>,
    lock: FreeThreadedLock,
}

// SAFETY: every access takes a `Python` token and runs under the cell's lock, which the GIL
// makes redundant and a free-threaded interpreter takes.
unsafe impl<T: Copy> Sync for GilCell<T> {}

impl<T: Copy> Default for GilCell<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy> GilCell<T> {
    pub const fn new() -> Self {
        GilCell { value: UnsafeCell::new(None), lock: FreeThreadedLock::new() }
    }

    /// The value, computing it with `init` the first time.
    pub fn get_or_try_init<E>(
        &self,
        py: Python<'_>,
        init: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        // SAFETY: under the lock (or the GIL); a copy is read.
        if let Some(value) = self.lock.with(py, || unsafe { *self.value.get() }) {
            return Ok(value);
        }
        let value = init()?;
        // `init` ran Python code: another thread may have filled the cell meanwhile; it stays.
        // SAFETY: under the lock (or the GIL); no reference into the cell lives.
        Ok(self.lock.with(py, || unsafe { *(*self.value.get()).get_or_insert(value) }))
    }
}

/// A value that lives in the interpreter's world and changes (what dlpx has learnt of a
/// producer). A copy is read, so no reference into the cell lives while Python code runs.
pub struct GilVar<T: Copy> {
    value: UnsafeCell<T>,
    lock: FreeThreadedLock,
}

// SAFETY: as for `GilCell`.
unsafe impl<T: Copy> Sync for GilVar<T> {}

impl<T: Copy> GilVar<T> {
    pub const fn new(value: T) -> Self {
        GilVar { value: UnsafeCell::new(value), lock: FreeThreadedLock::new() }
    }

    #[inline]
    pub fn get(&self, py: Python<'_>) -> T {
        // SAFETY: under the lock (or the GIL); a copy is read.
        self.lock.with(py, || unsafe { *self.value.get() })
    }

    pub fn set(&self, py: Python<'_>, value: T) {
        // SAFETY: under the lock (or the GIL); no reference into the cell lives.
        self.lock.with(py, || unsafe { *self.value.get() = value })
    }
}
