//! Type → row: the one dispatch of the importer seam (docs/design.md, "Producers: one seam").

use std::cell::UnsafeCell;

use pyo3_ffi::{PyObject, PyTypeObject};

use super::{own, table, Entry, ROWS};
use crate::abi::DLPackExchangeAPI;
use crate::cpython::{type_of, FreeThreadedLock, Python};
use crate::python::tensor::tensor_type;

/// Types remembered at once; the oldest goes first (round robin).
const SLOTS: usize = 32;

/// One remembered type: its address (0: empty), its row's index in `ROWS`, its table.
#[derive(Clone, Copy)]
struct Slot {
    ty: usize,
    row: usize,
    table: *const DLPackExchangeAPI,
}

/// The cache. Each slot holds a strong reference to its type, so a cached type can never die
/// and be replaced by another at the same address; eviction releases it.
struct Cache {
    slots: UnsafeCell<[Slot; SLOTS]>,
    next: UnsafeCell<usize>,
    lock: FreeThreadedLock,
}

// SAFETY: touched only through `find` and `insert`, which take a `Python` token and the cache's
// lock (which the GIL makes redundant and a free-threaded interpreter takes).
unsafe impl Sync for Cache {}

static CACHE: Cache = Cache {
    slots: UnsafeCell::new([Slot { ty: 0, row: 0, table: std::ptr::null() }; SLOTS]),
    next: UnsafeCell::new(0),
    lock: FreeThreadedLock::new(),
};

impl Cache {
    #[inline]
    fn find(&self, py: Python<'_>, ty: *mut PyTypeObject) -> Option<Entry> {
        let slot = self.lock.with(py, || {
            // SAFETY: under the lock (or the GIL); a copy of the slot is read.
            let slots = unsafe { &*self.slots.get() };
            slots.iter().find(|slot| slot.ty == ty as usize).copied()
        })?;
        // SAFETY: only process-lifetime tables are stored (the rows' statics, tables that
        // producers publish for the life of the process).
        Some(Entry { row: ROWS[slot.row], table: unsafe { &*slot.table } })
    }

    fn insert(&self, py: Python<'_>, ty: *mut PyTypeObject, row: usize, table: &'static DLPackExchangeAPI) {
        // SAFETY: the token proves the thread is attached; a reference the cache keeps.
        unsafe { (py.Py_IncRef)(ty.cast()) };
        // SAFETY: under the lock (or the GIL); no Python code runs while these borrows live
        // (the release of the evicted type is after it).
        let evicted = self.lock.with(py, || unsafe {
            let slots = &mut *self.slots.get();
            let next = &mut *self.next.get();
            let evicted = std::mem::replace(&mut slots[*next], Slot { ty: ty as usize, row, table });
            *next = (*next + 1) % SLOTS;
            evicted.ty
        });
        py.decref(evicted as *mut PyObject);
    }
}

/// The row and table of `object`'s type. An exact `dlpx.Tensor` is answered by one comparison.
#[inline]
pub fn entry_of(py: Python<'_>, object: *mut PyObject) -> Entry {
    let ty = type_of(py, object);
    if ty == tensor_type() {
        if let Some(entry) = own::exact_entry() {
            return entry;
        }
    }
    entry_of_type(py, ty)
}

/// The row and table of objects of type `ty`, found once and remembered.
#[inline]
pub fn entry_of_type(py: Python<'_>, ty: *mut PyTypeObject) -> Entry {
    match CACHE.find(py, ty) {
        Some(entry) => entry,
        None => resolve(py, ty),
    }
}

/// The first row in `ROWS` that claims `ty` (the last claims every type).
#[cold]
fn resolve(py: Python<'_>, ty: *mut PyTypeObject) -> Entry {
    let published = table::published_v1(py, ty);
    let index = ROWS.iter().position(|row| row.producer.claims(py, ty, published)).unwrap_or(ROWS.len() - 1);
    let entry = Entry { row: ROWS[index], table: ROWS[index].table(published) };
    CACHE.insert(py, ty, index, entry.table);
    entry
}
