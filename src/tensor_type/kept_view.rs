//! A `dlpx.Tensor`'s buffer view, worked out on its first request and kept in its object: numpy
//! asks for one on every `np.asarray(t)`, and a tensor never changes, so later requests that ask
//! what numpy and `memoryview` ask (strides, any order) copy it instead of working it out again.
//! Requests that ask an order, or a writable view, take the full path (`buffer::fill`), which
//! also makes the kept view; a tensor of more than [`KEPT_NDIM`] dimensions keeps none.

use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::ptr;
use std::sync::atomic::{AtomicU8, Ordering};

use pyo3_ffi::{PyObject, Py_ssize_t};

use crate::cpython::buffer::*;

/// The most dimensions whose byte strides a tensor's object keeps.
pub(super) const KEPT_NDIM: usize = 4;

const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const KEPT: u8 = 2;

/// What a view of the tensor says whatever the request (`buffer::fill`'s answer to the first):
/// `view` with no exporter, strides or format chosen yet, and the byte strides.
#[derive(Clone, Copy)]
pub(super) struct Kept {
    /// Its `shape` is the tensor's own (NULL for 0-d), live as long as the object.
    pub view: PyBuffer,
    pub strides: [Py_ssize_t; KEPT_NDIM],
}

pub(super) struct KeptView {
    state: AtomicU8,
    kept: UnsafeCell<Kept>,
}

// SAFETY: the view is written once, by the thread that moved the state to WRITING, and read only
// after the Release store of KEPT that publishes it.
unsafe impl Sync for KeptView {}

impl KeptView {
    pub(super) const fn new() -> KeptView {
        let kept = Kept { view: PyBuffer::zeroed(), strides: [0; KEPT_NDIM] };
        KeptView { state: AtomicU8::new(EMPTY), kept: UnsafeCell::new(kept) }
    }

    /// Fills `view` from the kept view when one is kept and serves `flags` (strides asked, no
    /// order, not writable where the tensor is read-only); false otherwise, `view` untouched.
    /// The caller adds the view's reference to `exporter`.
    #[inline]
    pub(super) fn serve(&self, flags: c_int, exporter: *mut PyObject, view: &mut PyBuffer) -> bool {
        const ORDERS: c_int = (PYBUF_C_CONTIGUOUS | PYBUF_F_CONTIGUOUS | PYBUF_ANY_CONTIGUOUS) & !PYBUF_STRIDES;
        if self.state.load(Ordering::Acquire) != KEPT || flags & PYBUF_STRIDES != PYBUF_STRIDES || flags & ORDERS != 0 {
            return false;
        }
        // SAFETY: KEPT: written once and published (Acquire above); never written again.
        let kept = unsafe { &*self.kept.get() };
        if flags & PYBUF_WRITABLE != 0 && kept.view.readonly != 0 {
            return false;
        }
        // A kept view has strides: only a tensor of at least one dimension keeps one.
        *view = PyBuffer {
            obj: exporter,
            format: if flags & PYBUF_FORMAT != 0 { kept.view.format } else { ptr::null_mut() },
            strides: kept.strides.as_ptr().cast_mut(),
            ..kept.view
        };
        true
    }

    /// Keeps the view `kept` describes, with the byte strides `strides` × `item`, when nothing is
    /// kept yet, no other thread is keeping one and the strides fit; returns where the kept
    /// strides are (they stay there as long as the object).
    pub(super) fn keep(&self, kept: Kept, strides: &[i64], item: Py_ssize_t) -> Option<*mut Py_ssize_t> {
        debug_assert!(!strides.is_empty(), "a 0-d tensor's view has no strides to keep");
        if strides.len() > KEPT_NDIM
            || self.state.compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed).is_err()
        {
            return None;
        }
        // SAFETY: this thread alone writes (it moved the state to WRITING); nobody reads before
        // the Release store below publishes it.
        let slot = unsafe { &mut *self.kept.get() };
        *slot = kept;
        for (out, &stride) in slot.strides.iter_mut().zip(strides) {
            *out = stride as Py_ssize_t * item;
        }
        let at = slot.strides.as_mut_ptr();
        self.state.store(KEPT, Ordering::Release);
        Some(at)
    }
}
