//! The framework a tensor names for a kernel's outputs (docs/kernels.md, "Which argument
//! decides"): its type's row's, where that row names one (a table of its own: torch, dlpx; a
//! home's `from_dlpack`: numpy, jax, cupy, tvm_ffi, array_api_strict); else the nearest base of
//! its type that names one (`numpy.memmap`, read by the `__dlpack__` row as any subclass whose
//! `__dlpack__` may be its own, names numpy); else, for a numpy scalar (read through its
//! `__array_interface__`), numpy; else none (outputs are `dlpx.Tensor`s). One rule,
//! for a call's first tensor argument and for `dlpx.outputs_like`.

use pyo3_ffi::{PyObject, PyTypeObject};

use super::cache::{entry_of, entry_of_object_or_type, entry_of_type, TypeCache};
use super::{rows, Entry};
use crate::cpython::{attribute, type_of, Python};

impl Entry {
    /// Whether outputs can go back to this entry's framework: a table of its own, or a row
    /// without one that names its producer's `from_dlpack`.
    #[inline(always)]
    pub fn names_framework(&self) -> bool {
        !(self.row.synthetic.is_some() && self.row.home.is_none())
    }
}

/// The entry of the framework outputs like `object` go back to: its own type's in the common
/// case (one check past the row's lookup), else its nearest framework base's, else its own.
#[inline(always)]
pub fn framework_of(py: Python<'_>, object: *mut PyObject) -> Entry {
    let entry = entry_of(py, object);
    match entry.names_framework() {
        true => entry,
        false => framework_of_subtype(py, type_of(py, object), entry),
    }
}

/// The framework of types whose own row names none, each found once (a walk of its MRO).
static FRAMEWORKS_OF_TYPES: TypeCache = TypeCache::new();

#[cold]
#[inline(never)]
fn framework_of_subtype(py: Python<'_>, ty: *mut PyTypeObject, own: Entry) -> Entry {
    if let Some(entry) = FRAMEWORKS_OF_TYPES.find(py, ty) {
        return entry;
    }
    let entry = framework_type_of(py, ty.cast()).map_or(own, |base| entry_of_type(py, base.cast()));
    FRAMEWORKS_OF_TYPES.insert(py, ty, entry);
    entry
}

/// Whether `object` (a tensor or a type) names a framework itself.
pub fn names_framework(py: Python<'_>, object: *mut PyObject) -> bool {
    entry_of_object_or_type(py, object).names_framework()
}

/// The type that names the framework of a type `ty` whose own row names none: its nearest base
/// that names one (`numpy.memmap`: `numpy.ndarray`), else, for a producer's scalar type, its
/// array type (`numpy.float32`: `numpy.ndarray`); borrowed (a base, or numpy's type, lives as
/// long as `ty`).
pub fn framework_type_of(py: Python<'_>, ty: *mut PyObject) -> Option<*mut PyObject> {
    nearest_framework_base(py, ty).or_else(|| rows::numpy::array_type_of_scalar(py, ty.cast()).map(|t| t.cast()))
}

/// The first base of the type `ty` that names a framework, `ty` and `object` (the last of every
/// MRO) excluded; borrowed (a base lives as long as its subclass).
fn nearest_framework_base(py: Python<'_>, ty: *mut PyObject) -> Option<*mut PyObject> {
    let mro = attribute(py, ty, c"__mro__")?;
    // SAFETY: GIL held; a type's `__mro__` is a tuple (its items borrowed while `mro` is held,
    // and the bases live as long as the type).
    let count = unsafe { (py.PyTuple_Size)(mro.as_ptr()) };
    (1..count - 1)
        // SAFETY: as above; in range.
        .map(|i| unsafe { (py.PyTuple_GetItem)(mro.as_ptr(), i) })
        .find(|&base| !base.is_null() && names_framework(py, base))
}
