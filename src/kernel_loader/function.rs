//! One kernel as a Python callable: a builtin function object (`PyCFunction_NewEx`) with
//! METH_FASTCALL | METH_KEYWORDS, so CPython calls it by vectorcall, and a capsule of its
//! [`KernelObject`] as `self`. Its doc is the signature CPython reads `__text_signature__`
//! from, then the typed signature and the kernel's doc.
//!
//! A call: arguments bound and converted with the GIL (`arguments`), the GIL released around the
//! kernel unless it is short, outputs made the caller's type and errors raised with the GIL
//! taken back (`results`), the views released on every path.

use std::ffi::{c_void, CString};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3_ffi::{PyMethodDef, PyObject};

use super::arguments::Arguments;
use super::results;
use crate::abi::*;
use crate::args::FastArgs;
use crate::cpython::{released, FastCallKeywords, Owned, Python};
use crate::error::{Error, Result};
use crate::kernels::{Call, Environment, Kernel};
use crate::producers::current_stream_in;

/// What a kernel's function object holds: the kernel, its parameters' names interned (a
/// keyword at a call site is matched by address), and the method definition CPython keeps a
/// pointer to. Owned by the function's capsule.
struct KernelObject {
    pub kernel: &'static Kernel,
    names: Vec<usize>,
    _name: CString,
    _doc: CString,
    def: PyMethodDef,
}

/// A new function object for `kernel`, of the module named `module`.
pub fn make(py: Python<'_>, kernel: &'static Kernel, module: *mut PyObject) -> Result<*mut PyObject> {
    let mut names = Vec::with_capacity(kernel.signature.params.len());
    for param in &kernel.signature.params {
        let name = CString::new(param.name.as_str()).map_err(|_| Error::value("a parameter name with a NUL"))?;
        // SAFETY: GIL held; an interned str lives for the interpreter (its reference is kept).
        names.push(py.check(unsafe { (py.PyUnicode_InternFromString)(name.as_ptr()) })? as usize);
    }
    let name = CString::new(kernel.name).map_err(|_| Error::value("a kernel name with a NUL"))?;
    // CPython reads `__text_signature__` from a doc that starts `name(...)\n--\n\n`.
    let doc =
        format!("{}{}\n--\n\n{}", kernel.name, kernel.signature.text_signature, kernel.described.to_string_lossy());
    let doc = CString::new(doc).map_err(|_| Error::value("a doc with a NUL"))?;
    // SAFETY: the flags below say METH_FASTCALL | METH_KEYWORDS.
    let meth = unsafe { crate::cpython::fastcall_as_cfunction(call_shell as FastCallKeywords) };
    let def = PyMethodDef {
        ml_name: name.as_ptr(),
        ml_meth: pyo3_ffi::PyMethodDefPointer { PyCFunction: meth },
        ml_flags: crate::cpython::METH_FASTCALL | pyo3_ffi::METH_KEYWORDS,
        ml_doc: doc.as_ptr(),
    };
    let object = Box::into_raw(Box::new(KernelObject { kernel, names, _name: name, _doc: doc, def }));
    // SAFETY: GIL held; the capsule owns the box (freed by `release`); a NULL name.
    let capsule = unsafe { (py.PyCapsule_New)(object.cast(), ptr::null(), Some(release)) };
    let capsule = match Owned::new(py, capsule) {
        Ok(capsule) => capsule,
        Err(err) => {
            // SAFETY: the box was not handed to a capsule.
            drop(unsafe { Box::from_raw(object) });
            return Err(err);
        }
    };
    learn_pointer_offset(capsule.as_ptr(), object.cast());
    // SAFETY: GIL held; the definition lives in the box, which the capsule (the function's
    // `self`, released only when the function is freed) keeps.
    py.check(unsafe { (py.PyCFunction_NewEx)(&mut (*object).def, capsule.as_ptr(), module) })
}

/// Where a capsule keeps its pointer, in bytes from its start: right after the object header
/// (16 bytes, or 32 on a free-threaded build), learnt from the first capsule made; 0 until then,
/// or when neither place held it (PyCapsule_GetPointer then, a call per kernel call).
static POINTER_OFFSET: AtomicUsize = AtomicUsize::new(0);

/// Finds `pointer` in `capsule`, a capsule just made for it, where `PyCapsule` keeps it.
fn learn_pointer_offset(capsule: *mut PyObject, pointer: *mut c_void) {
    if POINTER_OFFSET.load(Ordering::Relaxed) != 0 {
        return;
    }
    for offset in [16usize, 32] {
        // SAFETY: a live capsule is larger than 32 + 8 bytes on every CPython (a header, then the
        // pointer, the name, the context and the destructor), so both reads are inside it.
        let held = unsafe { capsule.cast::<u8>().add(offset).cast::<*mut c_void>().read() };
        if held == pointer {
            POINTER_OFFSET.store(offset, Ordering::Relaxed);
            return;
        }
    }
}

