//! `dlpx.Tensor`: the Python object over a [`Tensor`], its properties, and the three PyObject
//! entry points of the exchange table.

use std::ffi::{c_int, c_void, CStr};
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3_ffi::{PyGetSetDef, PyMethodDef, PyMethodDefPointer, PyObject, PyTypeObject, PyType_Slot, PyType_Spec};

use super::dlpack_method;
use crate::abi::*;
use crate::cpython::Raise;
use crate::cpython::{fastcall_as_cfunction, int_tuple, type_name, CStatic, METH_FASTCALL};
use crate::cpython::{py, Owned, Python};
use crate::device;
use crate::error::{boundary, guard, Error, Result};
use crate::tensor::Tensor;

/// The object layout. tp_alloc zeroes the object, so `ready` is 0 until `tensor` is written:
/// an object whose initialisation failed deallocates without touching `tensor`.
#[repr(C)]
pub struct PyTensor {
    ob_base: PyObject,
    ready: u8,
    tensor: MaybeUninit<Tensor>,
}

impl PyTensor {
    /// # Safety
    /// `object` is a live instance of dlpx.Tensor or a subclass (GIL held).
    #[inline(always)]
    unsafe fn get<'a>(object: *mut PyObject) -> Option<&'a Tensor> {
        let this = object.cast::<PyTensor>();
        // SAFETY: per the contract; `ready` says whether `tensor` was written.
        unsafe { ((*this).ready != 0).then(|| (*this).tensor.assume_init_ref()) }
    }

    /// # Safety
    /// `object` is a fresh, zeroed instance nobody else sees yet.
    unsafe fn init(object: *mut PyObject, tensor: Tensor) {
        let this = object.cast::<PyTensor>();
        // SAFETY: per the contract; written without reading (or dropping) the zeroed bytes.
        unsafe {
            ptr::addr_of_mut!((*this).tensor).write(MaybeUninit::new(tensor));
            (*this).ready = 1;
        }
    }

    /// # Safety
    /// `object` is being deallocated (GIL held); nobody reads it afterwards.
    unsafe fn take(object: *mut PyObject) -> Option<Tensor> {
        let this = object.cast::<PyTensor>();
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

/// The tensor inside `object` when it is a `dlpx.Tensor` (or a subclass), else None.
///
/// # Safety
/// GIL held; `object` is a live object.
#[inline]
pub unsafe fn tensor_of<'a>(object: *mut PyObject) -> Option<&'a Tensor> {
    // SAFETY: a live object has a type; our type's instances have the PyTensor layout.
    unsafe {
        let ty = (*object).ob_type;
        if ty == tensor_type() || is_subclass(ty) {
            PyTensor::get(object)
        } else {
            None
        }
    }
}

/// The tensor inside `object` when its type is exactly dlpx.Tensor: one comparison, where
/// [`tensor_of`] walks the MRO of every other type to find subclasses.
///
/// # Safety
/// GIL held; `object` is a live object.
#[inline]
pub unsafe fn exact_tensor_of<'a>(object: *mut PyObject) -> Option<&'a Tensor> {
    // SAFETY: a live object has a type; our type's instances have the PyTensor layout.
    unsafe {
        match (*object).ob_type == tensor_type() {
            true => PyTensor::get(object),
            false => None,
        }
    }
}

/// The DLTensor of `object` when its type is exactly dlpx.Tensor (the hot path of the view).
///
/// # Safety
/// `object` is NULL or a live object (GIL held).
#[inline(always)]
pub unsafe fn exact_tensor_view<'a>(object: *mut PyObject) -> Option<&'a DLTensor> {
    // SAFETY: per the contract; a NULL tensor type never equals a live object's type.
    unsafe {
        if object.is_null() || (*object).ob_type != tensor_type() {
            return None;
        }
        PyTensor::get(object).map(Tensor::dl_tensor)
    }
}

#[cold]
unsafe fn is_subclass(ty: *mut PyTypeObject) -> bool {
    let base = tensor_type();
    // SAFETY: GIL held; both are live type objects.
    !base.is_null() && unsafe { (py().PyType_IsSubtype)(ty, base) } != 0
}

/// A new `dlpx.Tensor` holding `tensor`.
pub fn wrap(tensor: Tensor) -> Result<*mut PyObject> {
    let object = alloc_empty(tensor_type())?;
    // SAFETY: a fresh, zeroed PyTensor that nobody else sees yet.
    unsafe { PyTensor::init(object, tensor) };
    Ok(object)
}

/// `dlpx.Tensor`'s own tp_alloc / tp_free, read once: PyType_GetSlot costs a call per object.
static ALLOC: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());
static FREE: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());

