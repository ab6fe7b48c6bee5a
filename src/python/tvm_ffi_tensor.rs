//! tvm_ffi tensors read through tvm-ffi's stable C ABI, without `__dlpack__`.
//!
//! A `tvm_ffi.core.Tensor` is a Python wrapper around a tvm-ffi object handle, which its
//! `__chandle__()` returns as an integer. tvm-ffi's C ABI (`tvm/ffi/c_api.h`, which tvm-ffi
//! declares stable) fixes what a handle points to: the 24-byte `TVMFFIObject` header, whose
//! `type_index` is `kTVMFFITensor` (70) for a tensor, and then the tensor's `DLTensor`
//! (`TVMFFITensorGetDLTensorPtr`). tvm_ffi's `__dlpack__` exports exactly that `DLTensor`
//! (`TVMFFITensorToDLPackVersioned`: copied as it is, flags 0, the `stream` argument ignored),
//! so reading it gives the same tensor for one method call instead of `__dlpack__`'s managed
//! tensor, capsule and deleter.
//!
//! Only objects whose type is exactly `tvm_ffi.core.Tensor` are read (a subclass may override
//! `__dlpack__`), and only when the handle names a tensor; anything else — tvm_ffi not
//! imported, no `__chandle__`, a tensor without strides — goes to `__dlpack__`, whose answer
//! stays the answer. docs/design.md, "Producers read directly".

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::mem::size_of;
use std::ptr::{self, NonNull};

use pyo3_ffi::{PyObject, PyTypeObject};

use super::held_object;
use crate::abi::*;
use crate::cpython::{imported_module, interned, vectorcall_method, GilCell, Owned, Python};
use crate::error::Result;
use crate::layout::MAX_NDIM;
use crate::tensor::Tensor;

/// tvm-ffi's `TVMFFIObject`: the header every object handle points to.
#[repr(C)]
struct ObjectHeader {
    combined_ref_count: u64,
    type_index: i32,
    padding: u32,
    deleter: *const c_void,
}

/// `kTVMFFITensor` of tvm-ffi's `TVMFFITypeIndex` (a static index, part of its ABI).
const TENSOR_TYPE_INDEX: i32 = 70;

/// tvm_ffi's `TVMFFICyObjectGetCHandlePtr(PyObject*)`: the address of a wrapper's handle field.
type HandlePtr = unsafe extern "C" fn(*mut PyObject) -> *mut *mut c_void;

/// How a wrapper's handle is read: `__chandle__()` (a method call, ~0.3 k instructions), or
/// the C function tvm_ffi's extension exports for its own C++ helpers (declared in its
/// `tvm_ffi_python_object.h`), trusted once it has agreed with `__chandle__()` on a tensor.
#[derive(Clone, Copy)]
enum HandleReader {
    Method,
    Unverified(HandlePtr),
    Verified(HandlePtr),
}

/// What dlpx knows of tvm_ffi: nothing yet (not imported: asked again next time, as dlpx never
/// imports tvm_ffi itself), its `Tensor` type and how to read a handle, or that it has nothing
/// dlpx can read.
#[derive(Clone, Copy)]
enum TvmFfi {
    Unknown,
    Tensor(*mut PyTypeObject, HandleReader),
    Unreadable,
}

struct TvmFfiCell(UnsafeCell<TvmFfi>);

// SAFETY: only touched with the GIL held, which serialises every access.
unsafe impl Sync for TvmFfiCell {}

static TVM_FFI: TvmFfiCell = TvmFfiCell(UnsafeCell::new(TvmFfi::Unknown));

fn state(py: &Python) -> TvmFfi {
    // SAFETY: GIL held (see TvmFfiCell); a copy is read, no reference kept.
    match unsafe { *TVM_FFI.0.get() } {
        TvmFfi::Unknown => resolve(py),
        known => known,
    }
}

fn set_state(state: TvmFfi) {
    // SAFETY: GIL held (see TvmFfiCell); no reference into the cell lives.
    unsafe { *TVM_FFI.0.get() = state };
}

/// `tvm_ffi.core.Tensor`, once `tvm_ffi.core` is in `sys.modules` and the running CPython can
/// call a method by vectorcall (which 3.9 and later can).
#[cold]
fn resolve(py: &Python) -> TvmFfi {
    static NAME: GilCell<usize> = GilCell::new();
    let Some(module) = imported_module(py, &NAME, c"tvm_ffi.core") else { return TvmFfi::Unknown };
    let core = module.as_ptr();
    // SAFETY: GIL held; the attribute lookup's failure is cleared.
    let found = unsafe {
        match Owned::new((py.PyObject_GetAttrString)(core, c"Tensor".as_ptr())) {
            // The reference is kept: the type lives as long as tvm_ffi, which is never unloaded.
            Ok(ty) if vectorcall_method().is_some() && chandle_name(py).is_ok() => {
                let reader = handle_ptr_function(py, core).map_or(HandleReader::Method, HandleReader::Unverified);
                TvmFfi::Tensor(ty.into_ptr().cast(), reader)
            }
            Ok(_) => TvmFfi::Unreadable,
            Err(_) => {
                (py.PyErr_Clear)();
                TvmFfi::Unreadable
            }
        }
    };
    set_state(found);
    found
}

