//! The `dlpx.Tensor` type: its slots (construction, deallocation), its spec (the methods and
//! properties, each the one shell around its body), and its creation with dlpx's exchange table
//! published on it (docs/design.md R1).

use std::ffi::{c_int, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3_ffi::{PyGetSetDef, PyMemberDef, PyMethodDef, PyObject, PyTypeObject, PyType_Slot, PyType_Spec, Py_ssize_t};

use super::{array_interfaces, buffer, copies, getters, protocol, tensor_type, PyTensor, OWN_TABLE, TENSOR_TYPE};
use crate::abi::*;
use crate::cpython::buffer::{GetBufferFn, ReleaseBufferFn, PY_BF_GETBUFFER, PY_BF_RELEASEBUFFER};
use crate::cpython::{type_of, CStatic, ExceptionGuard, Freelist, Owned, Python, Raise};
use crate::error::{boundary, guard, Error, Result};
use crate::shell::{getset_def, method_def, shell};
use crate::tensor::Tensor;

/// What `dlpx.Tensor(x)` does with `x`: the importer (`from_dlpack`), handed down by the module
/// that creates the type, which sits above both.
pub type Import = fn(Python<'_>, *mut PyObject) -> Result<Tensor>;
static IMPORT: std::sync::OnceLock<Import> = std::sync::OnceLock::new();

/// `dlpx.Tensor`'s own tp_alloc / tp_free, read once: PyType_GetSlot costs a call per object.
static ALLOC: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());
static FREE: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());

/// Deallocated dlpx.Tensors (the exact type, which is not a GC type), kept for the next one.
static KEPT: Freelist = Freelist::new();

/// An instance of `ty`, dlpx.Tensor or a subclass, whose `tensor` is not written (`ready` 0).
pub(super) fn alloc_empty(py: Python<'_>, ty: *mut PyTypeObject) -> Result<*mut PyObject> {
    if ty.is_null() {
        return Err(super::not_initialised());
    }
    if ty == tensor_type() {
        // SAFETY: the list keeps only dlpx.Tensors, whose `ready` their deallocation cleared;
        // `PyTensor::init` writes every field before anything reads one.
        if let Some(object) = unsafe { KEPT.take(py, ty) } {
            return Ok(object);
        }
    }
    // SAFETY: GIL held; `ty` is our (sub)type; tp_alloc zeroes the object, so `ready` is 0.
    let object = unsafe {
        let alloc = if ty == tensor_type() {
            ALLOC.load(Ordering::Relaxed)
        } else {
            (py.PyType_GetSlot)(ty, pyo3_ffi::Py_tp_alloc)
        };
        let alloc: pyo3_ffi::allocfunc = std::mem::transmute(alloc);
        alloc(ty, 0)
    };
    py.check(object)
}

unsafe extern "C" fn tensor_dealloc(object: *mut PyObject) {
    // SAFETY: CPython calls tp_dealloc with the GIL held, once, for an instance of our
    // (sub)type; a module that created the type means an interpreter is running.
    let Ok(py) = (unsafe { Python::assume_attached() }) else { return };
    let ty = type_of(py, object);
    // Weak references die first, while the object is whole: their callbacks get the dead
    // reference, never the object. CPython empties the list, so a kept object starts its next
    // life with none (`PyTensor::init` writes it empty all the same). A subclass's deallocation
    // leaves the list to this one: the base has it.
    // SAFETY: an instance of our (sub)type being deallocated, its count 0; GIL held.
    unsafe {
        if PyTensor::may_have_weakrefs(object) {
            (py.PyObject_ClearWeakRefs)(object);
        }
    }
    // SAFETY: the object is being deallocated; nobody reads it afterwards.
    let tensor = unsafe { PyTensor::take(object) };
    // Dropping may run a producer's deleter; it must not unwind into CPython.
    let saved = ExceptionGuard::save_with_gil(py);
    guard("dlpx.Tensor deallocation", || drop(tensor));
    drop(saved);
    // SAFETY: kept for the next dlpx.Tensor, or given to the type's own tp_free (every type has
    // one), once; the instance's reference to its heap type is released last.
    unsafe {
        let kept = ty == tensor_type() && KEPT.keep(py, object);
        if !kept {
            let free = match ty == tensor_type() {
                true => FREE.load(Ordering::Relaxed),
                false => (py.PyType_GetSlot)(ty, pyo3_ffi::Py_tp_free),
            };
            let free: pyo3_ffi::freefunc = std::mem::transmute(free);
            free(object.cast());
        }
        (py.Py_DecRef)(ty.cast());
    }
}

