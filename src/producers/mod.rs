//! The importer seam: every way dlpx reads a producer's tensors is a row, a [`Producer`];
//! a type's row is found once (`cache`) and is the only dispatch for the importer and the
//! kernel API alike (docs/design.md, "Producers: one seam"). Adding a producer is one file
//! in `rows/` and one line in [`ROWS`].

mod cache;
mod discovered;
mod dlpack_call;
mod faithful;
mod framework;
mod guard;
mod handover;
mod held;
mod held_buffer;
mod home;
mod interface_dict;
mod one_path;
mod rows;
mod served;
mod synthetic;
mod table_answer;

use std::cell::Cell;

use pyo3_ffi::{PyObject, PyTypeObject};

pub use cache::{entry_of, entry_of_object_or_type, entry_of_type, row_name, table_of};
pub use faithful::{Suspect, Suspicion};
pub use framework::{framework_of, framework_type_of, names_framework};
pub use guard::{warn_of_unknown_names, Guard};
pub use handover::Handover;
pub use home::{allocator_like, current_stream_in, table_like, to_py_in, to_py_like, to_py_of};
pub use one_path::{import, managed, view, view_in_place};
pub use rows::table::published_head;
pub use served::{counted, served};

use crate::abi::*;
use crate::cpython::Python;
use crate::error::Result;

/// Every row, in the order a new type is matched against them: the first that claims it is
/// its row. DLPack first, always (docs/design.md R12): `dlpack` claims the types with a
/// `__dlpack__`; then the CUDA array interface, numpy's array interface, and last the buffer
/// protocol, which claims everything left.
pub static ROWS: [&Row; 13] = [
    &rows::dlpx::ROW,
    &rows::torch::ROW,
    &rows::table::ROW,
    &rows::numpy::ROW,
    &rows::tvm_ffi::ROW,
    &rows::jax::ROW,
    &rows::array_api_strict::ROW,
    &rows::cupy::ROW,
    &rows::capsule::ROW,
    &rows::dlpack::ROW,
    &rows::cuda_array_interface::ROW,
    &rows::array_interface::ROW,
    &rows::buffer::ROW,
];

/// The rows a guard's switch names (`DLPX_DIRECT_OFF` when `off`, else `DLPX_DIRECT_VERIFY`):
/// every row with a guard, and for the off switch torch's, whose native checks it turns off.
pub(crate) fn switchable_rows(off: bool) -> impl Iterator<Item = &'static str> {
    ROWS.iter().filter(|row| row.guard.is_some()).map(|row| row.name).chain(off.then_some(rows::torch::ROW.name))
}

/// Whether `ty` (or a base) has the attribute `name`: how a row for a protocol claims a type.
pub(crate) fn type_has(py: Python<'_>, ty: *mut PyTypeObject, name: &std::ffi::CStr) -> bool {
    // SAFETY: GIL held; a live type; a failed lookup's AttributeError is cleared.
    unsafe {
        let found = (py.PyObject_GetAttrString)(ty.cast(), name.as_ptr());
        if found.is_null() {
            (py.PyErr_Clear)();
            return false;
        }
        py.decref(found);
        true
    }
}

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

/// What an entry point asks of a row: the importer's request, where a borrowed view goes when one
/// will do (a kernel's view: a row that has one writes it there and hands over [`Handover::View`]),
/// and whether the tensor's data is next used on dlpx's current stream (a `dlpx.Tensor`) rather
/// than on the stream the row's table reports (C: a kernel launches there).
#[derive(Clone, Copy)]
pub struct Ask<'a> {
    pub request: Request,
    pub view: Option<&'a Cell<DLTensor>>,
    pub on_dlpx_stream: bool,
    /// The caller only reads the tensor (a kernel's read view): a producer with a read-only
    /// export gives that one (torch's const table leaves copy-on-write storage unmaterialised).
    pub read_only: bool,
}

impl<'a> Ask<'a> {
    /// An owning managed tensor as the producer has it (C: `dlpx_import`, the synthetic tables).
    pub const MANAGED: Ask<'static> =
        Ask { request: Request::PLAIN, view: None, on_dlpx_stream: false, read_only: false };