fn alloc_empty(ty: *mut PyTypeObject) -> Result<*mut PyObject> {
    let py = py();
    if ty.is_null() {
        return Err(Error::runtime("the dlpx module is not initialised (import dlpx first)"));
    }
    // SAFETY: GIL held; `ty` is our (sub)type; tp_alloc zeroes the object, so `tensor` is None.
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

// ---- the exchange table's PyObject entry points -------------------------------------------

/// `managed_tensor_from_py_object_no_sync` for dlpx tensors.
///
/// # Safety
/// GIL held; `object` is NULL or live; `out` is NULL or writable.
pub unsafe fn managed_from_py(object: *mut PyObject, out: *mut *mut DLManagedTensorVersioned) -> Result<c_int> {
    let (tensor, out) = unsafe { checked_args(object, out)? };
    let managed = tensor.export_versioned(0)?;
    // SAFETY: `out` is non-NULL and writable.
    unsafe { out.as_ptr().write(managed.as_ptr()) };
    Ok(0)
}

/// `dltensor_from_py_object_no_sync` for dlpx tensors: the view's shape and strides live in
/// the tensor the object holds, so they stay valid while the caller holds the object.
///
/// # Safety
/// GIL held; `object` is NULL or live; `out` is NULL or writable.
pub unsafe fn dltensor_from_py(object: *mut PyObject, out: *mut DLTensor) -> Result<c_int> {
    let (tensor, out) = unsafe { checked_args(object, out)? };
    // SAFETY: `out` is non-NULL and writable.
    unsafe { out.as_ptr().write(*tensor.dl_tensor()) };
    Ok(0)
}

#[inline(always)]
unsafe fn checked_args<'a, T>(object: *mut PyObject, out: *mut T) -> Result<(&'a Tensor, NonNull<T>)> {
    if tensor_type().is_null() {
        return Err(no_tensor_type());
    }
    if object.is_null() {
        return Err(Error::value("py_object is NULL"));
    }
    let Some(out) = NonNull::new(out) else { return Err(Error::value("out is NULL")) };
    // SAFETY: GIL held and `object` live, by the caller's contract.
    match unsafe { tensor_of(object) } {
        Some(tensor) => {
            tensor.record_current_stream();
            Ok((tensor, out))
        }
        None => Err(not_a_tensor(object)),
    }
}

/// Without `import dlpx` there is no dlpx.Tensor, so no object can be one; without Python at
/// all the message says so (and goes to dlpx_last_error()).
#[cold]
fn no_tensor_type() -> Error {
    match crate::cpython::python() {
        Err(err) => Error::runtime(err.fact()),
        Ok(_) => Error::runtime("the dlpx module is not initialised (import dlpx first)"),
    }
}

#[cold]
fn not_a_tensor(object: *mut PyObject) -> Error {
    Error::type_error(format!("expected a dlpx.Tensor, got {}", type_name(object)))
}

/// `managed_tensor_to_py_object_no_sync`: any producer's managed tensor becomes a dlpx.Tensor.
/// Ownership moves only on success (docs/design.md R4): on failure the caller still owns `managed`.
///
/// # Safety
/// GIL held; `managed` is NULL or a live managed tensor the caller owns; `out` NULL or writable.
pub unsafe fn to_py(managed: *mut DLManagedTensorVersioned, out: *mut *mut PyObject) -> Result<c_int> {
    let managed = NonNull::new(managed).ok_or_else(|| Error::null("tensor"))?;
    let out = NonNull::new(out).ok_or_else(|| Error::null("out_py_object"))?;
    if tensor_type().is_null() {
        return Err(no_tensor_type());
    }
    // Allocate first: once the tensor is adopted, a failure could no longer leave it with the caller.
    let object = alloc_empty(tensor_type())?;
    // SAFETY: the caller owns `managed` and gives it up only if this succeeds.
    match unsafe { Tensor::from_managed(managed) } {
        Ok(tensor) => {
            // SAFETY: fresh object, not yet visible to anyone.
            unsafe {
                PyTensor::init(object, tensor);
                out.as_ptr().write(object);
            }
            Ok(0)
        }
        Err(err) => {
            py().decref(object);
            Err(err)
        }
    }
}