/// `TVMFFICyObjectGetCHandlePtr` from the already loaded `tvm_ffi.core` extension (a C++ name
/// there, as its header declares it to C++), or None.
fn handle_ptr_function(py: &Python, core: *mut PyObject) -> Option<HandlePtr> {
    // SAFETY: GIL held; the new reference is owned; a failure is cleared.
    let path = unsafe {
        let Ok(file) = Owned::new((py.PyObject_GetAttrString)(core, c"__file__".as_ptr())) else {
            (py.PyErr_Clear)();
            return None;
        };
        py.str_value(file.as_ptr(), "tvm_ffi.core.__file__").ok()?
    };
    let path = std::ffi::CString::new(path).ok()?;
    // SAFETY: RTLD_NOLOAD only finds the library Python already loaded (no code runs); the
    // handle's reference is dropped at once, as the interpreter keeps the extension loaded.
    unsafe {
        let library = libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        if library.is_null() {
            return None;
        }
        let symbol = [c"_Z27TVMFFICyObjectGetCHandlePtrP7_object", c"TVMFFICyObjectGetCHandlePtr"]
            .iter()
            .map(|name| libc::dlsym(library, name.as_ptr()))
            .find(|address| !address.is_null());
        libc::dlclose(library);
        // SAFETY: tvm_ffi's declaration: `void** TVMFFICyObjectGetCHandlePtr(PyObject*)`.
        symbol.map(|address| std::mem::transmute::<*mut c_void, HandlePtr>(address))
    }
}

/// `"__chandle__"`, interned once.
fn chandle_name(py: &Python) -> Result<*mut PyObject> {
    static NAME: GilCell<usize> = GilCell::new();
    interned(py, &NAME, c"__chandle__")
}

/// The `DLTensor` of `object` when it is a tvm_ffi tensor: tvm-ffi's own, inside the object,
/// valid (and unchanging) while `object` lives. None: not one, or unreadable.
pub fn dl_tensor_of(py: &Python, object: *mut PyObject) -> Option<NonNull<DLTensor>> {
    let TvmFfi::Tensor(ty, reader) = state(py) else { return None };
    // SAFETY: GIL held; `object` is live.
    if unsafe { (*object).ob_type } != ty {
        return None;
    }
    let handle = match reader {
        // SAFETY: `object` is a tvm_ffi.core.Tensor, the wrapper type the function reads.
        HandleReader::Verified(field) => NonNull::new(unsafe { *field(object) }.cast::<ObjectHeader>())?,
        HandleReader::Method => handle_by_method(py, object)?,
        HandleReader::Unverified(field) => {
            let handle = handle_by_method(py, object)?;
            // SAFETY: as above.
            let agrees = unsafe { *field(object) } == handle.as_ptr().cast();
            set_state(TvmFfi::Tensor(ty, if agrees { HandleReader::Verified(field) } else { HandleReader::Method }));
            handle
        }
    };
    // SAFETY: a live tvm-ffi object (the wrapper holds a reference to it); its header and, for a
    // tensor, the DLTensor after it are laid out as tvm-ffi's C ABI says, and never change.
    unsafe {
        if (*handle.as_ptr()).type_index != TENSOR_TYPE_INDEX {
            return None;
        }
        Some(handle.add(1).cast::<DLTensor>())
    }
}

/// `object.__chandle__()`; None when the call fails (cleared) or answers NULL.
fn handle_by_method(py: &Python, object: *mut PyObject) -> Option<NonNull<ObjectHeader>> {
    let call = vectorcall_method()?;
    let name = chandle_name(py).ok()?;
    // SAFETY: GIL held; `object` is live; the new reference is released here.
    unsafe {
        let args = [object];
        let Ok(handle) = Owned::new(call(name, args.as_ptr(), 1, ptr::null_mut())) else {
            (py.PyErr_Clear)();
            return None;
        };
        let address = (py.PyLong_AsVoidPtr)(handle.as_ptr());
        if address.is_null() {
            (py.PyErr_Clear)();
        }
        NonNull::new(address.cast())
    }
}

/// A managed tensor describing `object` when it is a tvm_ffi tensor with shape and strides: it
/// holds a reference to the wrapper, released by its deleter. None: not such a tensor (the
/// caller asks `__dlpack__`).
pub fn managed_of(py: &Python, object: *mut PyObject) -> Result<Option<NonNull<DLManagedTensorVersioned>>> {
    let Some(tensor) = dl_tensor_of(py, object) else { return Ok(None) };
    // SAFETY: the object's DLTensor, live while the object is.
    let tensor = unsafe { tensor.read() };
    let ndim = tensor.ndim as usize;
    if tensor.ndim < 0 || ndim > MAX_NDIM || (ndim > 0 && (tensor.shape.is_null() || tensor.strides.is_null())) {
        return Ok(None);
    }
    let (shape, strides): (&[i64], &[i64]) = match ndim {
        0 => (&[], &[]),
        // SAFETY: non-NULL arrays of `ndim` entries in the object, which lives through this call.
        _ => unsafe {
            (std::slice::from_raw_parts(tensor.shape, ndim), std::slice::from_raw_parts(tensor.strides, ndim))
        },
    };
    let dims = shape.iter().copied().zip(strides.iter().copied());
    // SAFETY: GIL held; the wrapper keeps the tvm-ffi object, and so its data, alive.
    unsafe { held_object::managed_holding(py, object, tensor, dims, false) }.map(Some)
}

/// `object` as a [`Tensor`] when it is a tvm_ffi tensor this path covers; None otherwise.
pub fn import(py: &Python, object: *mut PyObject) -> Result<Option<Tensor>> {
    let Some(managed) = managed_of(py, object)? else { return Ok(None) };
    // SAFETY: a tensor we own; should validation refuse it, it is deleted there.
    unsafe { Tensor::from_managed_or_delete(managed) }.map(Some)
}

const _: () = assert!(size_of::<ObjectHeader>() == 24, "tvm-ffi's object header is 24 bytes");