    /// The importer's tensor (`from_dlpack`, `dlpx.Tensor(x)`).
    pub const fn tensor(request: Request) -> Ask<'static> {
        Ask { request, view: None, on_dlpx_stream: true, read_only: false }
    }

    /// A view for a kernel, borrowed into `out` where the row has one; `read_only` when the
    /// kernel only reads it.
    pub fn view(out: &'a Cell<DLTensor>, read_only: bool) -> Ask<'a> {
        Ask { request: Request::PLAIN, view: Some(out), on_dlpx_stream: false, read_only }
    }

    /// This ask, for an owning managed tensor instead of a view.
    pub fn managed(self) -> Ask<'static> {
        Ask { request: self.request, view: None, on_dlpx_stream: self.on_dlpx_stream, read_only: self.read_only }
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
    /// What the row's read lets through that the producer's own `__dlpack__` checks
    /// (docs/design.md, "Faithful import"); None for rows that read through those checks.
    pub suspect: Option<&'static dyn Suspect>,
    /// The way back to the producer's type for a row without a table of its own (its
    /// `from_dlpack`; `home`): a kernel's outputs come back as the caller's type.
    pub home: Option<&'static home::Home>,
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

/// A type's row and the table a C caller uses for its objects.
#[derive(Clone, Copy)]
pub struct Entry {
    pub row: &'static Row,
    pub table: &'static DLPackExchangeAPI,
}

/// A row's answer for an object ([`Producer::answer`]): what it hands over ([`Handover::Uncovered`]
/// where it does not cover the object: the `dlpack` row, the producer's own `__dlpack__`, then
/// answers), or the refusal of an object it refuses for good.
pub type Answer<'py> = Result<Handover<'py>>;

/// How a row reads a producer's tensors. A row answers one question ([`Producer::answer`]): the
/// managed tensor for this object, in the form the producer hands it over (a table's pointer, a
/// capsule, a block dlpx fills from what it read), or a borrowed view where the entry point takes
/// one. What to do with it — validate it, make it a `Tensor`,
/// hand it to C — is the seam's, once, for every row (`one_path`).
pub trait Producer: Sync {
    /// Whether objects of type `ty` are this row's; `published` is the major-1 table the type
    /// publishes, if any. Asked once per type, in `ROWS` order.
    fn claims(&self, py: Python<'_>, ty: *mut PyTypeObject, published: Option<&'static DLPackExchangeAPI>) -> bool;

    /// The row's answer for `object`: the managed tensor it hands over
    /// (`managed_tensor_from_py_object_no_sync`), or a borrowed view, written to `ask.view`, where
    /// the entry point takes one and the row has one (`dltensor_from_py_object_no_sync`). The row
    /// may ask the producer for what `ask.request` wants (the `dlpack` row passes it to
    /// `__dlpack__`); the seam serves the rest.
    fn answer<'py>(&self, py: Python<'py>, object: *mut PyObject, entry: Entry, ask: Ask<'_>) -> Answer<'py>;

    /// What stands between an object and a crash in the producer's own `__dlpack__`, checked
    /// where the row's read is switched off (`DLPX_DIRECT_OFF`) and `__dlpack__` answers: a
    /// refusal of what it would crash on (tvm_ffi's moved-out wrapper). Nothing by default.
    fn refuse_before_dlpack(&self, _py: Python<'_>, _object: *mut PyObject) -> Result<()> {
        Ok(())
    }

    /// Lets the row learn what its outputs need from `like` (an object of its row, or a type;
    /// GIL held) before [`Producer::output_allocator`] is asked, where no tensor of the row may
    /// have been read yet (`dlpx_allocate_like`): torch finds its C shim on its first tensor.
    fn ready_outputs(&self, _py: Python<'_>, _like: *mut PyObject) {}

    /// The allocator of a kernel's outputs in this row's framework: its table's (`entry.table`)
    /// unless the row has a faster way to the same tensors (torch: its C shim).
    fn output_allocator(&self, entry: Entry) -> DLPackManagedTensorAllocator {
        entry.table.managed_tensor_allocator
    }

    /// `managed`, an output [`Producer::output_allocator`] made, as the row's object: Some where
    /// the row made it its own way (on failure the caller keeps `managed`), None for its table's
    /// `to_py` to convert.
    fn own_output_to_py(
        &self,
        _py: Python<'_>,
        _managed: std::ptr::NonNull<DLManagedTensorVersioned>,
    ) -> Option<Result<*mut PyObject>> {
        None
    }

    /// The attribute that carries the row's protocol (`__dlpack__`, `__cuda_array_interface__`,
    /// `__array_interface__`), for a row that reads a protocol rather than a producer's types: it
    /// claims the types that have it, and an object whose type no row claims but that has it on
    /// itself goes to the first such row in `ROWS` (R12's order, written once: `rows::buffer`).
    /// None for the other rows.
    fn protocol(&self) -> Option<&'static std::ffi::CStr> {
        None
    }
}
