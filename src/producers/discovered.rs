//! What a row found in its producer's loaded module: dlpx never imports a producer, so a row's
//! types cannot exist before their module does, and a row looks for them when a new type is
//! matched against it (docs/design.md, "Producers: one seam"). Until the module is imported,
//! and has everything the row reads, nothing is found, and the next new type asks again.

use std::ffi::CStr;

use crate::cpython::{imported_module, GilVar, Interned, Owned, Python};

pub struct Discovered<T: Copy + 'static> {
    /// The module whose import makes the producer's types exist.
    module: &'static CStr,
    /// The names the row's reads look attributes up by, interned before anything is found (a
    /// read then makes no str).
    names: &'static [&'static Interned],
    found: GilVar<Option<T>>,
}

impl<T: Copy + 'static> Discovered<T> {
    pub const fn new(module: &'static CStr, names: &'static [&'static Interned]) -> Self {
        Discovered { module, names, found: GilVar::new(None) }
    }

    /// What was found, once it was: a read's first question.
    #[inline(always)]
    pub fn get(&self, py: Python<'_>) -> Option<T> {
        self.found.get(py)
    }

    /// [`Discovered::get`], or a look when nothing is found yet: once the module is imported and
    /// every name interns, `find` reads from the module what the row needs (None: not all of it
    /// is there, or not yet).
    pub fn get_or_find<'py>(
        &self,
        py: Python<'py>,
        find: impl FnOnce(Python<'py>, &Owned<'py>) -> Option<T>,
    ) -> Option<T> {
        self.get(py).or_else(|| self.find(py, find))
    }

    #[cold]
    fn find<'py>(&self, py: Python<'py>, find: impl FnOnce(Python<'py>, &Owned<'py>) -> Option<T>) -> Option<T> {
        let module = imported_module(py, self.module)?;
        if self.names.iter().any(|name| name.get(py).is_err()) {
            // SAFETY: the token proves the GIL is held; an interning failure is not ours to keep.
            unsafe { (py.PyErr_Clear)() };
            return None;
        }
        let found = find(py, &module)?;
        self.found.set(py, Some(found));
        Some(found)
    }

    /// Replaces what was found with what a read learnt about it since (`learnt`, of what is
    /// found now, no Python code) and gives what it replaced, in one step: two threads that
    /// learn at once each replace what the other left, and each releases what it replaced
    /// once. None (and `learnt` not called) while nothing is found.
    pub fn update(&self, py: Python<'_>, learnt: impl FnOnce(T) -> T) -> Option<T> {
        self.found.replace(py, |now| now.map(learnt))
    }
}
