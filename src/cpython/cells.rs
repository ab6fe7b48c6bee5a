//! State that only threads attached to the interpreter touch: every accessor takes the
//! [`Python`] token, so the compiler keeps it interpreter-only (docs/design.md, "The GIL is a
//! type"). With the GIL, that alone serialises the accesses; on a free-threaded interpreter a
//! reader copies the value under a sequence count ([`SeqLock`]), writing nothing shared, and
//! writers (rare: dlpx learning something) take the cell's [`FreeThreadedLock`].

use std::cell::UnsafeCell;
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};

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

/// A few words that many threads read and few write. A free-threaded reader copies them between
/// two reads of an even sequence count and retries when a writer was inside (odd, or changed):
/// it writes no shared cache line, so readers on all cores never wait for each other. A GIL build
/// reads directly (one load and a branch, as before).
pub struct SeqLock<T: Copy> {
    sequence: AtomicUsize,
    value: UnsafeCell<T>,
    writers: FreeThreadedLock,
}

// SAFETY: readers take a `Python` token and copy under the sequence count (the GIL serialises
// them on a GIL build); writers take the token and the writers' lock.
unsafe impl<T: Copy> Sync for SeqLock<T> {}

impl<T: Copy> SeqLock<T> {
    pub const fn new(value: T) -> Self {
        SeqLock { sequence: AtomicUsize::new(0), value: UnsafeCell::new(value), writers: FreeThreadedLock::new() }
    }

    /// A consistent copy of the value.
    #[inline(always)]
    pub fn read(&self, py: Python<'_>) -> T {
        if !layout::free_threaded() {
            // SAFETY: the GIL serialises this read with every write.
            return unsafe { *self.value.get() };
        }
        self.read_racing(py)
    }

    /// [`SeqLock::read`] where writers may run meanwhile. Not inlined: merged into the caller,
    /// its word-by-word copy turned the GIL build's plain copy into byte loads too (+90
    /// instructions on `from_dlpack(tvm_ffi)`).
    #[inline(never)]
    fn read_racing(&self, py: Python<'_>) -> T {
        // SAFETY: the pointer is the value's; the copy is validated by the count.
        self.sequenced(py, |value, _| unsafe { racing_copy(value) })
    }

    /// `f` of a pointer to the value, from which `f` copies what it needs (a part only: a slot
    /// of a table) — with volatile reads where `racy` says a writer may be inside meanwhile
    /// (free-threaded); then `f` may run more than once, and what it read is used only if no
    /// writer was inside (the seqlock of crossbeam's AtomicCell). On a GIL build `racy` is false
    /// and `f` runs once: plain reads, which the compiler may narrow to the fields used.
    #[inline(always)]
    pub fn read_raw<R>(&self, py: Python<'_>, f: impl Fn(*const T, bool) -> R) -> R {
        if !layout::free_threaded() {
            // The GIL serialises this read with every write.
            return f(self.value.get(), false);
        }
        self.sequenced(py, f)
    }

