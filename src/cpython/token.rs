//! `Python<'py>`: the proof that this thread holds the GIL (docs/design.md, "The GIL is a type").

use std::marker::PhantomData;
use std::ops::Deref;

use super::{api, Api};
use crate::error::Result;

/// A token only a thread holding the GIL can make, valid for `'py`. Everything that touches a
/// Python object or GIL-only state takes one, so the compiler keeps that state GIL-only. It is
/// `Copy` and cheap (one pointer, the resolved API), and `!Send`: it cannot leave its thread.
#[derive(Clone, Copy)]
pub struct Python<'py> {
    api: &'static Api,
    /// `!Send` and `!Sync` (a raw pointer), tied to `'py`.
    _attached: PhantomData<(&'py (), *mut ())>,
}

impl<'py> Python<'py> {
    /// The token of a thread that holds the GIL: an entry point that CPython, or a DLPack caller
    /// by the table's contract, calls with the GIL held. Fails (RuntimeError) when no
    /// interpreter is running in the process.
    ///
    /// # Safety
    /// The calling thread holds the GIL for all of `'py`.
    #[inline]
    pub unsafe fn assume_attached() -> Result<Python<'py>> {
        Ok(Python { api: api()?, _attached: PhantomData })
    }

    /// Runs `f` with the GIL, taken (and given back) here when this thread does not hold it: a
    /// deleter on any thread. None when no interpreter is running, or when it is shutting down
    /// and this thread does not hold the GIL (taking it then can end the thread): its objects
    /// are left to it then, as numpy's deleters leave theirs.
    pub fn with_gil<R>(f: impl for<'a> FnOnce(Python<'a>) -> R) -> Option<R> {
        let api = api().ok()?;
        if super::gil::holds_gil(api) {
            // Already attached (a deleter run by a Python object's deallocation, the common
            // case): its objects may be touched, during finalisation too, as any deallocation
            // then touches them; PyGILState_Ensure/Release would cost more than the deleter.
            // SAFETY: this thread holds the GIL for all of `f`.
            return Some(f(unsafe { Python::assume_attached_to(api) }));
        }
        // SAFETY: Py_IsInitialized may be called at any time.
        if unsafe { (api.Py_IsInitialized)() } == 0 || super::gil::finalizing() {
            return None;
        }
        /// Gives the GIL back on drop, so a panic inside `f` leaves the thread as it found it.
        struct Ensured(&'static Api, std::ffi::c_int);
        impl Drop for Ensured {
            fn drop(&mut self) {
                // SAFETY: releases what PyGILState_Ensure took on this thread.
                unsafe { (self.0.PyGILState_Release)(self.1) };
            }
        }
        // SAFETY: PyGILState_Ensure may be called from any thread of an initialised interpreter.
        let _ensured = Ensured(api, unsafe { (api.PyGILState_Ensure)() });
        // SAFETY: this thread holds the GIL until `_ensured` is dropped, after `f`.
        Some(f(unsafe { Python::assume_attached_to(api) }))
    }

    /// The process-lifetime table behind the token.
    #[inline]
    pub(super) fn table(self) -> &'static Api {
        self.api
    }

    /// # Safety
    /// As for [`Python::assume_attached`], with `api` the resolved table.
    #[inline]
    pub(super) unsafe fn assume_attached_to(api: &'static Api) -> Python<'py> {
        Python { api, _attached: PhantomData }
    }
}

impl Deref for Python<'_> {
    type Target = Api;

    #[inline(always)]
    fn deref(&self) -> &Api {
        self.api
    }
}
