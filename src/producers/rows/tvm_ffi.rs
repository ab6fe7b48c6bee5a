//! The `tvm_ffi` row: tensors read through tvm-ffi's stable C ABI (docs/python.md, "What each
//! direct read rests on"); a kernel view is the object's own `DLTensor`.

use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3_ffi::{PyObject, PyTypeObject};

use crate::abi::*;
use crate::cpython::{type_of, vectorcall_method, ExceptionGuard, Interned, Owned, Python};
use crate::error::{guard, Error, Result};
use crate::memory::cpu;
use crate::producers::discovered::Discovered;
use crate::producers::home::Home;
use crate::producers::{synthetic, Answer, Ask, Entry, Guard, Handover, Producer, Row};
use crate::tensor::MANAGED_BLOCK;

pub static ROW: Row = Row {
    name: "tvm_ffi",
    synthetic: Some(&TABLE),
    guard: Some(&GUARD),
    suspect: None,
    home: Some(&HOME),
    producer: &TvmFfi,
};
struct TvmFfi;
static HOME: Home = Home::new(c"tvm_ffi");
static TABLE: DLPackExchangeAPI = synthetic::table(true);
static GUARD: Guard = Guard::new("tvm_ffi", c"tvm_ffi", &["0.1.15"]);

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

/// What dlpx found in the loaded tvm_ffi; the type's reference is kept (tvm_ffi is never unloaded).
#[derive(Clone, Copy)]
struct Found {
    ty: *mut PyTypeObject,
    /// None: `__chandle__()` on every read.
    handle_ptr: Option<HandlePtr>,
    /// None: imports go to `__dlpack__` (views need no reference).
    inc_ref: Option<RefFn>,
    /// Whether `handle_ptr` was checked against `__chandle__()` on a first object.
    accessor_checked: bool,
}

static FOUND: Discovered<Found> = Discovered::new(c"tvm_ffi.core", &[&CHANDLE]);

/// `TVMFFIObjectDecRef`, for the deleter of an import (which has no other context).
static DEC_REF: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());

impl Producer for TvmFfi {
    fn claims(&self, py: Python<'_>, ty: *mut PyTypeObject, _: Option<&'static DLPackExchangeAPI>) -> bool {
        FOUND.get_or_find(py, find).is_some_and(|found| found.ty == ty)
    }

    /// The object's own `DLTensor` where a view will do (borrowed: valid while the caller holds
    /// the wrapper, which holds the object), else an owning read.
    fn answer<'py>(&self, py: Python<'py>, object: *mut PyObject, _: Entry, ask: Ask<'_>) -> Answer<'py> {
        let Some(out) = ask.view else {
            // SAFETY: a managed tensor this read filled, ours.
            return Ok(
                managed_of(py, object)?.map_or(Handover::Uncovered, |managed| unsafe { Handover::managed(managed) })
            );
        };
        let Some(found) = FOUND.get(py) else { return Ok(Handover::Uncovered) };
        let Some(handle) = handle_of(py, object, found)? else { return Ok(Handover::Uncovered) };
        // SAFETY: the object's DLTensor; its shape and strides are `ndim` long and live in it,
        // as long as the caller's reference to the wrapper.
        out.set(unsafe { handle.dl_tensor().read() });
        Ok(Handover::View)
    }

    /// A wrapper whose handle was moved out, asked through tvm_ffi's own `__chandle__()` (the
    /// read is off: its accessor function is not trusted).
    fn refuse_before_dlpack(&self, py: Python<'_>, object: *mut PyObject) -> Result<()> {
        match handle_by_method(py, object) {
            Some(handle) if handle.is_null() => Err(moved_out()),
            _ => Ok(()),
        }
    }
}

/// `tvm_ffi.core.Tensor` and tvm-ffi's functions, where the running CPython can call a method
/// by vectorcall (3.9 and later can).
fn find(py: Python<'_>, module: &Owned<'_>) -> Option<Found> {
    vectorcall_method()?;
    let ty = crate::cpython::attribute(py, module.as_ptr(), c"Tensor")?;
    let (handle_ptr, refs) = library_functions(py, module.as_ptr());
    if let Some((_, dec_ref)) = refs {
        DEC_REF.store(dec_ref as *mut c_void, Ordering::Release);
    }
    Some(Found { ty: ty.into_ptr().cast(), handle_ptr, inc_ref: refs.map(|(inc, _)| inc), accessor_checked: false })
}

