//! tvm_ffi tensors read through tvm-ffi's C ABI, without `__dlpack__`.
//!
//! A `tvm_ffi.core.Tensor` is a Python wrapper around a tvm-ffi object handle, which its
//! `__chandle__()` returns as an integer. tvm-ffi's stable C ABI (`tvm/ffi/c_api.h`) fixes what
//! a handle points to: the 24-byte `TVMFFIObject` header, whose `type_index` is `kTVMFFITensor`
//! (70) for a tensor, then the tensor's `DLTensor` (`TVMFFITensorGetDLTensorPtr`); and it exports
//! `TVMFFIObjectIncRef` / `TVMFFIObjectDecRef`. tvm_ffi's `__dlpack__` exports exactly that
//! `DLTensor` (`TVMFFITensorToDLPackVersioned`: copied as it is, flags 0, a strong reference to
//! the object, the `stream` argument ignored), so reading it gives the same tensor for a few
//! loads instead of `__dlpack__`'s managed tensor, capsule and deleter.
//!
//! The handle is read through `TVMFFICyObjectGetCHandlePtr`, the C function tvm_ffi's
//! extension exports for its own C++ helpers (declared in the `tvm_ffi_python_object.h` it
//! ships; not part of `c_api.h`), or `__chandle__()` where that is missing. Nothing is trusted
//! before the first tensor has been read both ways and matched against its own `__dlpack__`
//! export field by field (docs/design.md, "Producers read directly"); a mismatch turns this
//! path off for the process. Only objects whose type is exactly `tvm_ffi.core.Tensor` are read
//! (a subclass may override `__dlpack__`); anything else — tvm_ffi not imported, a NULL handle,
//! a tensor without strides — goes to `__dlpack__`, whose answer stays the answer.

use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3_ffi::{PyObject, PyTypeObject};

use crate::abi::*;
use crate::cpython::{imported_module, interned, py, vectorcall_method, GilCell, GilVar, ModuleWatch, Owned, Python};
use crate::error::{guard, Error, Result};
use crate::memory::cpu;
use crate::tensor::{Tensor, MANAGED_BLOCK};

/// tvm-ffi's `TVMFFIObject`: the header every object handle points to.
#[repr(C)]
struct ObjectHeader {
    combined_ref_count: u64,
    type_index: i32,
    padding: u32,
    deleter: *const c_void,
}

const _: () = assert!(size_of::<ObjectHeader>() == 24, "tvm-ffi's object header is 24 bytes");

/// `kTVMFFITensor` of tvm-ffi's `TVMFFITypeIndex` (a static index, part of its ABI).
const TENSOR_TYPE_INDEX: i32 = 70;

/// `void **TVMFFICyObjectGetCHandlePtr(PyObject *)`: the address of a wrapper's handle field.
type HandlePtr = unsafe extern "C" fn(*mut PyObject) -> *mut *mut c_void;
/// `int TVMFFIObjectIncRef(TVMFFIObjectHandle)` and `TVMFFIObjectDecRef`.
type RefFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// What dlpx has found in the loaded tvm_ffi.
#[derive(Clone, Copy)]
struct Found {
    ty: *mut PyTypeObject,
    /// None: `__chandle__()` on every read.
    handle_ptr: Option<HandlePtr>,
    /// None: imports go to `__dlpack__` (views need no reference).
    inc_ref: Option<RefFn>,
    verified: bool,
}

/// What dlpx knows of tvm_ffi: nothing yet (not imported: asked again when `sys.modules`
/// changes, as dlpx never imports tvm_ffi itself), what it found, or that it reads none.
#[derive(Clone, Copy)]
enum TvmFfi {
    Unknown,
    Found(Found),
    Unreadable,
}

static TVM_FFI: GilVar<TvmFfi> = GilVar::new(TvmFfi::Unknown);

/// `TVMFFIObjectDecRef`, for the deleter of an import (which has no other context).
static DEC_REF: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());

#[inline]
fn state(py: &Python) -> TvmFfi {
    match TVM_FFI.get() {
        TvmFfi::Unknown => resolve(py),
        known => known,
    }
}