// ---- the type ----------------------------------------------------------------------------

unsafe extern "C" fn tensor_dealloc(object: *mut PyObject) {
    // SAFETY: called by CPython with the GIL, once, for an instance of our (sub)type.
    unsafe {
        let ty = (*object).ob_type;
        // Dropping may run a producer's deleter; it must not unwind into CPython.
        let tensor = PyTensor::take(object);
        let saved = crate::cpython::ExceptionGuard::save_with_gil(py());
        guard("dlpx.Tensor deallocation", || drop(tensor));
        drop(saved);
        let free = if ty == tensor_type() {
            FREE.load(Ordering::Relaxed)
        } else {
            (py().PyType_GetSlot)(ty, pyo3_ffi::Py_tp_free)
        };
        let free: pyo3_ffi::freefunc = std::mem::transmute(free);
        free(object.cast());
        (py().Py_DecRef)(ty.cast());
    }
}

unsafe extern "C" fn tensor_new(ty: *mut PyTypeObject, args: *mut PyObject, kwargs: *mut PyObject) -> *mut PyObject {
    boundary(Raise, "dlpx.Tensor", || {
        let py = py();
        // SAFETY: CPython passes a tuple of arguments and a dict or NULL, with the GIL held.
        let nargs = unsafe { (py.PyTuple_Size)(args) };
        if nargs != 1 || (!kwargs.is_null() && unsafe { (py.PyDict_Size)(kwargs) } != 0) {
            return Err(Error::type_error(
                "takes exactly one argument, an object that supports DLPack (or use dlpx.empty / dlpx.from_dlpack)",
            ));
        }
        // SAFETY: index 0 exists; the reference is borrowed.
        let source = unsafe { (py.PyTuple_GetItem)(args, 0) };
        let tensor = super::consumer::import(source, None, None)?;
        let object = alloc_empty(ty)?;
        // SAFETY: fresh object of our (sub)type.
        unsafe { PyTensor::init(object, tensor) };
        Ok(object)
    })
}

unsafe extern "C" fn tensor_repr(object: *mut PyObject) -> *mut PyObject {
    boundary(Raise, "dlpx.Tensor.__repr__", || {
        let t = unsafe { this(object) }?;
        let text = format!(
            "dlpx.Tensor(shape={}, dtype={}, device={}, strides={}{})",
            tuple_text(t.shape()),
            crate::dtype::dtype_name(t.dl_tensor().dtype),
            device::name(t.dl_tensor().device),
            tuple_text(t.strides()),
            if t.is_readonly() { ", readonly=True" } else { "" }
        );
        py().new_str(&text)
    })
}