/// The pointer a kernel function's capsule holds: read where capsules keep it (one load, where
/// PyCapsule_GetPointer is a call that checks the name), once the offset is known.
#[inline(always)]
fn capsule_pointer(py: Python<'_>, capsule: *mut PyObject) -> *mut c_void {
    match POINTER_OFFSET.load(Ordering::Relaxed) {
        // SAFETY: GIL held; our capsule, with a NULL name.
        0 => unsafe { (py.PyCapsule_GetPointer)(capsule, ptr::null()) },
        // SAFETY: the offset where this interpreter's capsules keep their pointer, learnt from one
        // of them; capsules are never moved and this one lives as long as its function.
        offset => unsafe { capsule.cast::<u8>().add(offset).cast::<*mut c_void>().read() },
    }
}

/// The capsule's destructor: the function object is gone, and with it every use of the box.
unsafe extern "C" fn release(capsule: *mut PyObject) {
    crate::error::guard("kernel function", || {
        // SAFETY: CPython calls a capsule's destructor with the GIL held.
        let Ok(py) = (unsafe { Python::assume_attached() }) else { return };
        // SAFETY: our capsule (NULL name) holds a box made by `make`, freed once, here.
        let object = unsafe { (py.PyCapsule_GetPointer)(capsule, ptr::null()) };
        if !object.is_null() {
            // SAFETY: as above.
            drop(unsafe { Box::from_raw(object.cast::<KernelObject>()) });
        }
    });
}

/// What CPython calls: every kernel's function, told apart by `this`, its capsule.
unsafe extern "C" fn call_shell(
    this: *mut PyObject,
    args: *const *mut PyObject,
    nargs: pyo3_ffi::Py_ssize_t,
    kwnames: *mut PyObject,
) -> *mut PyObject {
    // SAFETY: CPython's METH_FASTCALL | METH_KEYWORDS convention, for this call.
    let args = unsafe { FastArgs::new(args, nargs, kwnames) };
    crate::shell::attached!("kernel", |py| call(py, this, args))
}

/// One call: `kernel(*args, **kwargs)`.
#[inline]
fn call(py: Python<'_>, this: *mut PyObject, args: FastArgs<'_>) -> Result<*mut PyObject> {
    // SAFETY: `this` is the capsule `make` gave the function (NULL name); its box lives while
    // the function does, all of this call.
    let object = unsafe { &*capsule_pointer(py, this).cast::<KernelObject>() };
    let kernel = object.kernel;
    // The arguments stay where they are made, and are released (dropped) at the end of this
    // block, before anything is raised or made.
    let (like, returned) = {
        let mut arguments = Arguments::new(py);
        arguments.bind(kernel, &object.names, args).map_err(|err| err.at(kernel.name))?;
        let like = super::outputs_like::chosen(py).map_err(|err| err.at(kernel.name))?.or(arguments.like);
        let table = like.map(|entry| entry.table).or_else(crate::tensor_type::own_table);
        // A short kernel runs with the GIL this call holds: its stream is asked with it.
        let holding = kernel.short.then_some(py);
        let stream = |device: DLDevice| stream_of(table, device, holding);
        let allocator = table.and_then(|t| t.managed_tensor_allocator);
        let mut call = Call::new(kernel, arguments.values(), Environment { allocator, stream: &stream });
        let returned = call.run(|run| match kernel.short {
            true => run(),
            // SAFETY: the kernel touches no Python object: its arguments were converted above,
            // and what it asks of the call (the allocator, the stream) takes the GIL where it
            // needs it.
            false => unsafe { released(py, run) },
        });
        (like, returned)
    };
    results::to_py(py, like, returned?).map_err(|err| results::refused(py, kernel.name, err))
}

/// The caller's current stream on a non-CPU device, asked of its framework's table: dlpx's own
/// registry needs no GIL; another framework's entry is called with the GIL: `holding`'s, the
/// token of a short kernel's call (no check: a GPU launch has evicted the code a check runs,
/// docs/cuda.md), else taken here, as the kernel released it.
fn stream_of(
    table: Option<&'static DLPackExchangeAPI>,
    device: DLDevice,
    holding: Option<Python<'_>>,
) -> Result<*mut c_void> {
    let ask = |py: Python<'_>, table| {
        current_stream_in(py, table, device).map_err(|err| match err.is_python_pending() {
            true => crate::cpython::take_pending(py),
            false => err,
        })
    };
    match (table, holding) {
        (None, _) => Ok(crate::stream::current(device)),
        (Some(table), _) if crate::stream::serves(table) => Ok(crate::stream::current(device)),
        (Some(table), Some(py)) => ask(py, table),
        (Some(table), None) => Python::with_gil(|py| ask(py, table))
            .unwrap_or_else(|| Err(Error::runtime("no Python interpreter to ask the caller's stream"))),
    }
}