    /// [`SeqLock::read_raw`] on a free-threaded interpreter (the caller has asked which).
    #[inline(always)]
    fn sequenced<R>(&self, py: Python<'_>, f: impl Fn(*const T, bool) -> R) -> R {
        if cfg!(dlpx_tsan) {
            // A seqlock's read races a writer by construction (the count discards it after);
            // ThreadSanitizer builds (scripts/tsan_free_threaded.sh) read under the writers'
            // lock instead, so that everything else is checked without that report.
            return self.writers.with(py, || f(self.value.get(), false));
        }
        loop {
            let before = self.sequence.load(Ordering::Acquire);
            if before & 1 == 0 {
                let read = f(self.value.get(), true);
                fence(Ordering::Acquire);
                if self.sequence.load(Ordering::Relaxed) == before {
                    return read;
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Changes the value with `f`, alone among writers; readers retry meanwhile.
    pub fn write<R>(&self, py: Python<'_>, f: impl FnOnce(&mut T) -> R) -> R {
        self.writers.with(py, || {
            let sequence = self.sequence.load(Ordering::Relaxed);
            self.sequence.store(sequence.wrapping_add(1), Ordering::Relaxed);
            fence(Ordering::Release);
            // SAFETY: the only writer (the lock, or the GIL); readers discard what they copy now.
            let mut copy = unsafe { std::ptr::read_volatile(self.value.get()) };
            let result = f(&mut copy);
            // SAFETY: as above.
            unsafe { std::ptr::write_volatile(self.value.get(), copy) };
            self.sequence.store(sequence.wrapping_add(2), Ordering::Release);
            result
        })
    }
}

/// A copy of `*source` that a writer may be changing meanwhile (the caller discards it then):
/// volatile word loads (a volatile read of the whole value would be byte loads), as
/// `MaybeUninit` words so that padding bytes are never read as integers.
///
/// # Safety
/// `source` is valid for reads of a `T`.
pub unsafe fn racing_copy<T: Copy>(source: *const T) -> T {
    use std::mem::{align_of, size_of, MaybeUninit};
    let mut copy = MaybeUninit::<T>::uninit();
    let (words, word_aligned) = (size_of::<T>() / size_of::<usize>(), align_of::<T>() >= align_of::<usize>());
    let (from, to) = (source.cast::<u8>(), copy.as_mut_ptr().cast::<u8>());
    let done = if word_aligned { words * size_of::<usize>() } else { 0 };
    // SAFETY: in bounds of both `T`s, word-aligned where words are read.
    unsafe {
        for i in 0..done / size_of::<usize>() {
            let word = std::ptr::read_volatile(from.cast::<MaybeUninit<usize>>().add(i));
            to.cast::<MaybeUninit<usize>>().add(i).write(word);
        }
        for i in done..size_of::<T>() {
            let byte = std::ptr::read_volatile(from.add(i).cast::<MaybeUninit<u8>>());
            to.add(i).cast::<MaybeUninit<u8>>().write(byte);
        }
        copy.assume_init()
    }
}

/// A value computed once, in the interpreter's world, that never blocks. (A blocking once-cell
/// could deadlock: its initialiser runs Python code, which may hand the GIL to a thread that then
/// waits on the cell while holding the GIL.) Two threads may both compute it; the first to finish
/// wins and the other's value is dropped unused, so values must be cheap to discard (leaked
/// duplicates of immortal objects at worst).
pub struct GilCell<T: Copy>(SeqLock<Option<T>>);

impl<T: Copy> Default for GilCell<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy> GilCell<T> {
    pub const fn new() -> Self {
        GilCell(SeqLock::new(None))
    }

    /// The value, computing it with `init` the first time.
    #[inline]
    pub fn get_or_try_init<E>(
        &self,
        py: Python<'_>,
        init: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        match self.0.read(py) {
            Some(value) => Ok(value),
            None => self.initialise(py, init),
        }
    }

    /// The first computation, out of the readers' way.
    #[cold]
    fn initialise<E>(
        &self,
        py: Python<'_>,
        init: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        let value = init()?;
        // `init` ran Python code: another thread may have filled the cell meanwhile; it stays.
        Ok(self.0.write(py, |cell| *cell.get_or_insert(value)))
    }
}

/// A value that lives in the interpreter's world and changes (what dlpx has learnt of a
/// producer). A copy is read, so no reference into the cell lives while Python code runs.
pub struct GilVar<T: Copy>(SeqLock<T>);

impl<T: Copy> GilVar<T> {
    pub const fn new(value: T) -> Self {
        GilVar(SeqLock::new(value))
    }

    #[inline]
    pub fn get(&self, py: Python<'_>) -> T {
        self.0.read(py)
    }

    pub fn set(&self, py: Python<'_>, value: T) {
        self.0.write(py, |cell| *cell = value)
    }

    /// Changes the value with `f` (no Python code) and gives the value it replaced: the read
    /// and the write are one step among writers, where a `get` then a `set` let two threads
    /// both replace the value they read (a free-threaded interpreter).
    pub fn replace(&self, py: Python<'_>, f: impl FnOnce(T) -> T) -> T {
        self.0.write(py, |cell| std::mem::replace(cell, f(*cell)))
    }
}