/// `tvm_ffi.core.Tensor` and tvm-ffi's functions, once `tvm_ffi.core` is imported and the
/// running CPython can call a method by vectorcall (3.9 and later can).
#[cold]
fn resolve(py: &Python) -> TvmFfi {
    static WATCH: ModuleWatch = ModuleWatch::new();
    let Some(module) = imported_module(py, &WATCH, c"tvm_ffi.core") else { return TvmFfi::Unknown };
    if vectorcall_method().is_none() || chandle_name(py).is_err() {
        // SAFETY: GIL held; interning may have failed with an exception: not ours to keep.
        unsafe { (py.PyErr_Clear)() };
        return TvmFfi::Unknown;
    }
    // SAFETY: GIL held; a failed lookup is cleared.
    let ty = unsafe { (py.PyObject_GetAttrString)(module.as_ptr(), c"Tensor".as_ptr()) };
    let found = if ty.is_null() {
        // SAFETY: GIL held.
        unsafe { (py.PyErr_Clear)() };
        TvmFfi::Unreadable
    } else {
        // The reference is kept: the type lives as long as tvm_ffi, which is never unloaded.
        let (handle_ptr, refs) = library_functions(py, module.as_ptr());
        if let Some((_, dec_ref)) = refs {
            DEC_REF.store(dec_ref as *mut c_void, Ordering::Release);
        }
        TvmFfi::Found(Found { ty: ty.cast(), handle_ptr, inc_ref: refs.map(|(inc, _)| inc), verified: false })
    };
    TVM_FFI.set(found);
    found
}

/// From the already loaded `tvm_ffi.core` extension and the libtvm_ffi it links:
/// `TVMFFICyObjectGetCHandlePtr` and `TVMFFIObjectIncRef` / `TVMFFIObjectDecRef`.
fn library_functions(py: &Python, core: *mut PyObject) -> (Option<HandlePtr>, Option<(RefFn, RefFn)>) {
    // SAFETY: GIL held; the new reference is owned; a failure is cleared.
    let path = unsafe {
        let Ok(file) = Owned::new((py.PyObject_GetAttrString)(core, c"__file__".as_ptr())) else {
            (py.PyErr_Clear)();
            return (None, None);
        };
        py.str_value(file.as_ptr(), "tvm_ffi.core.__file__").ok()
    };
    let Some(path) = path.and_then(|p| std::ffi::CString::new(p).ok()) else { return (None, None) };
    // SAFETY: RTLD_NOLOAD only finds the library Python already loaded (no code runs); `dlsym`
    // on its handle also searches the libraries it links (libtvm_ffi). The handle's reference
    // is dropped at once: the interpreter keeps the extension loaded for the process.
    unsafe {
        let library = libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        if library.is_null() {
            return (None, None);
        }
        let symbol = |names: &[&std::ffi::CStr]| {
            names.iter().map(|name| libc::dlsym(library, name.as_ptr())).find(|address| !address.is_null())
        };
        // The header declares it `extern "C"`; builds that compiled it as C++ without that
        // export the mangled name.
        let handle_ptr = symbol(&[c"TVMFFICyObjectGetCHandlePtr", c"_Z27TVMFFICyObjectGetCHandlePtrP7_object"]);
        let inc_ref = symbol(&[c"TVMFFIObjectIncRef"]);
        let dec_ref = symbol(&[c"TVMFFIObjectDecRef"]);
        libc::dlclose(library);
        // SAFETY: the C signatures tvm_ffi declares for these names.
        (
            handle_ptr.map(|a| std::mem::transmute::<*mut c_void, HandlePtr>(a)),
            inc_ref.zip(dec_ref).map(|(i, d)| {
                (std::mem::transmute::<*mut c_void, RefFn>(i), std::mem::transmute::<*mut c_void, RefFn>(d))
            }),
        )
    }
}

/// `"__chandle__"`, interned once.
fn chandle_name(py: &Python) -> Result<*mut PyObject> {
    static NAME: GilCell<usize> = GilCell::new();
    interned(py, &NAME, c"__chandle__")
}

/// A tensor handle read from a tvm_ffi wrapper, live while the wrapper holds it.
#[derive(Clone, Copy)]
pub struct Handle(NonNull<ObjectHeader>);

