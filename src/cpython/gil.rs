//! The GIL: whether this thread holds it, releasing it around blocking calls, cells that live
//! in the interpreter's world, and keeping a pending exception aside while foreign code runs.

use std::ffi::{c_int, c_void};

use once_cell::sync::OnceCell;

use super::{lookup, py, python, PyObject, Python, PYTHON};

/// A lazily computed value that lives in the interpreter's world: only touched with the GIL,
/// and never blocks. (A blocking once-cell could deadlock: its initialiser runs Python code,
/// which may hand the GIL to a thread that then waits on the cell while holding the GIL.) Two
/// threads may both compute it; the first to finish wins and the other's value is dropped
/// unused, so values must be cheap to discard (leaked duplicates of immortal objects at worst).
pub struct GilCell<T: Copy>(std::cell::UnsafeCell<Option<T>>);

// SAFETY: every access happens with the GIL held, which serialises them.
unsafe impl<T: Copy> Sync for GilCell<T> {}

impl<T: Copy> Default for GilCell<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy> GilCell<T> {
    pub const fn new() -> Self {
        GilCell(std::cell::UnsafeCell::new(None))
    }

    /// The value, computing it with `init` the first time (the GIL is held).
    pub fn get_or_try_init<E>(&self, init: impl FnOnce() -> std::result::Result<T, E>) -> std::result::Result<T, E> {
        // SAFETY: GIL held; no reference into the cell outlives these statements.
        if let Some(value) = unsafe { *self.0.get() } {
            return Ok(value);
        }
        let value = init()?;
        // SAFETY: as above; `init` may have let another thread fill the cell meanwhile.
        unsafe {
            match *self.0.get() {
                Some(existing) => Ok(existing),
                None => {
                    *self.0.get() = Some(value);
                    Ok(value)
                }
            }
        }
    }
}

/// A value that lives in the interpreter's world and changes: what dlpx has learnt of a
/// library it reads directly (not yet imported, found, unreadable). Read and written only with
/// the GIL held, which serialises every access; a copy is read, so no reference into the cell
/// lives while Python code runs.
pub struct GilVar<T: Copy>(std::cell::UnsafeCell<T>);

// SAFETY: every access happens with the GIL held, which serialises them.
unsafe impl<T: Copy> Sync for GilVar<T> {}

impl<T: Copy> GilVar<T> {
    pub const fn new(value: T) -> Self {
        GilVar(std::cell::UnsafeCell::new(value))
    }

    /// The value (the GIL is held).
    #[inline]
    pub fn get(&self) -> T {
        // SAFETY: GIL held; a copy is read.
        unsafe { *self.0.get() }
    }

    /// Replaces the value (the GIL is held).
    pub fn set(&self, value: T) {
        // SAFETY: GIL held; no reference into the cell lives.
        unsafe { *self.0.get() = value }
    }
}

/// Whether the calling thread holds the GIL (any thread may ask): the interpreter's current
/// thread state is this thread's own. Neither half is enough alone. PyGILState_Check answers 1
/// for every thread once a subinterpreter exists, even one with no thread state; and before 3.12
/// the "current" thread state is the GIL holder's, whichever thread that is. The getter is public
/// from 3.13 and private (exported) before; PyGILState_Check serves if neither is found. A
/// subinterpreter's thread may read as not holding it: then dlpx only keeps the GIL longer.
pub fn holds_gil(py: &Python) -> bool {
    type Getter = unsafe extern "C" fn() -> *mut c_void;
    static GETTER: OnceCell<Option<Getter>> = OnceCell::new();
    let getter = GETTER.get_or_init(|| {
        let address =
            lookup("PyThreadState_GetUnchecked\0").or_else(|_| lookup("_PyThreadState_UncheckedGet\0")).ok()?;
        // SAFETY: both take nothing and return a PyThreadState* (NULL when none).
        Some(unsafe { std::mem::transmute::<*mut c_void, Getter>(address) })
    });
    match getter {
        Some(current) => {
            // SAFETY: both may be called from any thread, with or without the GIL.
            let (current, own) = unsafe { (current(), (py.PyGILState_GetThisThreadState)()) };
            !current.is_null() && current == own
        }
        // SAFETY: PyGILState_Check may be called without the GIL.
        None => (unsafe { (py.PyGILState_Check)() }) != 0,
    }
}

