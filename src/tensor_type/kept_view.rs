//! What a `dlpx.Tensor`'s buffer view costs to work out, kept in its object after its first
//! request with strides: numpy asks for a view on every `np.asarray(t)`, and a tensor never
//! changes, so a later request that asks what numpy and `memoryview` ask (strides, any order)
//! skips the full path's checks and lookups (`buffer::fill`, which keeps it and reads the rest
//! of the view from the tensor either way). A tensor of more than [`KEPT_NDIM`] dimensions keeps
//! nothing; the object grows by 48 bytes for what it keeps.

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicU8, Ordering};

use pyo3_ffi::Py_ssize_t;

use crate::cpython::buffer::*;

/// The most dimensions whose byte strides a tensor's object keeps.
pub(super) const KEPT_NDIM: usize = 4;

const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const KEPT: u8 = 2;

/// A view's length in bytes and its format: what every request's view has, strides or not.
#[derive(Clone, Copy)]
pub(super) struct Whole {
    pub len: Py_ssize_t,
    pub format: *mut c_char,
}

/// The view's length and format, and its byte strides (the first `ndim`).
pub(super) struct Kept {
    pub whole: Whole,
    pub strides: [Py_ssize_t; KEPT_NDIM],
}

pub(super) struct KeptView {
    state: AtomicU8,
    kept: UnsafeCell<Kept>,
}

// SAFETY: the kept part is written once, by the thread that moved the state to WRITING, and read
// only after the Release store of KEPT that publishes it.
unsafe impl Sync for KeptView {}

impl KeptView {
    pub(super) const fn new() -> KeptView {
        let kept = Kept { whole: Whole { len: 0, format: std::ptr::null_mut() }, strides: [0; KEPT_NDIM] };
        KeptView { state: AtomicU8::new(EMPTY), kept: UnsafeCell::new(kept) }
    }

    /// The kept part when one is kept and it serves a request of `flags` to a tensor that is
    /// `readonly` or not: strides asked, no order, not writable where the tensor is read-only
    /// (those take the full path, whose checks they need).
    #[inline]
    pub(super) fn serving(&self, flags: c_int, readonly: bool) -> Option<&Kept> {
        let serves = flags & PYBUF_STRIDES == PYBUF_STRIDES
            && flags & PYBUF_ORDERS == 0
            && !(readonly && flags & PYBUF_WRITABLE != 0)
            && self.state.load(Ordering::Acquire) == KEPT;
        // SAFETY: KEPT: written once and published (Acquire above); never written again.
        serves.then(|| unsafe { &*self.kept.get() })
    }

    /// Where the kept byte strides are: kept now, with `whole`, as `strides` × `item`, when
    /// nothing is kept yet; None when they do not fit or another thread is keeping them. They
    /// stay where they are as long as the object.
    pub(super) fn keep(&self, whole: Whole, strides: &[i64], item: Py_ssize_t) -> Option<*mut Py_ssize_t> {
        debug_assert!(!strides.is_empty(), "a 0-d tensor's view has no strides to keep");
        let at = self.kept.get();
        if strides.len() > KEPT_NDIM {
            return None;
        }
        if self.state.load(Ordering::Acquire) == KEPT {
            // SAFETY: published; the strides field's address, not a reference to it.
            return Some(unsafe { std::ptr::addr_of_mut!((*at).strides) }.cast());
        }
        // Strides past Py_ssize_t in bytes (a tensor of no element with a huge extent) are
        // refused by `strides_block`; checked once, before the first keeping.
        if strides.iter().any(|&stride| byte_stride(stride, item).is_none()) {
            return None;
        }
        if self.state.compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return None;
        }
        // SAFETY: this thread alone writes (it moved the state to WRITING); nobody reads before
        // the Release store below publishes it.
        let slot = unsafe { &mut *at };
        slot.whole = whole;
        for (out, &stride) in slot.strides.iter_mut().zip(strides) {
            *out = stride as Py_ssize_t * item; // checked above
        }
        let strides = slot.strides.as_mut_ptr();
        self.state.store(KEPT, Ordering::Release);
        Some(strides)
    }
}

/// `stride` elements of `item` bytes in bytes, where Py_ssize_t holds it.
pub(super) fn byte_stride(stride: i64, item: Py_ssize_t) -> Option<Py_ssize_t> {
    Py_ssize_t::try_from(stride).ok()?.checked_mul(item)
}