impl Handle {
    /// The tensor's `DLTensor`, inside the tvm-ffi object: valid, and unchanging, while the
    /// object lives (the caller's reference to the wrapper, or a reference of its own).
    pub fn dl_tensor(self) -> NonNull<DLTensor> {
        // SAFETY: a tensor object: the DLTensor follows the header (tvm-ffi's C ABI).
        unsafe { self.0.add(1).cast() }
    }
}

/// The tensor handle of `object` when it is a tvm_ffi tensor; None: not one, or unreadable. A
/// wrapper whose handle was moved out (`Object._move()`) is a BufferError: tvm_ffi's own
/// `__dlpack__` would dereference its NULL handle.
#[inline]
pub fn handle_of(py: &Python, object: *mut PyObject) -> Result<Option<Handle>> {
    let TvmFfi::Found(found) = state(py) else { return Ok(None) };
    // SAFETY: GIL held; `object` is live.
    if unsafe { (*object).ob_type } != found.ty {
        return Ok(None);
    }
    if !found.verified {
        return verify(py, object, found);
    }
    let handle = match found.handle_ptr {
        // SAFETY: `object` is a tvm_ffi.core.Tensor, the wrapper type the function reads.
        Some(field) => unsafe { *field(object) }.cast::<ObjectHeader>(),
        None => match handle_by_method(py, object) {
            Some(handle) => handle,
            None => return Ok(None),
        },
    };
    let Some(handle) = NonNull::new(handle) else { return Err(moved_out()) };
    // SAFETY: a live tvm-ffi object (the wrapper holds a reference to it): its header is
    // readable and its type index fixed.
    Ok((unsafe { (*handle.as_ptr()).type_index } == TENSOR_TYPE_INDEX).then_some(Handle(handle)))
}

#[cold]
fn moved_out() -> Error {
    Error::buffer("the tvm_ffi.Tensor holds no tensor (its handle was moved out)")
}

/// The first read: the handle both ways, the type index, and the `DLTensor` against the one
/// `__dlpack__` exports, field by field. A tensor that cannot be checked (its `__dlpack__`
/// fails) leaves the question open; a mismatch turns the path off.
#[cold]
fn verify(py: &Python, object: *mut PyObject, mut found: Found) -> Result<Option<Handle>> {
    let Some(handle) = handle_by_method(py, object) else { return Ok(None) };
    let Some(handle) = NonNull::new(handle) else { return Err(moved_out()) };
    if let Some(field) = found.handle_ptr {
        // SAFETY: `object` is a tvm_ffi.core.Tensor.
        if unsafe { *field(object) } != handle.as_ptr().cast() {
            found.handle_ptr = None;
        }
    }
    // SAFETY: a live tvm-ffi object; the DLTensor is read only once the type index says tensor.
    let ours = unsafe {
        if (*handle.as_ptr()).type_index != TENSOR_TYPE_INDEX {
            TVM_FFI.set(TvmFfi::Unreadable);
            return Ok(None);
        }
        Handle(handle).dl_tensor().read()
    };
    let Ok(capsule) = super::dlpack_call::call(py, object) else {
        // SAFETY: GIL held; the producer's exception is not this (optional) path's answer.
        unsafe { (py.PyErr_Clear)() };
        return Ok(None);
    };
    // SAFETY: GIL held; a capsule of another name answers NULL (cleared); an unconsumed
    // capsule's destructor frees its tensor when `capsule` is dropped.
    let same = unsafe {
        let managed = (py.PyCapsule_GetPointer)(capsule.as_ptr(), c"dltensor_versioned".as_ptr())
            .cast::<DLManagedTensorVersioned>();
        if managed.is_null() {
            (py.PyErr_Clear)();
            false
        } else {
            let theirs = &(*managed).dl_tensor;
            (theirs.data, theirs.device, theirs.ndim, theirs.dtype, theirs.shape, theirs.strides, theirs.byte_offset)
                == (ours.data, ours.device, ours.ndim, ours.dtype, ours.shape, ours.strides, ours.byte_offset)
        }
    };
    if !same {
        TVM_FFI.set(TvmFfi::Unreadable);
        return Ok(None);
    }
    // `__dlpack__` ran Python code: another thread's verdict may have come meanwhile, and a
    // "no" stays a no.
    if let TvmFfi::Found(now) = TVM_FFI.get() {
        // Either verification finding the accessor wrong leaves it unused.
        let handle_ptr = now.handle_ptr.and(found.handle_ptr);
        TVM_FFI.set(TvmFfi::Found(Found { verified: true, handle_ptr, ..now }));
    }
    Ok(Some(Handle(handle)))
}

