//! The `dlpx.Tensor` object: its layout over a [`Tensor`], the type object once created, and
//! the three PyObject entries of dlpx's exchange table. The type's slots are in `type_spec`,
//! its properties in `getters`, `__dlpack__` in `protocol`, `copy.copy` in `copies`, the
//! `dlpx.Device` class in `device_class`. The type is below the importer: its constructor,
//! `dlpx.Tensor(x)`, is the importer handed down when the module creates the type (`create_type`).

mod array_interfaces;
mod buffer;
mod copies;
pub mod device_class;
mod getters;
mod kept_view;
mod protocol;
mod type_spec;

use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3_ffi::{PyObject, PyTypeObject};

pub use type_spec::{create_type, Import};

use crate::abi::*;
use crate::cpython::{type_name, type_of, Python, Raise};
use crate::error::{Error, Out, Result};
use crate::shell::entry::c_entry;
use crate::tensor::Tensor;

/// The object's own fields, after the interpreter's object header (`cpython::layout`: 16 or 32
/// bytes). tp_alloc zeroes the object and the freelist keeps only objects whose deallocation
/// cleared `ready`, so `ready` is 0 until `tensor` is written: an object whose initialisation
/// failed deallocates without touching `tensor`.
#[repr(C)]
struct PyTensor {
    ready: u8,
    tensor: MaybeUninit<Tensor>,
    /// The buffer view, kept once worked out (`kept_view`).
    kept_view: kept_view::KeptView,
    /// The weak references to the object (CPython's list; the type's `__weaklistoffset__`):
    /// NULL until `weakref.ref(t)`, emptied by the deallocation, written NULL by `init`.
    weaklist: *mut PyObject,
}

impl PyTensor {
    /// The object's size: the header, then the fields.
    pub(super) fn basicsize() -> usize {
        crate::cpython::layout::head() + std::mem::size_of::<PyTensor>()
    }

    /// Where the weak reference list lies from the object's start (`tp_weaklistoffset`).
    pub(super) fn weaklist_offset() -> usize {
        crate::cpython::layout::head() + std::mem::offset_of!(PyTensor, weaklist)
    }

    #[inline(always)]
    fn of(object: *mut PyObject) -> *mut PyTensor {
        crate::cpython::layout::fields(object).cast()
    }

    /// # Safety
    /// `object` is a live instance of dlpx.Tensor or a subclass (GIL held).
    #[inline(always)]
    unsafe fn get<'a>(object: *mut PyObject) -> Option<&'a Tensor> {
        let this = PyTensor::of(object);
        // SAFETY: per the contract; `ready` says whether `tensor` was written.
        unsafe { ((*this).ready != 0).then(|| (*this).tensor.assume_init_ref()) }
    }

    /// # Safety
    /// `object` is a new instance nobody else sees yet (from tp_alloc, zeroed, or from the
    /// freelist, `ready` 0): every field is written here, none read. Nobody can hold a weak
    /// reference to it yet, so its list starts empty whatever an earlier life left there.
    unsafe fn init(object: *mut PyObject, tensor: Tensor) {
        let this = PyTensor::of(object);
        // SAFETY: per the contract; written without reading (or dropping) what was there.
        unsafe {
            ptr::addr_of_mut!((*this).tensor).write(MaybeUninit::new(tensor));
            ptr::addr_of_mut!((*this).kept_view).write(kept_view::KeptView::new());
            ptr::addr_of_mut!((*this).weaklist).write(ptr::null_mut());
            (*this).ready = 1;
        }
    }

    /// Whether weak references to the object may exist: its list is not empty, or, on a
    /// free-threaded build, always (another thread's `weakref.ref` writes the list under the
    /// object's lock, so a dying object's list is read by CPython alone, as its own types do).
    ///
    /// # Safety
    /// `object` is an instance of dlpx.Tensor or a subclass being deallocated.
    unsafe fn may_have_weakrefs(object: *mut PyObject) -> bool {
        // SAFETY: per the contract; on a GIL build the GIL orders the list's writes before this.
        crate::cpython::layout::free_threaded() || unsafe { !(*PyTensor::of(object)).weaklist.is_null() }
    }

    /// # Safety
    /// `object` is a live instance of dlpx.Tensor or a subclass whose `tensor` was written.
    #[inline(always)]
    unsafe fn kept_view<'a>(object: *mut PyObject) -> &'a kept_view::KeptView {
        // SAFETY: per the contract (`init` wrote it with the tensor).
        unsafe { &(*PyTensor::of(object)).kept_view }
    }

