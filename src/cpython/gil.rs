//! Whether this thread holds the GIL, releasing it around blocking calls, and keeping a pending
//! exception aside while foreign code runs.

use std::ffi::{c_int, c_void};

use once_cell::sync::OnceCell;

use super::{api, lookup, Api, PyObject, Python};

/// Whether the calling thread holds the GIL (any thread may ask): the interpreter's current
/// thread state is this thread's own. Neither half is enough alone. PyGILState_Check answers 1
/// for every thread once a subinterpreter exists, even one with no thread state; and before 3.12
/// the "current" thread state is the GIL holder's, whichever thread that is. The getter is public
/// from 3.13 and private (exported) before; PyGILState_Check serves if neither is found. A
/// subinterpreter's thread may read as not holding it: then dlpx only keeps the GIL longer.
pub(super) fn holds_gil(py: &Api) -> bool {
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
        // SAFETY: both may be called without the GIL. PyGILState_Check answers 1 once the
        // interpreter is finalised, so that is asked first.
        None => unsafe { (py.Py_IsInitialized)() != 0 && (py.PyGILState_Check)() != 0 },
    }
}

/// Whether the interpreter is shutting down (`Py_IsFinalizing` from 3.13, `_Py_IsFinalizing`
/// before); false when neither is found.
pub(super) fn finalizing() -> bool {
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
    let Ok(api) = api() else { return f() };
    if !holds_gil(api) {
        return f();
    }
    // SAFETY: this thread holds the GIL (checked), for all of `released`; `f` touches no Python
    // object, by this function's contract.
    unsafe { released(Python::assume_attached_to(api), f) }
}

/// Runs `f` with the GIL, which the token proves this thread holds, released (a kernel that
/// touches no Python object); taken back before it returns, also when `f` panics. While the
/// interpreter shuts down, the GIL is kept (taking it back then can end the thread).
///
/// # Safety
/// `f` touches nothing only a GIL holder may (no `Python` token is used inside it).
#[inline]
pub unsafe fn released<T>(py: Python<'_>, f: impl FnOnce() -> T) -> T {
    /// Takes the GIL back on drop.
    struct Released(&'static Api, *mut c_void);
    impl Drop for Released {
        fn drop(&mut self) {
            // The interpreter began shutting down meanwhile (only a daemon thread can see that:
            // every other is joined first). Taking the GIL back then ends the thread before
            // CPython 3.14 (`pthread_exit`: a forced unwind through the Rust frames above, whose
            // destructors it may not run); the thread waits for the process to end instead, as
            // CPython 3.14 makes it wait itself.
            if finalizing() {
                loop {
                    std::thread::park();
                }
            }
            // SAFETY: the thread state PyEval_SaveThread returned on this thread.
            unsafe { (self.0.PyEval_RestoreThread)(self.1) };
        }
    }
    if finalizing() {
        return f();
    }
    let api = super::api_of(py);
    // SAFETY: the token proves this thread holds the GIL; it is taken back by `Released`.
    let _released = Released(api, unsafe { (api.PyEval_SaveThread)() });
    f()
}

/// Keeps the pending Python exception aside while foreign code (a producer's deleter) runs:
/// a deleter that runs Python code must not see, or clobber, an exception set before it.
/// Only acts when an interpreter is running and this thread holds the GIL.
pub struct ExceptionGuard(Option<(&'static Api, [*mut PyObject; 3])>);

impl ExceptionGuard {
    /// For callers that may or may not hold the GIL (C code releasing a view).
    pub fn save() -> ExceptionGuard {
        let Ok(api) = api() else { return ExceptionGuard(None) };
        if !holds_gil(api) {
            return ExceptionGuard(None);
        }
        // SAFETY: this thread holds the GIL (checked) for the guard's life, which ends here or
        // in the caller's frame, on this thread (the guard is not Send).
        Self::save_with_gil(unsafe { Python::assume_attached_to(api) })
    }

    /// For callers that hold the GIL (tp_dealloc, capsule destructors): one call when no
    /// exception is pending, the common case on the hot path of every tensor's death.
    pub fn save_with_gil(py: Python<'_>) -> ExceptionGuard {
        // SAFETY: the token proves the GIL is held.
        unsafe {
            if (py.PyErr_Occurred)().is_null() {
                return ExceptionGuard(None);
            }
            let mut saved = [std::ptr::null_mut(); 3];
            (py.PyErr_Fetch)(&mut saved[0], &mut saved[1], &mut saved[2]);
            ExceptionGuard(Some((super::api_of(py), saved)))
        }
    }
}

impl Drop for ExceptionGuard {
    fn drop(&mut self) {
        if let Some((api, [ty, value, tb])) = self.0.take() {
            // SAFETY: the GIL is still held (the guard was made with it, on this thread);
            // Restore steals the three references and replaces anything the deleter left behind.
            unsafe {
                (api.PyErr_Clear)();
                (api.PyErr_Restore)(ty, value, tb);
            }
        }
    }
}
