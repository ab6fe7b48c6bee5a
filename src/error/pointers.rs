//! A C caller's pointers, checked once at the boundary: an out-pointer becomes an [`Out`], a
//! required in-pointer a `NonNull`, and a NULL one the error "<name> is NULL" (the parameter's
//! own name). Every C entry point checks its pointers with these, through `shell::entry::c_entry!`
//! or, in the core, directly: no NULL check of a caller's pointer is written twice.

use std::ptr::NonNull;

use super::{Error, Result};

/// A caller's out-pointer, checked non-NULL: written once, with [`Out::put`].
pub struct Out<T>(NonNull<T>);

impl<T> Out<T> {
    /// Writes `value` through the pointer.
    pub fn put(self, value: T) {
        // SAFETY: non-NULL (checked by `out`), and writable by every entry point's contract.
        unsafe { self.0.as_ptr().write(value) }
    }

    /// The pointee, to fill field by field.
    pub fn get_mut(&mut self) -> &mut T {
        // SAFETY: as for `put`; the entry point's caller keeps it valid for the call.
        unsafe { self.0.as_mut() }
    }
}

/// `pointer` as an [`Out`], or the error naming the parameter `name`.
#[inline(always)]
pub fn out<T>(pointer: *mut T, name: &'static str) -> Result<Out<T>> {
    NonNull::new(pointer).map(Out).ok_or_else(|| Error::null(name))
}

/// A required in-pointer (`const` or not) checked non-NULL, or the error naming the parameter
/// `name`. What it points to is the entry point's contract, not this check's.
#[inline(always)]
pub fn given<T>(pointer: *const T, name: &'static str) -> Result<NonNull<T>> {
    NonNull::new(pointer.cast_mut()).ok_or_else(|| Error::null(name))
}
