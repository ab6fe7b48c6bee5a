//! Type → row: the one dispatch of the importer seam (docs/design.md, "Producers: one seam").

use pyo3_ffi::{PyObject, PyTypeObject};

use super::rows::{dlpx, table};
use super::{Entry, Row, ROWS};
use crate::abi::DLPackExchangeAPI;
use crate::cpython::{racing_copy, type_of, Python, SeqLock};
use crate::tensor_type::tensor_type;

/// Types remembered at once; the oldest goes first (round robin).
const SLOTS: usize = 32;

/// One remembered type: its address (0: empty), its entry's row and table.
#[derive(Clone, Copy)]
struct Slot {
    ty: usize,
    row: *const Row,
    table: *const DLPackExchangeAPI,
}

/// The slots. Each holds a strong reference to its type, so a cached type can never die and be
/// replaced by another at the same address; eviction releases it. Readers take no lock: a
/// free-threaded reader scans under the seqlock's count and retries if an insert was inside.
#[derive(Clone, Copy)]
struct Slots {
    slots: [Slot; SLOTS],
    next: usize,
}

/// Type → entry, remembered: the rows of types ([`entry_of_type`]), and the framework of types
/// whose row names none (`framework`).
pub(super) struct TypeCache(SeqLock<Slots>);

impl TypeCache {
    pub(super) const fn new() -> Self {
        const EMPTY: Slot = Slot { ty: 0, row: std::ptr::null(), table: std::ptr::null() };
        TypeCache(SeqLock::new(Slots { slots: [EMPTY; SLOTS], next: 0 }))
    }

    #[inline]
    pub(super) fn find(&self, py: Python<'_>, ty: *mut PyTypeObject) -> Option<Entry> {
        let slot = self.0.read_raw(py, |cache, racy| {
            // SAFETY: `cache` points to the live cache; where a writer may be inside (`racy`), each
            // word is read volatile and the seqlock discards what was read then.
            unsafe {
                let slots = std::ptr::addr_of!((*cache).slots).cast::<Slot>();
                let ty_of = |slot: *const Slot| match racy {
                    true => std::ptr::read_volatile(std::ptr::addr_of!((*slot).ty)),
                    false => (*slot).ty,
                };
                (0..SLOTS).map(|i| slots.add(i)).find(|&slot| ty_of(slot) == ty as usize).map(|slot| match racy {
                    true => racing_copy(slot),
                    false => *slot,
                })
            }
        })?;
        // SAFETY: only process-lifetime rows and tables are stored (the rows' statics, tables
        // that producers publish for the life of the process).
        Some(Entry { row: unsafe { &*slot.row }, table: unsafe { &*slot.table } })
    }

    pub(super) fn insert(&self, py: Python<'_>, ty: *mut PyTypeObject, entry: Entry) {
        // SAFETY: the token proves the thread is attached; a reference the cache keeps.
        unsafe { (py.Py_IncRef)(ty.cast()) };
        let slot = Slot { ty: ty as usize, row: entry.row, table: entry.table };
        // No Python code runs while the cache is written (the release of the evicted type is after).
        let evicted = self.0.write(py, |cache| {
            let evicted = std::mem::replace(&mut cache.slots[cache.next], slot);
            cache.next = (cache.next + 1) % SLOTS;
            evicted.ty
        });
        py.decref(evicted as *mut PyObject);
    }
}

/// The row of each type seen.
static ROWS_OF_TYPES: TypeCache = TypeCache::new();

/// The row and table of `object`'s type. An exact `dlpx.Tensor` is answered by one comparison.
#[inline]
pub fn entry_of(py: Python<'_>, object: *mut PyObject) -> Entry {
    let ty = type_of(py, object);
    if ty == tensor_type() {
        if let Some(entry) = dlpx::exact_entry() {
            return entry;
        }
    }
    entry_of_type(py, ty)
}

/// The row and table of objects of type `ty`, found once and remembered.
#[inline]
pub fn entry_of_type(py: Python<'_>, ty: *mut PyTypeObject) -> Entry {
    match ROWS_OF_TYPES.find(py, ty) {
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
    ROWS_OF_TYPES.insert(py, ty, entry);
    entry
}

/// The table `dlpx_exchange_api_of` gives for `object`, or for `object` itself when it is a type.
pub fn table_of(py: Python<'_>, object: *mut PyObject) -> &'static DLPackExchangeAPI {
    entry_of_object_or_type(py, object).table
}

/// The name of the row that reads `object`'s type (or `object`'s, when it is a type).
pub fn row_name(py: Python<'_>, object: *mut PyObject) -> &'static str {
    entry_of_object_or_type(py, object).row.name
}

/// The entry of `object`'s type, or of `object` itself when it is a type.
pub fn entry_of_object_or_type(py: Python<'_>, object: *mut PyObject) -> Entry {
    match crate::cpython::is_type(py, object) {
        true => entry_of_type(py, object.cast()),
        false => entry_of(py, object),
    }
}