unsafe extern "C" fn tensor_new(ty: *mut PyTypeObject, args: *mut PyObject, kwargs: *mut PyObject) -> *mut PyObject {
    boundary(Raise, "dlpx.Tensor", || {
        // SAFETY: CPython calls tp_new with the GIL held.
        let py = unsafe { Python::assume_attached()? };
        // SAFETY: CPython passes a tuple of arguments and a dict or NULL, with the GIL held.
        let (nargs, nkwargs) =
            unsafe { ((py.PyTuple_Size)(args), if kwargs.is_null() { 0 } else { (py.PyDict_Size)(kwargs) }) };
        if nargs != 1 || nkwargs != 0 {
            return Err(Error::type_error(
                "takes exactly one argument, an object that supports DLPack (or use dlpx.empty / dlpx.from_dlpack)",
            ));
        }
        // SAFETY: index 0 exists; the reference is borrowed.
        let source = unsafe { (py.PyTuple_GetItem)(args, 0) };
        let import = IMPORT.get().ok_or_else(super::not_initialised)?;
        let tensor = import(py, source)?;
        let object = alloc_empty(py, ty)?;
        // SAFETY: fresh object of our (sub)type.
        unsafe { PyTensor::init(object, tensor) };
        Ok(object)
    })
}

const DOC: &CStr = c"Tensor(source, /)
--

A tensor that dlpx carries between frameworks through DLPack.

dlpx.Tensor does no arithmetic: it owns (or shares) memory, describes it, and exchanges it
through __dlpack__ and the C exchange table published on the type as
__dlpack_c_exchange_api__. Make one with dlpx.empty(...) or dlpx.from_dlpack(obj);
dlpx.Tensor(obj) is the same as dlpx.from_dlpack(obj).";