/// `object.__chandle__()` (NULL for a moved-out wrapper); None when the call fails (cleared).
fn handle_by_method(py: &Python, object: *mut PyObject) -> Option<*mut ObjectHeader> {
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
        if address.is_null() && !(py.PyErr_Occurred)().is_null() {
            (py.PyErr_Clear)();
            return None;
        }
        Some(address.cast())
    }
}

/// A managed tensor of `object` when it is a tvm_ffi tensor with shape and strides: one block
/// from the per-thread cache holding a strong reference to the tvm-ffi object itself (not to
/// the wrapper, whose handle can be moved out: `Object._move()`), as tvm_ffi's own export
/// does. None: not such a tensor (the caller asks `__dlpack__`).
pub fn managed_of(py: &Python, object: *mut PyObject) -> Result<Option<NonNull<DLManagedTensorVersioned>>> {
    let Some(handle) = handle_of(py, object)? else { return Ok(None) };
    let TvmFfi::Found(Found { inc_ref: Some(inc_ref), .. }) = state(py) else { return Ok(None) };
    // SAFETY: the object's DLTensor, live while the wrapper holds the object.
    let tensor = unsafe { handle.dl_tensor().read() };
    if tensor.ndim != 0 && (tensor.shape.is_null() || tensor.strides.is_null()) {
        return Ok(None);
    }
    let Some(block) = cpu::alloc(MANAGED_BLOCK) else { return Ok(None) };
    let handle = handle.0.as_ptr().cast::<c_void>();
    // SAFETY: a live tvm-ffi object; the new reference is the block's, dropped by `release`.
    if unsafe { inc_ref(handle) } != 0 {
        // SAFETY: ours, unused.
        unsafe { cpu::free(block, MANAGED_BLOCK) };
        return Ok(None);
    }
    let managed = block.cast::<DLManagedTensorVersioned>();
    // SAFETY: a block of MANAGED_BLOCK bytes, aligned for the struct; shape and strides stay the
    // object's, which the reference keeps.
    unsafe {
        managed.as_ptr().write(DLManagedTensorVersioned {
            version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
            manager_ctx: handle,
            deleter: Some(release),
            flags: 0,
            dl_tensor: tensor,
        })
    };
    Ok(Some(managed))
}

/// The deleter: drops the object's reference, with the GIL (freeing a tvm-ffi object may free
/// its cached Python wrapper), then frees the block. After the interpreter is gone the
/// reference is left, as numpy's deleter leaves its array's.
unsafe extern "C" fn release(managed: *mut DLManagedTensorVersioned) {
    guard("tvm_ffi tensor release", || {
        // SAFETY: a block `managed_of` filled, freed once, here, by its only owner; DEC_REF was
        // stored before any such block was made.
        unsafe {
            let handle = (*managed).manager_ctx;
            cpu::free(NonNull::new_unchecked(managed).cast(), MANAGED_BLOCK);
            let dec_ref = std::mem::transmute::<*mut c_void, RefFn>(DEC_REF.load(Ordering::Acquire));
            let py = py();
            if (py.Py_IsInitialized)() == 0 {
                return;
            }
            let state = (py.PyGILState_Ensure)();
            {
                let _pending = crate::cpython::ExceptionGuard::save_with_gil(py);
                dec_ref(handle);
            }
            (py.PyGILState_Release)(state);
        }
    })
}

/// `object` as a [`Tensor`] when it is a tvm_ffi tensor this path covers; None otherwise.
pub fn import(py: &Python, object: *mut PyObject) -> Result<Option<Tensor>> {
    let Some(managed) = managed_of(py, object)? else { return Ok(None) };
    // SAFETY: a tensor we own; should validation refuse it, it is deleted there.
    unsafe { Tensor::from_managed_or_delete(managed) }.map(Some)
}