    /// # Safety
    /// `object` is being deallocated (GIL held); nobody reads it afterwards.
    unsafe fn take(object: *mut PyObject) -> Option<Tensor> {
        let this = PyTensor::of(object);
        // SAFETY: per the contract; `ready` is cleared so the value is read out once.
        unsafe {
            if (*this).ready == 0 {
                return None;
            }
            (*this).ready = 0;
            Some((*this).tensor.assume_init_read())
        }
    }
}

static TENSOR_TYPE: AtomicPtr<PyTypeObject> = AtomicPtr::new(ptr::null_mut());
/// dlpx's exchange table, handed down when the module is created (published on the type).
static OWN_TABLE: AtomicPtr<DLPackExchangeAPI> = AtomicPtr::new(ptr::null_mut());

/// The table `dlpx.Tensor` publishes, once the module has created the type.
#[inline]
pub fn own_table() -> Option<&'static DLPackExchangeAPI> {
    // SAFETY: only `create_type` stores here, a `&'static` table.
    unsafe { OWN_TABLE.load(Ordering::Relaxed).as_ref() }
}

/// The `dlpx.Tensor` type object, once the module has created it.
#[inline]
pub fn tensor_type() -> *mut PyTypeObject {
    TENSOR_TYPE.load(Ordering::Relaxed)
}

/// Whether `ty` is dlpx.Tensor or a subclass.
pub fn is_tensor_type(py: Python<'_>, ty: *mut PyTypeObject) -> bool {
    let base = tensor_type();
    // SAFETY: the token proves the GIL is held; both are live type objects.
    ty == base || (!base.is_null() && unsafe { (py.PyType_IsSubtype)(ty, base) } != 0)
}

/// The tensor inside `object` when it is a `dlpx.Tensor` (or a subclass), else None.
#[inline]
pub fn tensor_of<'a>(py: Python<'a>, object: *mut PyObject) -> Option<&'a Tensor> {
    // SAFETY: instances of our type (and subclasses) have the PyTensor layout; the caller's
    // reference keeps `object`, and so its tensor, alive while the token lives.
    is_tensor_type(py, type_of(py, object)).then(|| unsafe { PyTensor::get(object) }).flatten()
}

/// The tensor inside `object` when its type is exactly dlpx.Tensor: one comparison.
#[inline]
pub fn exact_tensor_of<'a>(py: Python<'a>, object: *mut PyObject) -> Option<&'a Tensor> {
    // SAFETY: as in `tensor_of`.
    (type_of(py, object) == tensor_type()).then(|| unsafe { PyTensor::get(object) }).flatten()
}

/// The DLTensor of `object` when its type is exactly dlpx.Tensor and it may be written: the hot
/// path of the view, for a caller that has no token to spare. A read-only tensor takes the slow
/// path, which refuses it (a view carries no flag: docs/design.md, "Read-only").
///
/// # Safety
/// The GIL is held; `object` is NULL or a live object.
#[inline(always)]
pub unsafe fn exact_writable_view<'a>(object: *mut PyObject) -> Option<&'a DLTensor> {
    // SAFETY: per the contract; a NULL tensor type never equals a live object's type.
    unsafe {
        if object.is_null() || crate::cpython::type_of_unchecked(object) != tensor_type() {
            return None;
        }
        PyTensor::get(object).filter(|t| t.has_bare_view()).map(Tensor::dl_tensor)
    }
}

/// A new `dlpx.Tensor` holding `tensor`.
pub fn wrap(py: Python<'_>, tensor: Tensor) -> Result<*mut PyObject> {
    let object = type_spec::alloc_empty(py, tensor_type())?;
    // SAFETY: a new PyTensor that nobody else sees yet (`alloc_empty`).
    unsafe { PyTensor::init(object, tensor) };
    Ok(object)
}

/// The tensor of `self` in a method or getter.
fn this<'a>(py: Python<'a>, object: *mut PyObject) -> Result<&'a Tensor> {
    tensor_of(py, object).ok_or_else(|| Error::runtime("uninitialised dlpx.Tensor"))
}

// ---- the exchange table's PyObject entries ---------------------------------------------------

/// `managed_tensor_from_py_object_no_sync` for dlpx tensors: `object` (not NULL: the entry
/// point's shell checks it) exported.
pub fn managed_from_py(py: Python<'_>, object: *mut PyObject) -> Result<NonNull<DLManagedTensorVersioned>> {
    checked_tensor(py, object)?.export_versioned(0)
}