static METHODS: CStatic<[PyMethodDef; 6]> = CStatic::new([
    method_def!("__dlpack__", fastcall protocol::dlpack, protocol::DLPACK_DOC),
    method_def!("__array__", fastcall array_interfaces::array, array_interfaces::ARRAY_DOC),
    method_def!("__dlpack_device__", noargs protocol::dlpack_device, c"__dlpack_device__($self, /)\n--\n\nThe device as DLPack integers: (device_type, device_id)."),
    method_def!("__copy__" as "dlpx.Tensor.__copy__", noargs copies::copy, copies::COPY_DOC),
    method_def!("__deepcopy__" as "dlpx.Tensor.__deepcopy__", one copies::deepcopy, copies::DEEPCOPY_DOC),
    PyMethodDef::zeroed(),
]);
/// `__weaklistoffset__`, the stable ABI's way to give a type weak references (3.9 and later; 3.12's
/// `Py_TPFLAGS_MANAGED_WEAKREF` is not in the limited API): PyType_FromSpec reads the offset
/// (`PyTensor::weaklist_offset()`, set in `create_type`) into `tp_weaklistoffset` and drops the
/// member, so the type grows no attribute.
static MEMBERS: CStatic<[PyMemberDef; 2]> = CStatic::new([
    PyMemberDef {
        name: c"__weaklistoffset__".as_ptr(),
        type_code: pyo3_ffi::Py_T_PYSSIZET,
        offset: 0,
        flags: pyo3_ffi::Py_READONLY,
        doc: ptr::null(),
    },
    PyMemberDef { name: ptr::null(), type_code: 0, offset: 0, flags: 0, doc: ptr::null() },
]);
static GETSET: CStatic<[PyGetSetDef; 15]> = CStatic::new([
    getset_def!("shape" as "dlpx.Tensor.get_shape", getters::shape, c"Extents of each dimension, a tuple of ints."),
    getset_def!("strides" as "dlpx.Tensor.get_strides", getters::strides, c"Strides of each dimension in elements (not bytes), a tuple of ints."),
    getset_def!("ndim" as "dlpx.Tensor.get_ndim", getters::ndim, c"Number of dimensions."),
    getset_def!("numel" as "dlpx.Tensor.get_numel", getters::numel, c"Number of elements."),
    getset_def!("nbytes" as "dlpx.Tensor.get_nbytes", getters::nbytes, c"Bytes the elements occupy (sub-byte types packed unless flagged padded)."),
    getset_def!("byte_offset" as "dlpx.Tensor.get_byte_offset", getters::byte_offset, c"DLTensor.byte_offset: bytes from the data pointer to the first element."),
    getset_def!("data_ptr" as "dlpx.Tensor.get_data_ptr", getters::data_ptr, c"Address of the first element (data + byte_offset), 0 for empty tensors."),
    getset_def!("is_contiguous" as "dlpx.Tensor.get_is_contiguous", getters::is_contiguous, c"Whether the strides are compact row-major."),
    getset_def!("readonly" as "dlpx.Tensor.get_readonly", getters::readonly, c"Whether the producer marked the memory read-only."),
    getset_def!("dtype" as "dlpx.Tensor.get_dtype", getters::dtype, c"Element type name: 'float32', 'bfloat16', 'float8_e4m3fn', 'bool', 'complex64', ..."),
    getset_def!("dtype_raw" as "dlpx.Tensor.get_dtype_raw", getters::dtype_raw, c"The DLPack dtype as (code, bits, lanes)."),
    getset_def!("device" as "dlpx.Tensor.get_device", getters::device, c"The device, a dlpx.Device (prints as 'cpu:0', compares with such strings)."),
    getset_def!("__array_interface__" as "dlpx.Tensor.__array_interface__", array_interfaces::array_interface, c"numpy's array interface (version 3) of the tensor's host memory; absent for device memory."),
    getset_def!("__cuda_array_interface__" as "dlpx.Tensor.__cuda_array_interface__", array_interfaces::cuda_array_interface, c"The CUDA array interface (version 3, with the stream to synchronise with) of CUDA memory; absent for host memory."),
    PyGetSetDef { name: ptr::null(), get: None, set: None, doc: ptr::null(), closure: ptr::null_mut() },
]);
static SLOTS: CStatic<[PyType_Slot; 10]> = CStatic::new([
    PyType_Slot { slot: pyo3_ffi::Py_tp_dealloc, pfunc: tensor_dealloc as *mut c_void },
    PyType_Slot { slot: pyo3_ffi::Py_tp_new, pfunc: tensor_new as *mut c_void },
    PyType_Slot {
        slot: pyo3_ffi::Py_tp_repr,
        pfunc: shell!(unary getters::repr, "dlpx.Tensor.__repr__") as *mut c_void,
    },
    PyType_Slot { slot: pyo3_ffi::Py_tp_doc, pfunc: DOC.as_ptr() as *mut c_void },
    PyType_Slot { slot: pyo3_ffi::Py_tp_getset, pfunc: GETSET.get().cast() },
    PyType_Slot { slot: pyo3_ffi::Py_tp_methods, pfunc: METHODS.get().cast() },
    PyType_Slot { slot: pyo3_ffi::Py_tp_members, pfunc: MEMBERS.get().cast() },
    PyType_Slot { slot: PY_BF_GETBUFFER, pfunc: buffer::get_buffer as GetBufferFn as *mut c_void },
    PyType_Slot { slot: PY_BF_RELEASEBUFFER, pfunc: buffer::release_buffer as ReleaseBufferFn as *mut c_void },
    PyType_Slot { slot: 0, pfunc: ptr::null_mut() },
]);
static SPEC: CStatic<PyType_Spec> = CStatic::new(PyType_Spec {
    name: c"dlpx.Tensor".as_ptr(),
    basicsize: 0, // PyTensor::basicsize(), set in `create_type`: the header's size is learned at load
    itemsize: 0,
    // Py_TPFLAGS_DEFAULT before 3.10 (version tag; ignored later) | BASETYPE so users may subclass.
    flags: ((1u64 << 18) | pyo3_ffi::Py_TPFLAGS_BASETYPE) as std::ffi::c_uint,
    slots: SLOTS.get().cast(),
});

