//! One kernel as a Python callable: a builtin function object (`PyCFunction_NewEx`) with
//! METH_FASTCALL | METH_KEYWORDS, so CPython calls it by vectorcall. Its `self` is a module of
//! its own, made from a definition in the kernel's [`KernelObject`]: a builtin whose `self` is a
//! module is a function to Python (`<built-in function add>`, `help` and `__qualname__` as for
//! `len`), where any other `self` makes it a method of that object. Its doc is the signature
//! CPython reads `__text_signature__` from, then the typed signature and the kernel's doc.
//!
//! A call: arguments bound and converted with the GIL (`arguments`), the GIL released around the
//! kernel unless it is short, outputs made the caller's type and errors raised with the GIL
//! taken back (`results`), the views released on every path.

use std::ffi::{c_void, CStr, CString};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3_ffi::{PyMethodDef, PyModuleDef, PyObject};

use super::arguments::Arguments;
use super::results;
use crate::abi::*;
use crate::args::FastArgs;
use crate::cpython::{released, FastCallKeywords, Owned, Python, RuntimeDef};
use crate::error::{Error, Result};
use crate::kernels::{Call, Environment, Kernel};
use crate::producers::{current_stream_in, Entry};

/// What a kernel's function object holds: the definition of its `self` module (first: the
/// module's `md_def` points into this box), the kernel, its parameters' names interned (a keyword
/// at a call site is matched by address), and the method definition CPython keeps a pointer to.
/// Owned by the `self` module, freed by its `m_free`.
#[repr(C)]
struct KernelObject {
    def: RuntimeDef,
    pub kernel: &'static Kernel,
    names: Vec<usize>,
    _name: CString,
    _doc: CString,
    _module: CString,
    method: PyMethodDef,
}

/// A new function object for `kernel`, of the module named `module` (`module_name`, a str).
pub fn make(
    py: Python<'_>,
    kernel: &'static Kernel,
    module: &CStr,
    module_name: *mut PyObject,
) -> Result<*mut PyObject> {
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
    let method = PyMethodDef {
        ml_name: name.as_ptr(),
        ml_meth: pyo3_ffi::PyMethodDefPointer { PyCFunction: meth },
        ml_flags: crate::cpython::METH_FASTCALL | pyo3_ffi::METH_KEYWORDS,
        ml_doc: doc.as_ptr(),
    };
    // `self` is named as the library's module (`<module 'dlpx_example_kernels'>`, which its
    // `__self__` shows), though it is not that module: one per kernel.
    let module = module.to_owned();
    let def = RuntimeDef::new(PyModuleDef {
        m_base: pyo3_ffi::PyModuleDef_HEAD_INIT,
        m_name: module.as_ptr(),
        m_doc: ptr::null(),
        m_size: 0,
        m_methods: ptr::null_mut(),
        m_slots: ptr::null_mut(),
        m_traverse: None,
        m_clear: None,
        m_free: Some(release),
    });
    let object =
        Box::into_raw(Box::new(KernelObject { def, kernel, names, _name: name, _doc: doc, _module: module, method }));
    // SAFETY: GIL held; a definition that lives until the module's `m_free`; 3 is the stable
    // ABI's version. No GIL is declared: the module is never imported.
    let this = unsafe { (py.PyModule_Create2)((*object).def.as_ptr(), 3) };
    let this = match Owned::new(py, this) {
        Ok(this) => this,
        Err(err) => {
            // SAFETY: no module holds the box.
            drop(unsafe { Box::from_raw(object) });
            return Err(err);
        }
    };
    // From here the module owns the box.
    // SAFETY: the box lives as long as the module.
    learn_def_offset(py, this.as_ptr(), unsafe { (*object).def.as_ptr() });
    // SAFETY: GIL held; the method definition lives in the box, which the module (the function's
    // `self`, released only when the function is freed) keeps.
    py.check(unsafe { (py.PyCFunction_NewEx)(&mut (*object).method, this.as_ptr(), module_name) })
}

/// Where a module keeps its definition (`md_def`; 3.15's `md_token`), in bytes from its start,
/// learnt from the first module made; 0 until then, or when no place held it (PyModule_GetDef
/// then, a call per kernel call).
static DEF_OFFSET: AtomicUsize = AtomicUsize::new(0);