/// `dltensor_from_py_object_no_sync` for dlpx tensors: the view's shape and strides live in
/// the tensor the object holds, so they stay valid while the caller holds the object.
///
/// A read-only tensor is refused with BufferError: the view has no flag to say so, and its
/// consumer (a kernel's argument) would write where it may not. The managed entry, whose flags
/// say read-only, serves it; tvm-ffi and torch fall back to it, or to `__dlpack__`, on
/// BufferError (docs/design.md, "Read-only").
pub fn dltensor_from_py(py: Python<'_>, object: *mut PyObject) -> Result<DLTensor> {
    let tensor = checked_tensor(py, object)?;
    if tensor.is_readonly() {
        return Err(Error::buffer(
            "a read-only dlpx.Tensor has no view: a DLTensor cannot say read-only (use managed_tensor_from_py_object_no_sync, whose flags do)",
        ));
    }
    if !tensor.has_bare_view() {
        return Err(Error::buffer(
            "a dlpx.Tensor of padded sub-byte elements has no view: a DLTensor of them means packed (use managed_tensor_from_py_object_no_sync, whose flags say padded)",
        ));
    }
    Ok(*tensor.dl_tensor())
}

/// The tensor of `object` (not NULL), a dlpx.Tensor whose data a kernel is about to use on
/// dlpx's current stream (recorded).
#[inline(always)]
fn checked_tensor<'a>(py: Python<'a>, object: *mut PyObject) -> Result<&'a Tensor> {
    if tensor_type().is_null() {
        return Err(not_initialised());
    }
    match tensor_of(py, object) {
        Some(tensor) => {
            tensor.record_current_stream();
            Ok(tensor)
        }
        None => Err(Error::type_error(format!("expected a dlpx.Tensor, got {}", type_name(py, object)))),
    }
}

/// Without `import dlpx` there is no dlpx.Tensor, so no object can be one.
#[cold]
pub fn not_initialised() -> Error {
    Error::runtime("the dlpx module is not initialised (import dlpx first)")
}

/// `managed_tensor_to_py_object_no_sync`: any producer's managed tensor becomes a dlpx.Tensor,
/// written to `out`. Ownership moves only on success (docs/design.md R4): on failure the caller
/// still owns `managed`.
fn to_py(py: Python<'_>, managed: NonNull<DLManagedTensorVersioned>, out: Out<*mut c_void>) -> Result<c_int> {
    // SAFETY: the caller owns `managed` and gives it up only if this succeeds.
    let object = wrap_adopted(py, || unsafe { Tensor::from_managed(managed) })?;
    out.put(object.cast());
    Ok(0)
}

/// A kernel call's output as a `dlpx.Tensor`: a block of dlpx's allocator the call found as the
/// allocator made it (`Outputs::unchanged` compared its header, shape and strides), adopted
/// without checking it again. On failure the caller still owns `managed`.
///
/// # Safety
/// `managed` is a block of dlpx's allocator, unchanged since it was made, owned by the caller.
pub unsafe fn adopt_output(py: Python<'_>, managed: NonNull<DLManagedTensorVersioned>) -> Result<*mut PyObject> {
    // SAFETY: live, the caller's.
    debug_assert!(crate::allocation::is_ours(unsafe { managed.as_ref() }));
    // SAFETY: valid as made (the caller's contract); given up only if this succeeds.
    wrap_adopted(py, || Ok(unsafe { Tensor::from_valid(managed) }))
}

/// A new `dlpx.Tensor` holding what `adopt` takes, which is called only once the object exists:
/// once adopted, a failure could no longer leave the tensor with the caller.
fn wrap_adopted(py: Python<'_>, adopt: impl FnOnce() -> Result<Tensor>) -> Result<*mut PyObject> {
    if tensor_type().is_null() {
        return Err(not_initialised());
    }
    let object = type_spec::alloc_empty(py, tensor_type())?;
    match adopt() {
        Ok(tensor) => {
            // SAFETY: a fresh object, not yet visible to anyone.
            unsafe { PyTensor::init(object, tensor) };
            Ok(object.cast())
        }
        Err(err) => {
            py.decref(object);
            Err(err)
        }
    }
}

/// `managed_tensor_to_py_object_no_sync` of dlpx's table and of the synthetic tables.
///
/// # Safety
/// The table's contract: the GIL is held; `tensor` is NULL or owned by the caller;
/// `out_py_object` is NULL or writable.
pub unsafe extern "C" fn to_py_entry(tensor: *mut DLManagedTensorVersioned, out_py_object: *mut *mut c_void) -> c_int {
    c_entry!(Raise, "managed_tensor_to_py_object_no_sync", out(out_py_object), given(tensor), |py| {
        to_py(py, tensor, out_py_object)
    })
}