/// Creates the type, publishes the exchange table on it, and remembers it; `import` is what its
/// constructor does. Called once at module initialisation; a second call returns the same type.
pub fn create_type(py: Python<'_>, own: &'static DLPackExchangeAPI, import: Import) -> Result<*mut PyObject> {
    OWN_TABLE.store((own as *const DLPackExchangeAPI).cast_mut(), Ordering::Relaxed);
    let _ = IMPORT.set(import);
    let existing = tensor_type();
    if !existing.is_null() {
        // SAFETY: GIL held; the module keeps one more reference.
        unsafe { (py.Py_IncRef)(existing.cast()) };
        return Ok(existing.cast());
    }
    // SAFETY: GIL held; the spec and everything it points to is 'static; it is written once,
    // here, before CPython reads it, and the type is created once.
    let ty = Owned::new(py, unsafe {
        (*SPEC.get()).basicsize = PyTensor::basicsize() as c_int;
        (*MEMBERS.get())[0].offset = PyTensor::weaklist_offset() as Py_ssize_t;
        (py.PyType_FromSpecWithBases)(SPEC.get(), ptr::null_mut())
    })?;
    publish_exchange_api(py, ty.as_ptr())?;
    // SAFETY: GIL held; a live type; both slots are always filled (inherited from object).
    unsafe {
        ALLOC.store((py.PyType_GetSlot)(ty.as_ptr().cast(), pyo3_ffi::Py_tp_alloc), Ordering::Relaxed);
        FREE.store((py.PyType_GetSlot)(ty.as_ptr().cast(), pyo3_ffi::Py_tp_free), Ordering::Relaxed);
    }
    crate::cpython::immortalise_if_free_threaded(py, ty.as_ptr());
    TENSOR_TYPE.store(ty.as_ptr().cast(), Ordering::Release);
    // The static keeps one reference for the life of the process.
    // SAFETY: GIL held.
    unsafe { (py.Py_IncRef)(ty.as_ptr()) };
    Ok(ty.into_ptr())
}

/// Ruling 1: the capsule (DLPack 1.3) and the older integer attribute, both on the type.
fn publish_exchange_api(py: Python<'_>, ty: *mut PyObject) -> Result<()> {
    let table = OWN_TABLE.load(Ordering::Relaxed).cast::<c_void>();
    // SAFETY: GIL held; the table is a static, so the capsule needs no destructor.
    unsafe {
        let capsule = Owned::new(py, (py.PyCapsule_New)(table, c"dlpack_exchange_api".as_ptr(), None))?;
        if (py.PyObject_SetAttrString)(ty, c"__dlpack_c_exchange_api__".as_ptr(), capsule.as_ptr()) != 0 {
            return Err(Error::python_pending());
        }
        let address = Owned::new(py, (py.PyLong_FromVoidPtr)(table))?;
        if (py.PyObject_SetAttrString)(ty, c"__c_dlpack_exchange_api__".as_ptr(), address.as_ptr()) != 0 {
            return Err(Error::python_pending());
        }
    }
    Ok(())
}