/// From the already loaded `tvm_ffi.core` extension and the libtvm_ffi it links:
/// `TVMFFICyObjectGetCHandlePtr` and `TVMFFIObjectIncRef` / `TVMFFIObjectDecRef`.
fn library_functions(py: Python<'_>, core: *mut PyObject) -> (Option<HandlePtr>, Option<(RefFn, RefFn)>) {
    // SAFETY: GIL held; the new reference is owned; a failure is cleared.
    let path = unsafe {
        let Ok(file) = Owned::new(py, (py.PyObject_GetAttrString)(core, c"__file__".as_ptr())) else {
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

static CHANDLE: Interned = Interned::new(c"__chandle__");
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

/// The tensor handle of `object` (a `tvm_ffi.core.Tensor`); None: unreadable, or not a tensor
/// object. A wrapper whose handle was moved out (`Object._move()`) is a BufferError: tvm_ffi's
/// own `__dlpack__` would dereference its NULL handle. The first read takes the handle both
/// ways; the function is used only where both agree.
#[inline]
fn handle_of(py: Python<'_>, object: *mut PyObject, found: Found) -> Result<Option<Handle>> {
    debug_assert_eq!(type_of(py, object), found.ty);
    let handle = match (found.handle_ptr, found.accessor_checked) {
        // SAFETY: `object` is a tvm_ffi.core.Tensor, the wrapper type the function reads.
        (Some(field), true) => unsafe { *field(object) }.cast::<ObjectHeader>(),
        _ => match handle_by_method_once(py, object, found) {
            Some(handle) => handle,
            None => return Ok(None),
        },
    };
    let Some(handle) = NonNull::new(handle) else { return Err(moved_out()) };
    // SAFETY: a live tvm-ffi object (the wrapper holds a reference to it): its header is
    // readable and its type index fixed.
    Ok((unsafe { (*handle.as_ptr()).type_index } == TENSOR_TYPE_INDEX).then_some(Handle(handle)))
}

/// The handle by `__chandle__()`: where the accessor function is not checked yet, this first
/// read checks it; where there is none, every read.
#[cold]
fn handle_by_method_once(py: Python<'_>, object: *mut PyObject, found: Found) -> Option<*mut ObjectHeader> {
    let by_method = handle_by_method(py, object)?;
    if let (Some(field), false) = (found.handle_ptr, found.accessor_checked) {
        // SAFETY: `object` is a tvm_ffi.core.Tensor, the wrapper type the function reads.
        let agree = unsafe { *field(object) } == by_method.cast();
        // `__chandle__()` ran Python code: another thread's finding meanwhile stands, and
        // either finding the function wrong leaves it unused (read and written in one step).
        FOUND.update(py, |now| Found { handle_ptr: now.handle_ptr.filter(|_| agree), accessor_checked: true, ..now });
    }
    Some(by_method)
}

#[cold]
fn moved_out() -> Error {
    Error::buffer("the tvm_ffi.Tensor holds no tensor (its handle was moved out)")
}

/// `object.__chandle__()` (NULL for a moved-out wrapper); None when the call fails (cleared).
fn handle_by_method(py: Python<'_>, object: *mut PyObject) -> Option<*mut ObjectHeader> {
    let call = vectorcall_method()?;
    let name = CHANDLE.get(py).ok()?;
    // SAFETY: GIL held; `object` is live; the new reference is released here.
    unsafe {
        let args = [object];
        let Ok(handle) = Owned::new(py, call(name, args.as_ptr(), 1, ptr::null_mut())) else {
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
fn managed_of(py: Python<'_>, object: *mut PyObject) -> Result<Option<NonNull<DLManagedTensorVersioned>>> {
    let Some(found) = FOUND.get(py) else { return Ok(None) };
    let Some(inc_ref) = found.inc_ref else { return Ok(None) };
    let Some(handle) = handle_of(py, object, found)? else { return Ok(None) };
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
            Python::with_gil(|py| {
                let _pending = ExceptionGuard::save_with_gil(py);
                dec_ref(handle);
            });
        }
    })
}