fn tuple_text(values: &[i64]) -> String {
    match values {
        [one] => format!("({one},)"),
        _ => format!("({})", values.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// The tensor of `self` in a method or getter.
///
/// # Safety
/// GIL held; `object` is `self` of a dlpx.Tensor method.
pub unsafe fn this<'a>(object: *mut PyObject) -> Result<&'a Tensor> {
    // SAFETY: per the contract.
    unsafe { tensor_of(object) }.ok_or_else(|| Error::runtime("uninitialised dlpx.Tensor"))
}

// ---- getters -----------------------------------------------------------------------------

macro_rules! getter {
    ($name:ident, |$py:ident, $t:ident| $body:expr) => {
        unsafe extern "C" fn $name(object: *mut PyObject, _closure: *mut c_void) -> *mut PyObject {
            boundary(Raise, concat!("dlpx.Tensor.", stringify!($name)), || {
                let $py: &Python = py();
                // SAFETY: CPython calls getters with the GIL and a live `self`.
                let $t: &Tensor = unsafe { this(object) }?;
                $body
            })
        }
    };
}

getter!(get_shape, |py, t| int_tuple(py, t.shape()));
getter!(get_strides, |py, t| int_tuple(py, t.strides()));
getter!(get_ndim, |py, t| py.check(unsafe { (py.PyLong_FromLongLong)(t.dl_tensor().ndim as i64) }));
getter!(get_numel, |py, t| py.check(unsafe { (py.PyLong_FromUnsignedLongLong)(t.numel()) }));
getter!(get_nbytes, |py, t| py.check(unsafe { (py.PyLong_FromUnsignedLongLong)(t.nbytes()) }));
getter!(get_byte_offset, |py, t| py.check(unsafe { (py.PyLong_FromUnsignedLongLong)(t.dl_tensor().byte_offset) }));
getter!(get_data_ptr, |py, t| {
    let dl = t.dl_tensor();
    let address = (dl.data as u64).wrapping_add(dl.byte_offset);
    py.check(unsafe { (py.PyLong_FromUnsignedLongLong)(if dl.data.is_null() { 0 } else { address }) })
});
getter!(get_is_contiguous, |py, t| Ok(py.new_bool(t.is_contiguous())));
getter!(get_readonly, |py, t| Ok(py.new_bool(t.is_readonly())));
getter!(get_dtype, |py, t| py.new_str(&crate::dtype::dtype_name(t.dl_tensor().dtype)));
getter!(get_dtype_raw, |py, t| {
    let d = t.dl_tensor().dtype;
    int_tuple(py, &[d.code as i64, d.bits as i64, d.lanes as i64])
});
getter!(get_device, |py, t| super::module::make_device(py, t.dl_tensor().device));

// ---- type creation -----------------------------------------------------------------------

const DOC: &CStr = c"A tensor that dlpx carries between frameworks through DLPack.

dlpx.Tensor does no arithmetic: it owns (or shares) memory, describes it, and exchanges it
through __dlpack__ and the C exchange table published on the type as
__dlpack_c_exchange_api__. Make one with dlpx.empty(...) or dlpx.from_dlpack(obj);
dlpx.Tensor(obj) is the same as dlpx.from_dlpack(obj).";

macro_rules! getset {
    ($name:literal, $getter:ident, $doc:literal) => {
        PyGetSetDef {
            name: $name.as_ptr(),
            get: Some($getter),
            set: None,
            doc: $doc.as_ptr(),
            closure: ptr::null_mut(),
        }
    };
}

// What `create_type` hands CPython, which keeps pointers into it for the life of the type.
static GETSET: CStatic<[PyGetSetDef; 13]> = CStatic::new([
    getset!(c"shape", get_shape, c"Extents of each dimension, a tuple of ints."),
    getset!(c"strides", get_strides, c"Strides of each dimension in elements (not bytes), a tuple of ints."),
    getset!(c"ndim", get_ndim, c"Number of dimensions."),
    getset!(c"numel", get_numel, c"Number of elements."),
    getset!(c"nbytes", get_nbytes, c"Bytes the elements occupy (sub-byte types packed unless flagged padded)."),
    getset!(
        c"byte_offset",
        get_byte_offset,
        c"DLTensor.byte_offset: bytes from the data pointer to the first element."
    ),
    getset!(c"data_ptr", get_data_ptr, c"Address of the first element (data + byte_offset), 0 for empty tensors."),
    getset!(c"is_contiguous", get_is_contiguous, c"Whether the strides are compact row-major."),
    getset!(c"readonly", get_readonly, c"Whether the producer marked the memory read-only."),
    getset!(
        c"dtype",
        get_dtype,
        c"Element type name: 'float32', 'bfloat16', 'float8_e4m3fn', 'bool', 'complex64', ..."
    ),
    getset!(c"dtype_raw", get_dtype_raw, c"The DLPack dtype as (code, bits, lanes)."),
    getset!(c"device", get_device, c"The device, a dlpx.Device (prints as 'cpu:0', compares with such strings)."),
    PyGetSetDef { name: ptr::null(), get: None, set: None, doc: ptr::null(), closure: ptr::null_mut() },
]);
static METHODS: CStatic<[PyMethodDef; 3]> = CStatic::new([
    PyMethodDef {
        ml_name: c"__dlpack__".as_ptr(),
        // SAFETY: the same pointer type CPython expects for METH_FASTCALL | METH_KEYWORDS.
        ml_meth: PyMethodDefPointer { PyCFunction: unsafe { fastcall_as_cfunction(dlpack_method::dlpack) } },
        ml_flags: METH_FASTCALL | pyo3_ffi::METH_KEYWORDS,
        ml_doc: dlpack_method::DLPACK_DOC.as_ptr(),
    },
    PyMethodDef {
        ml_name: c"__dlpack_device__".as_ptr(),
        ml_meth: PyMethodDefPointer { PyCFunction: dlpack_method::dlpack_device },
        ml_flags: pyo3_ffi::METH_NOARGS,
        ml_doc: c"__dlpack_device__() -> (device_type, device_id) as DLPack integers.".as_ptr(),
    },
    PyMethodDef::zeroed(),
]);
static SLOTS: CStatic<[PyType_Slot; 7]> = CStatic::new([
    PyType_Slot { slot: pyo3_ffi::Py_tp_dealloc, pfunc: tensor_dealloc as *mut c_void },
    PyType_Slot { slot: pyo3_ffi::Py_tp_new, pfunc: tensor_new as *mut c_void },
    PyType_Slot { slot: pyo3_ffi::Py_tp_repr, pfunc: tensor_repr as *mut c_void },
    PyType_Slot { slot: pyo3_ffi::Py_tp_doc, pfunc: DOC.as_ptr() as *mut c_void },
    PyType_Slot { slot: pyo3_ffi::Py_tp_getset, pfunc: GETSET.get().cast() },
    PyType_Slot { slot: pyo3_ffi::Py_tp_methods, pfunc: METHODS.get().cast() },
    PyType_Slot { slot: 0, pfunc: ptr::null_mut() },
]);
static SPEC: CStatic<PyType_Spec> = CStatic::new(PyType_Spec {
    name: c"dlpx.Tensor".as_ptr(),
    basicsize: std::mem::size_of::<PyTensor>() as c_int,
    itemsize: 0,
    // Py_TPFLAGS_DEFAULT before 3.10 (version tag; ignored later) | BASETYPE so users may subclass.
    flags: ((1u64 << 18) | pyo3_ffi::Py_TPFLAGS_BASETYPE) as std::ffi::c_uint,
    slots: SLOTS.get().cast(),
});

/// Creates the type, publishes the exchange table on it, and remembers it. Called once at
/// module initialisation; a second call returns the same type.
pub fn create_type(py: &Python, own: &'static DLPackExchangeAPI) -> Result<*mut PyObject> {
    OWN_TABLE.store((own as *const DLPackExchangeAPI).cast_mut(), Ordering::Relaxed);
    let existing = tensor_type();
    if !existing.is_null() {
        // SAFETY: GIL held; the module keeps one more reference.
        unsafe { (py.Py_IncRef)(existing.cast()) };
        return Ok(existing.cast());
    }
    // SAFETY: GIL held; the spec and everything it points to is 'static.
    let ty = Owned::new(unsafe { (py.PyType_FromSpecWithBases)(SPEC.get(), ptr::null_mut()) })?;
    publish_exchange_api(py, ty.as_ptr())?;
    // SAFETY: GIL held; a live type; both slots are always filled (inherited from object).
    unsafe {
        ALLOC.store((py.PyType_GetSlot)(ty.as_ptr().cast(), pyo3_ffi::Py_tp_alloc), Ordering::Relaxed);
        FREE.store((py.PyType_GetSlot)(ty.as_ptr().cast(), pyo3_ffi::Py_tp_free), Ordering::Relaxed);
    }
    TENSOR_TYPE.store(ty.as_ptr().cast(), Ordering::Release);
    // The static keeps one reference for the life of the process.
    // SAFETY: GIL held.
    unsafe { (py.Py_IncRef)(ty.as_ptr()) };
    Ok(ty.into_ptr())
}

/// Ruling 1: the capsule (DLPack 1.3) and the older integer attribute, both on the type.
fn publish_exchange_api(py: &Python, ty: *mut PyObject) -> Result<()> {
    let table = OWN_TABLE.load(Ordering::Relaxed).cast::<c_void>();
    // SAFETY: GIL held; the table is a static, so the capsule needs no destructor.
    unsafe {
        let capsule = Owned::new((py.PyCapsule_New)(table, c"dlpack_exchange_api".as_ptr(), None))?;
        if (py.PyObject_SetAttrString)(ty, c"__dlpack_c_exchange_api__".as_ptr(), capsule.as_ptr()) != 0 {
            return Err(Error::python_pending());
        }
        let address = Owned::new((py.PyLong_FromVoidPtr)(table))?;
        if (py.PyObject_SetAttrString)(ty, c"__c_dlpack_exchange_api__".as_ptr(), address.as_ptr()) != 0 {
            return Err(Error::python_pending());
        }
    }
    Ok(())
}