/// Finds `def` in `module`, a module just made from it, where `PyModuleObject` keeps it: a
/// pointer-aligned field past the object header and `md_dict`, inside the module type's size.
fn learn_def_offset(py: Python<'_>, module: *mut PyObject, def: *mut PyModuleDef) {
    if DEF_OFFSET.load(Ordering::Relaxed) != 0 {
        return;
    }
    let ty = crate::cpython::type_of(py, module).cast();
    let size = crate::cpython::attribute(py, ty, c"__basicsize__")
        .and_then(|size| crate::args::int_or_none(py, size.as_ptr()))
        .and_then(|size| usize::try_from(size).ok());
    let Some(size) = size else { return };
    let first = crate::cpython::layout::head() + size_of::<usize>();
    for offset in (first..size.saturating_sub(size_of::<usize>() - 1)).step_by(size_of::<usize>()) {
        // SAFETY: `offset` + 8 is within the object's `tp_basicsize`; a module is pointer-aligned.
        let held = unsafe { module.cast::<u8>().add(offset).cast::<*mut PyModuleDef>().read() };
        if held == def {
            DEF_OFFSET.store(offset, Ordering::Relaxed);
            return;
        }
    }
}

/// The kernel object behind a kernel function's `self` module: its definition, read where
/// modules keep it (one load, where PyModule_GetDef is a call that checks the type), which
/// starts the object.
#[inline(always)]
fn kernel_object(py: Python<'_>, module: *mut PyObject) -> *const KernelObject {
    let def = match DEF_OFFSET.load(Ordering::Relaxed) {
        // SAFETY: GIL held; one of our modules.
        0 => unsafe { (py.PyModule_GetDef)(module) },
        // SAFETY: the offset where this interpreter's modules keep their definition, learnt from
        // one of them; this one lives as long as its function.
        offset => unsafe { module.cast::<u8>().add(offset).cast::<*mut PyModuleDef>().read() },
    };
    def.cast()
}

/// The `self` module's `m_free`: the module is gone (its function first), and with it every use
/// of the box.
unsafe extern "C" fn release(module: *mut c_void) {
    crate::error::guard("kernel function", || {
        // SAFETY: CPython frees a module with the GIL held.
        let Ok(py) = (unsafe { Python::assume_attached() }) else { return };
        let object = kernel_object(py, module.cast()).cast_mut();
        // SAFETY: our module's box, made by `make`, freed once, here: CPython reads nothing of
        // the definition after `m_free`.
        drop(unsafe { Box::from_raw(object) });
    });
}

/// What CPython calls: every kernel's function, told apart by `this`, its `self` module.
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
    // SAFETY: `this` is the module `make` gave the function; its box lives while the function
    // does, all of this call.
    let object = unsafe { &*kernel_object(py, this) };
    let kernel = object.kernel;
    // The arguments stay where they are made, and are released (dropped) at the end of this
    // block, before anything is raised or made.
    let (like, returned) = {
        let mut arguments = Arguments::new(py);
        arguments.bind(kernel, &object.names, args).map_err(|err| err.at(kernel.name))?;
        let like = super::outputs_like::chosen(py).map_err(|err| err.at(kernel.name))?.or(arguments.like);
        // A short kernel runs with the GIL this call holds: its stream is asked with it.
        let caller = Caller { like, holding: kernel.short.then_some(py) };
        let mut call = Call::new(kernel, arguments.values(), &caller);
        let status = call.start(|run| match kernel.short {
            true => run(),
            // SAFETY: the kernel touches no Python object: its arguments were converted above,
            // and what it asks of the call (the allocator, the stream) takes the GIL where it
            // needs it.
            false => unsafe { released(py, run) },
        });
        // A kernel that returns None (a nop's call) has no results to move out and convert.
        (like, (!call.returned_nothing(status)).then(|| call.finish(status)))
    };
    match returned {
        None => Ok(py.new_none()),
        Some(returned) => {
            results::to_py(py, like, returned?).map_err(|refusal| results::refused(py, kernel.name, refusal))
        }
    }
}

/// The caller's framework as a kernel reaches it: `like`'s (the first tensor argument's, or the
/// `outputs_like` block's), else dlpx's; `holding`: the token of a short kernel's call, which
/// keeps the GIL.
struct Caller<'py> {
    like: Option<Entry>,
    holding: Option<Python<'py>>,
}

impl Environment for Caller<'_> {
    fn allocator(&self) -> DLPackManagedTensorAllocator {
        match self.like {
            Some(entry) => entry.row.producer.output_allocator(entry),
            None => crate::tensor_type::own_table().and_then(|t| t.managed_tensor_allocator),
        }
    }

    fn stream(&self, device: DLDevice) -> Result<*mut c_void> {
        let table = self.like.map(|entry| entry.table).or_else(crate::tensor_type::own_table);
        stream_of(table, device, self.holding)
    }
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
