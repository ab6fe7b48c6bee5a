//! State that only GIL holders touch: every accessor takes the [`Python`] token, so the
//! compiler keeps it GIL-only (docs/design.md, "The GIL is a type").

use std::cell::UnsafeCell;

use super::Python;

/// A value computed once, in the interpreter's world, that never blocks. (A blocking once-cell
/// could deadlock: its initialiser runs Python code, which may hand the GIL to a thread that then
/// waits on the cell while holding the GIL.) Two threads may both compute it; the first to finish
/// wins and the other's value is dropped unused, so values must be cheap to discard (leaked
/// duplicates of immortal objects at worst).
pub struct GilCell<T: Copy>(UnsafeCell<Option<T>>);

// SAFETY: every access takes a `Python` token, held only with the GIL, which serialises them.
unsafe impl<T: Copy> Sync for GilCell<T> {}

impl<T: Copy> Default for GilCell<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy> GilCell<T> {
    pub const fn new() -> Self {
        GilCell(UnsafeCell::new(None))
    }

    /// The value, computing it with `init` the first time.
    pub fn get_or_try_init<E>(
        &self,
        _py: Python<'_>,
        init: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        // SAFETY: the token proves the GIL is held; no reference into the cell outlives this.
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

/// A value that lives in the interpreter's world and changes (what dlpx has learnt of a
/// producer). A copy is read, so no reference into the cell lives while Python code runs.
pub struct GilVar<T: Copy>(UnsafeCell<T>);

// SAFETY: every access takes a `Python` token, held only with the GIL, which serialises them.
unsafe impl<T: Copy> Sync for GilVar<T> {}

impl<T: Copy> GilVar<T> {
    pub const fn new(value: T) -> Self {
        GilVar(UnsafeCell::new(value))
    }

    #[inline]
    pub fn get(&self, _py: Python<'_>) -> T {
        // SAFETY: the token proves the GIL is held; a copy is read.
        unsafe { *self.0.get() }
    }

    pub fn set(&self, _py: Python<'_>, value: T) {
        // SAFETY: the token proves the GIL is held; no reference into the cell lives.
        unsafe { *self.0.get() = value }
    }
}
