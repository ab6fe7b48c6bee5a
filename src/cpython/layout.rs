//! The object header of the running interpreter, learned when its API loads: a GIL build's
//! `PyObject` is 16 bytes with `ob_type` at 8, a free-threaded build's is 32 with `ob_type` at 24
//! (docs/design.md, "Free-threaded CPython"). One binary serves both; every read of an object's
//! header or of the fields after it goes through here.

use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{PyObject, PyTypeObject};

/// The object header's size: the GIL build's until the API loads (nothing reads an object before
/// it does). `ob_type` is the header's last word in both builds, and only the free-threaded
/// build's header is longer.
static HEAD: AtomicUsize = AtomicUsize::new(size_of::<PyObject>());

/// The free-threaded build's header: `ob_tid`, four small fields, `ob_ref_shared`, `ob_type`.
const FREE_THREADED_HEAD: usize = 32;
/// Bytes from `ob_type` to the header's end (its own size: it is the last word).
const TYPE_FROM_END: usize = size_of::<PyObject>() - offset_of!(PyObject, ob_type);

/// Learns the layout from `object`, whose type is known to be `ty` (True and `bool`): the GIL
/// build's offset is tried first (on a free-threaded object those bytes are flags and a
/// reference count, never a type's address).
///
/// # Safety
/// `object` is a live object of at least 32 bytes whose type is `ty`.
pub(super) unsafe fn learn(object: *mut PyObject, ty: *mut PyObject) -> Result<(), &'static str> {
    let word_at = |offset: usize| {
        // SAFETY: per the contract, the object has these bytes.
        unsafe { object.cast::<u8>().add(offset).cast::<*mut PyObject>().read() }
    };
    if word_at(offset_of!(PyObject, ob_type)) == ty {
        return Ok(());
    }
    if word_at(FREE_THREADED_HEAD - TYPE_FROM_END) != ty {
        return Err("a PyObject layout dlpx knows (neither the GIL build's nor the free-threaded one)");
    }
    HEAD.store(FREE_THREADED_HEAD, Ordering::Relaxed);
    Ok(())
}

/// The size of the object header: where an object's own fields begin.
#[inline(always)]
pub fn head() -> usize {
    HEAD.load(Ordering::Relaxed)
}

/// Whether the interpreter is a free-threaded build (its GIL may be off).
#[inline(always)]
pub fn free_threaded() -> bool {
    head() != size_of::<PyObject>()
}

/// `object`'s type.
///
/// # Safety
/// `object` is live.
#[inline(always)]
pub unsafe fn type_at(object: *mut PyObject) -> *mut PyTypeObject {
    // SAFETY: per the contract; `ob_type` is set once, at allocation.
    unsafe { object.cast::<u8>().add(head() - TYPE_FROM_END).cast::<*mut PyTypeObject>().read() }
}

/// The address of `object`'s own fields (its C struct after the header).
#[inline(always)]
pub fn fields(object: *mut PyObject) -> *mut u8 {
    object.cast::<u8>().wrapping_add(head())
}