/// Whether the interpreter is shutting down (`Py_IsFinalizing` from 3.13, `_Py_IsFinalizing`
/// before); false when neither is found.
fn finalizing() -> bool {
    type Query = unsafe extern "C" fn() -> c_int;
    static QUERY: OnceCell<Option<Query>> = OnceCell::new();
    let query = QUERY.get_or_init(|| {
        let address = lookup("Py_IsFinalizing\0").or_else(|_| lookup("_Py_IsFinalizing\0")).ok()?;
        // SAFETY: both take nothing and return an int; callable from any thread.
        Some(unsafe { std::mem::transmute::<*mut c_void, Query>(address) })
    });
    // SAFETY: as above.
    query.is_some_and(|q| unsafe { q() } != 0)
}

/// Runs `f` — a blocking call that touches no Python object (a CUDA synchronisation, the first
/// driver initialisation) — with the GIL released when this thread holds it, so the process's
/// other Python threads run meanwhile. Without an interpreter, or without the GIL, it just runs.
///
/// Whatever `f` waits for must never wait for the GIL: a `OnceCell` initialised inside `f` is
/// entered only through `without_gil` by GIL holders, so none of them blocks on it holding the GIL.
pub fn without_gil<T>(f: impl FnOnce() -> T) -> T {
    /// Takes the GIL back on drop, so a panic inside `f` leaves the thread as it found it.
    struct Released<'a>(&'a Python, *mut c_void);
    impl Drop for Released<'_> {
        fn drop(&mut self) {
            // SAFETY: the thread state PyEval_SaveThread returned on this thread.
            unsafe { (self.0.PyEval_RestoreThread)(self.1) };
        }
    }
    let Some(py) = PYTHON.get() else { return f() };
    if !holds_gil(py) || finalizing() {
        // While the interpreter shuts down, taking the GIL back can end this thread
        // (pthread_exit through Rust frames): keep it instead.
        return f();
    }
    // SAFETY: this thread holds the GIL; it is taken back by `Released`.
    let _released = Released(py, unsafe { (py.PyEval_SaveThread)() });
    f()
}

/// Keeps the pending Python exception aside while foreign code (a producer's deleter) runs:
/// a deleter that runs Python code must not see, or clobber, an exception set before it.
/// Only acts when an interpreter is running and this thread holds the GIL.
pub struct ExceptionGuard(Option<[*mut PyObject; 3]>);

impl ExceptionGuard {
    /// For callers that may or may not hold the GIL (C code releasing a view).
    pub fn save() -> ExceptionGuard {
        let Ok(py) = python() else { return ExceptionGuard(None) };
        if !holds_gil(py) {
            return ExceptionGuard(None);
        }
        Self::save_with_gil(py)
    }

    /// For callers that hold the GIL (tp_dealloc, capsule destructors): one call when no
    /// exception is pending, the common case on the hot path of every tensor's death.
    pub fn save_with_gil(py: &Python) -> ExceptionGuard {
        // SAFETY: the GIL is held by the caller.
        unsafe {
            if (py.PyErr_Occurred)().is_null() {
                return ExceptionGuard(None);
            }
            let mut saved = [std::ptr::null_mut(); 3];
            (py.PyErr_Fetch)(&mut saved[0], &mut saved[1], &mut saved[2]);
            ExceptionGuard(Some(saved))
        }
    }
}

impl Drop for ExceptionGuard {
    fn drop(&mut self) {
        if let Some([ty, value, tb]) = self.0.take() {
            let py = py();
            // SAFETY: GIL held (checked in `save`); Restore steals the three references and
            // replaces anything the deleter left behind, which is reported as unraisable-free noise.
            unsafe {
                (py.PyErr_Clear)();
                (py.PyErr_Restore)(ty, value, tb);
            }
        }
    }
}
