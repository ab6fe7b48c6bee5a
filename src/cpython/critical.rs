//! Steps on one object that must not interleave with another thread's on the same object: a
//! DLPack capsule's check and rename. The GIL makes them one on a GIL build; a free-threaded
//! build has PEP 703's per-object lock for it, the critical section CPython itself takes around
//! a list's or a dict's change (`PyCriticalSection_Begin`, exported from 3.13). Per object, so
//! threads consuming different capsules never wait for each other.

use std::ffi::c_void;

use once_cell::sync::OnceCell;

use super::{layout, lookup, FreeThreadedLock, PyObject, Python};

type Begin = unsafe extern "C" fn(*mut CriticalSection, *mut PyObject);
type End = unsafe extern "C" fn(*mut CriticalSection);

/// `PyCriticalSection` (two words in 3.13 to 3.15: the previous section, the mutex), with room
/// to spare: CPython writes only its own fields.
#[repr(C)]
struct CriticalSection([usize; 4]);

/// The interpreter's `PyCriticalSection_Begin` and `_End`, once looked up.
static SECTIONS: OnceCell<Option<(Begin, End)>> = OnceCell::new();

/// Where an interpreter exports no critical sections (none that is free-threaded does): one
/// lock for every object, held only while `f` runs, which runs no Python code.
static FALLBACK: FreeThreadedLock = FreeThreadedLock::new();

/// Ends the section on every way out of `f`, a panic's too.
struct Section {
    raw: CriticalSection,
    end: End,
}

impl Drop for Section {
    fn drop(&mut self) {
        // SAFETY: the section `Begin` started, on this thread, ended once.
        unsafe { (self.end)(&mut self.raw) };
    }
}

/// `f` alone among threads that lock `object` this way (on a GIL build, the GIL makes it so: `f`
/// runs at once). `f` runs no Python code and takes no other lock: a section is suspended while
/// its thread waits, and would no longer make `f` one step.
pub fn with_object_locked<R>(py: Python<'_>, object: *mut PyObject, f: impl FnOnce() -> R) -> R {
    if !layout::free_threaded() {
        return f();
    }
    let sections = SECTIONS.get_or_init(|| {
        let begin = lookup("PyCriticalSection_Begin\0").ok()?;
        let end = lookup("PyCriticalSection_End\0").ok()?;
        // SAFETY: the running interpreter's functions of these signatures (Include/cpython/
        // critical_section.h).
        Some(unsafe {
            (std::mem::transmute::<*mut c_void, Begin>(begin), std::mem::transmute::<*mut c_void, End>(end))
        })
    });
    let Some((begin, end)) = *sections else { return FALLBACK.with(py, f) };
    let mut section = Section { raw: CriticalSection([0; 4]), end };
    // SAFETY: a live object, this thread attached (the token); `section` stays in place until
    // its drop ends it.
    unsafe { begin(&mut section.raw, object) };
    f()
}
