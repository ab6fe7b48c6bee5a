//! The importer seam: every way dlpx reads a producer's tensors is a row, a [`Producer`];
//! a type's row is found once (`cache`) and is the only dispatch for the importer and the
//! kernel API alike (docs/design.md, "Producers: one seam"). Adding a producer is one file
//! here and one line in [`ROWS`].

mod array_api_strict;
mod cache;
mod capsule_object;
mod discovered;
mod dispatch;
mod dlpack_call;
mod dlpack_method;
mod faithful;
mod guard;
mod buffer_protocol;
mod held_buffer;
mod interface_dict;
pub mod held_object;
mod jax;
pub mod kernel;
mod numpy;
mod own;
mod synthetic;
mod table;
mod torch;
mod tvm_ffi;

use std::ptr::NonNull;

use pyo3_ffi::{PyObject, PyTypeObject};

pub use cache::{entry_of, entry_of_type};
pub use dispatch::{import, managed, view, view_in_place};
pub use faithful::Suspicion;
pub use guard::Guard;
pub use table::published_head;

use crate::abi::*;
use crate::cpython::Python;
use crate::error::Result;
use crate::tensor::Tensor;

/// Every row, in the order a new type is matched against them: the first that claims it is
/// its row. `dlpack`, last, claims everything.
pub static ROWS: [&Row; 9] = [
    &own::ROW,
    &torch::ROW,
    &table::ROW,
    &numpy::ROW,
    &tvm_ffi::ROW,
    &jax::ROW,
    &array_api_strict::ROW,
    &capsule_object::ROW,
    &dlpack_method::ROW,
];

/// What an importer asks for besides the tensor itself (the array API's `from_dlpack`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// The result on this device (a copy when it is elsewhere).
    pub device: Option<DLDevice>,
    /// True: always a copy; False: never; None: only when needed (docs/design.md R10).
    pub copy: Option<bool>,
}

impl Request {
    pub const PLAIN: Request = Request { device: None, copy: None };

    /// Whether the producer must be asked for more than its tensor as it is.
    pub fn asks_more(&self) -> bool {
        self.device.is_some() || self.copy == Some(true)
    }
}

/// One row: a way of reading a producer's tensors, what C uses for its objects, and its guard.
pub struct Row {
    /// The row's name: `dlpx._native._row_of`, the off switch (`DLPX_DIRECT_OFF`), messages.
    pub name: &'static str,
    /// The row's synthetic table; None where its types publish their own, read through it.
    pub synthetic: Option<&'static DLPackExchangeAPI>,
    /// The guard of a read that bypasses the producer's own export (docs/design.md, "A guard per
    /// direct read"); None for rows that read through it (a table, `__dlpack__`, a capsule).
    pub guard: Option<&'static Guard>,
    /// How it reads.
    pub producer: &'static dyn Producer,
}

impl Row {
    /// The table a C caller uses for this row's objects: the row's synthetic one, or the type's
    /// own (`published`).
    pub fn table(&self, published: Option<&'static DLPackExchangeAPI>) -> &'static DLPackExchangeAPI {
        self.synthetic.or(published).expect("a row without a synthetic table claims only types that publish one")
    }
}

/// What a read gives: an owning managed tensor, None where it does not cover the object.
pub type Read = Result<Option<NonNull<DLManagedTensorVersioned>>>;

/// A type's row and the table a C caller uses for its objects.
#[derive(Clone, Copy)]
pub struct Entry {
    pub row: &'static Row,
    pub table: &'static DLPackExchangeAPI,
}

/// How a row reads a producer's tensors: the entries of a `DLPackExchangeAPI`, in Rust, and what
/// the seam needs to keep them faithful. A read returns `Ok(None)` for an object it does not
/// cover (the `dlpack` row then answers) and `Err` for one it refuses for good.
pub trait Producer: Sync {
    /// Whether objects of type `ty` are this row's; `published` is the major-1 table the type
    /// publishes, if any. Asked once per type, in `ROWS` order.
    fn claims(&self, py: Python<'_>, ty: *mut PyTypeObject, published: Option<&'static DLPackExchangeAPI>) -> bool;

    /// `managed_tensor_from_py_object_no_sync`: an owning managed tensor of `object`.
    fn managed(
        &self,
        py: Python<'_>,
        object: *mut PyObject,
        entry: Entry,
    ) -> Result<Option<NonNull<DLManagedTensorVersioned>>>;

    /// An owning import as a [`Tensor`] (the importer's currency); by default through
    /// [`Producer::managed`].
    fn import(&self, py: Python<'_>, object: *mut PyObject, entry: Entry, request: Request) -> Result<Option<Tensor>> {
        let _ = request;
        match self.managed(py, object, entry)? {
            // SAFETY: a managed tensor we own; should validation refuse it, it is deleted there.
            Some(managed) => unsafe { Tensor::from_managed_or_delete(managed) }.map(Some),
            None => Ok(None),
        }
    }

    /// `dltensor_from_py_object_no_sync`: fills `out` with a non-owning view valid while the
    /// caller holds `object`; Ok(false) where the row has none (an owner is taken instead).
    fn view(&self, py: Python<'_>, object: *mut PyObject, entry: Entry, out: &mut DLTensor) -> Result<bool> {
        let _ = (py, object, entry, out);
        Ok(false)
    }

    /// What the producer's own `__dlpack__` would refuse, or export as other values, that this
    /// row's read of `object` (described by `dl`) let through (docs/design.md, "Faithful
    /// import"). Most rows read through the producer's own checks: None.
    fn suspicion(&self, py: Python<'_>, object: *mut PyObject, dl: &DLTensor) -> Result<Option<Suspicion>> {
        let _ = (py, object, dl);
        Ok(None)
    }

    /// For [`Suspicion::Negated`] under `copy=True`: a new object of the producer's holding the
    /// values the object means (torch's `resolve_neg()`).
    fn resolved(&self, py: Python<'_>, object: *mut PyObject) -> Result<Option<NonNull<PyObject>>> {
        let _ = (py, object);
        Ok(None)
    }
}

/// The table `dlpx_exchange_api_of` gives for `object`, or for `object` itself when it is a type.
pub fn table_of(py: Python<'_>, object: *mut PyObject) -> Result<&'static DLPackExchangeAPI> {
    let entry = match crate::cpython::is_type(py, object) {
        true => entry_of_type(py, object.cast()),
        false => entry_of(py, object),
    };
    Ok(entry.table)
}

/// The name of the row that reads `object`'s type (or `object`'s, when it is a type).
pub fn row_name(py: Python<'_>, object: *mut PyObject) -> &'static str {
    match crate::cpython::is_type(py, object) {
        true => entry_of_type(py, object.cast()).row.name,
        false => entry_of(py, object).row.name,
    }
}
