//! `Owned<'py>`: a strong reference released on drop, which cannot outlive its token.

use std::ptr::NonNull;

use super::{PyObject, Python};
use crate::error::{Error, Result};

/// A strong reference the holder owns, released (with the GIL its token proves) on drop.
pub struct Owned<'py> {
    object: NonNull<PyObject>,
    py: Python<'py>,
}

impl<'py> Owned<'py> {
    /// Takes a new reference, or the pending exception when it is NULL.
    #[inline]
    pub fn new(py: Python<'py>, object: *mut PyObject) -> Result<Owned<'py>> {
        match NonNull::new(object) {
            Some(object) => Ok(Owned { object, py }),
            None => Err(Error::python_pending()),
        }
    }

    /// A new reference to a borrowed, live `object`.
    pub fn from_borrowed(py: Python<'py>, object: NonNull<PyObject>) -> Owned<'py> {
        // SAFETY: the token proves the GIL is held; the caller's reference keeps `object` live.
        unsafe { (py.Py_IncRef)(object.as_ptr()) };
        Owned { object, py }
    }

    /// Another strong reference to the same object.
    pub fn clone_ref(&self) -> Owned<'py> {
        Owned::from_borrowed(self.py, self.object)
    }

    #[inline]
    pub fn as_ptr(&self) -> *mut PyObject {
        self.object.as_ptr()
    }

    #[inline]
    pub fn non_null(&self) -> NonNull<PyObject> {
        self.object
    }

    /// Gives the reference up to the caller (who now owns it).
    #[inline]
    pub fn into_ptr(self) -> *mut PyObject {
        let p = self.object.as_ptr();
        std::mem::forget(self);
        p
    }
}

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        // SAFETY: the token proves the GIL is held; this reference is ours.
        unsafe { (self.py.Py_DecRef)(self.object.as_ptr()) }
    }
}
