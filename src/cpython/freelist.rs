//! Memory of deallocated objects of one exact, non-GC type, kept for the next object of that
//! type, as CPython keeps its floats' and tuples': `dlpx.from_dlpack` makes a `dlpx.Tensor` on
//! every call and a loop drops it again, and obmalloc's allocate and free cost more than a
//! buffer's whole import besides (measured: benches/README.md, "The older array protocols").
//!
//! The GIL serialises every use on a GIL build. A free-threaded build keeps nothing: objects
//! there carry their owning thread and live in the allocator's per-thread heaps, so memory is
//! handed back to the interpreter at once.

use std::cell::UnsafeCell;

use super::{layout, PyObject, PyTypeObject, Python};

/// Objects kept: enough for the temporaries of a loop (1.4 KiB held at most for dlpx.Tensor's
/// 88 bytes). They are never handed back: the interpreter's end leaves them, as a module's
/// types and statics are left (dlpx is not re-initialised in a process).
const KEEP: usize = 16;

pub struct Freelist {
    kept: UnsafeCell<([*mut PyObject; KEEP], usize)>,
}

// SAFETY: reached only with a `Python` token on a GIL build (the GIL serialises it); a
// free-threaded build never touches it.
unsafe impl Sync for Freelist {}

impl Default for Freelist {
    fn default() -> Self {
        Self::new()
    }
}

impl Freelist {
    pub const fn new() -> Freelist {
        Freelist { kept: UnsafeCell::new(([std::ptr::null_mut(); KEEP], 0)) }
    }

    /// A kept object's memory made a new reference of `ty` (`PyObject_Init`: its type, which it
    /// holds, and one reference), its own fields as they were left when it was kept.
    ///
    /// # Safety
    /// `ty` is the exact, non-GC type whose objects were kept here.
    #[inline]
    pub unsafe fn take(&self, py: Python<'_>, ty: *mut PyTypeObject) -> Option<*mut PyObject> {
        if layout::free_threaded() {
            return None;
        }
        // SAFETY: the GIL serialises every use (above); nothing reenters it.
        let (objects, len) = unsafe { &mut *self.kept.get() };
        if *len == 0 {
            return None;
        }
        *len -= 1;
        // SAFETY: memory of an object of `ty`, given up to the list; initialised as new.
        Some(unsafe { (py.PyObject_Init)(objects[*len], ty) })
    }

    /// Keeps `object`'s memory, or false when the list is full (or the build free-threaded):
    /// the caller frees it then. Its type's reference is the caller's to release.
    ///
    /// # Safety
    /// `object` was deallocated (its fields finalised), of the list's type, and is not used after.
    #[inline]
    pub unsafe fn keep(&self, _py: Python<'_>, object: *mut PyObject) -> bool {
        if layout::free_threaded() {
            return false;
        }
        // SAFETY: as in `take`.
        let (objects, len) = unsafe { &mut *self.kept.get() };
        if *len == KEEP {
            return false;
        }
        objects[*len] = object;
        *len += 1;
        true
    }
}
