//! The `dlpx._native` extension module: its definition, its functions (each a plain body in
//! `tensors`, `streams` or `tables`, inside the one shell of `shell::method_def!`), and its
//! creation, which makes the `dlpx.Tensor` type with dlpx's table and the importer.
//!
//! Single-phase initialisation: it works unchanged on CPython 3.9 through 3.13, where the
//! multi-phase slot list would have to be assembled per version.

mod streams;
mod tables;
mod tensors;

use std::ffi::{c_void, CStr};
use std::ptr;

use pyo3_ffi::{PyMethodDef, PyModuleDef, PyObject};

use crate::abi::*;
use crate::cpython::{int_tuple, CStatic, Owned, Python, Raise};
use crate::error::{boundary, Error, Result};
use crate::kernel_loader;
use crate::producers::{self, Request};
use crate::shell::method_def;
use crate::tensor_type::{self, device_class};

const MODULE_DOC: &CStr = c"Native core of dlpx (libdlpx.so loaded as a Python extension module).";

// The module's definition: CPython keeps (and initialises) it for the life of the process.
static METHODS: CStatic<[PyMethodDef; 19]> = CStatic::new([
    method_def!("empty", fastcall tensors::empty, c"empty($module, /, shape, dtype='float32', device='cpu')\n--\n\nAn uninitialised compact tensor from dlpx's allocator (the exchange table's)."),
    method_def!("from_dlpack", fastcall tensors::from_dlpack, c"from_dlpack($module, x, /, *, device=None, copy=None)\n--\n\nImports any DLPack producer's tensor (or a DLPack capsule), zero-copy when possible."),
    method_def!("exchange_api_of", one tables::exchange_api_of, c"exchange_api_of($module, type_or_object, /)\n--\n\nThe DLPackExchangeAPI a C kernel uses for objects of this type: its own, or dlpx's synthetic one (a PyCapsule named 'dlpack_exchange_api')."),
    method_def!("_row_of", one tables::row_of, c"_row_of($module, type_or_object, /)\n--\n\nThe name of the importer row that reads objects of this type."),
    method_def!("_served", one tables::served, c"_served($module, row, /)\n--\n\nThe calls the direct read named row (numpy, tvm_ffi, jax, array_api_strict; torch: its native checks; torch_shim: the views torch's C shim gave; torch_outputs: the kernel outputs it made) answered (by this thread, on a free-threaded interpreter)."),
    method_def!("exchange_api_info", one tables::exchange_api_info, c"exchange_api_info($module, type_or_object, /)\n--\n\nThe exchange table a type publishes (a dict: version, the prev_api chain, which entries are set), or None."),
    method_def!("_set_device_class", one device_class::set_device_class, c"_set_device_class($module, cls, /)\n--\n\nRegisters the class that Tensor.device returns."),
    method_def!("_parse_device" as "Device.parse", one device_class::parse, c"_parse_device($module, device, /)\n--\n\nThe device a device argument names (dlpx.Device.parse is this function)."),
    method_def!("_set_current_stream" as "set_current_stream", fastcall streams::set_current_stream, c"_set_current_stream($module, device_type, device_id, stream=None, /)\n--\n\nMakes the stream handle current for this thread on the device; returns the previous handle."),
    method_def!("_record_stream" as "record_stream", fastcall streams::record_stream, c"_record_stream($module, tensor, device_id, stream, /)\n--\n\nSee dlpx.cuda.record_stream."),
    method_def!("_empty_cache" as "empty_cache", noargs streams::empty_cache, c"_empty_cache($module, /)\n--\n\nSee dlpx.cuda.empty_cache."),
    method_def!("_cuda_memory_stats" as "memory_stats", one streams::cuda_memory_stats, c"_cuda_memory_stats($module, device_id, /)\n--\n\nSee dlpx.cuda.memory_stats."),
    method_def!("_current_stream" as "current_stream", fastcall streams::current_stream, c"_current_stream($module, device_type, device_id, /)\n--\n\nThis thread's current stream handle on the device (0: the default stream)."),
    method_def!("load_library", one kernel_loader::load_library, c"load_library($module, path, /)\n--\n\nThe kernel library at path (a shared library built with <dlpx/kernel.h>), loaded once for the process: one function per kernel."),
    method_def!("_outputs_like_context", one kernel_loader::outputs_like_context, c"_outputs_like_context($module, get, /)\n--\n\nThe get method of the context variable holding dlpx.outputs_like's choice (given once, at import)."),
    method_def!("_outputs_like_enter", one kernel_loader::outputs_like_enter, c"_outputs_like_enter($module, x, /)\n--\n\nA dlpx.outputs_like block for x's framework (a tensor or its type; None: the first tensor argument's) is entered: a TypeError for what is no framework's tensor."),
    method_def!("_outputs_like_exit", noargs kernel_loader::outputs_like_exit, c"_outputs_like_exit($module, /)\n--\n\nA dlpx.outputs_like block entered is freed: no context holds it any more."),
    method_def!("_cuda_driver_present" as "cuda_driver_present", noargs streams::cuda_driver_present, c"_cuda_driver_present($module, /)\n--\n\nWhether libcuda can be loaded in this process."),
    PyMethodDef::zeroed(),
]);
static DEF: CStatic<PyModuleDef> = CStatic::new(PyModuleDef {
    m_base: pyo3_ffi::PyModuleDef_HEAD_INIT,
    m_name: c"dlpx._native".as_ptr(),
    m_doc: MODULE_DOC.as_ptr(),
    m_size: -1,
    m_methods: METHODS.get().cast(),
    m_slots: ptr::null_mut(),
    m_traverse: None,
    m_clear: None,
    m_free: None,
});

/// Creates the `dlpx._native` module, whose `Tensor` type publishes `own`, dlpx's exchange
/// table (`PyInit__native` on top hands it down). Called by CPython's import machinery, with
/// the GIL held.
pub fn init(own: &'static DLPackExchangeAPI) -> *mut PyObject {
    boundary(Raise, "PyInit__native", || {
        // SAFETY: CPython's import machinery calls PyInit with the GIL held.
        let py = unsafe { Python::assume_attached()? };
        install_gil_release();
        producers::warn_of_unknown_names(py)?;
        let module = crate::cpython::create_module(py, DEF.get())?;
        let ty = tensor_type::create_type(py, own, |py, x| producers::import(py, x, Request::PLAIN))?;
        add(py, &module, c"Tensor", ty)?;
        add(py, &module, c"__version__", py.new_str(env!("CARGO_PKG_VERSION"))?)?;
        add(py, &module, c"DEVICE_TYPE_NAMES", device_type_names(py)?)?;
        add(
            py,
            &module,
            c"DLPACK_VERSION",
            int_tuple(py, &[DLPACK_MAJOR_VERSION as i64, DLPACK_MINOR_VERSION as i64])?,
        )?;
        let table = (own as *const DLPackExchangeAPI).cast_mut().cast::<c_void>();
        // SAFETY: GIL held.
        add(py, &module, c"_exchange_api_address", py.check(unsafe { (py.PyLong_FromVoidPtr)(table) })?)?;
        Ok(module.into_ptr())
    })
}

/// `{device_type: name}` for every device type DLPack names (`dlpx.Device` prints these).
fn device_type_names(py: Python<'_>) -> Result<*mut PyObject> {
    // SAFETY: GIL held; every new reference is owned by an `Owned` or stolen by the dict's owner.
    unsafe {
        let dict = Owned::new(py, (py.PyDict_New)())?;
        for row in DeviceType::TABLE {
            let key = Owned::new(py, (py.PyLong_FromLongLong)(row.value.0 as i64))?;
            let name = Owned::new(py, py.new_str(row.name)?)?;
            if (py.PyDict_SetItem)(dict.as_ptr(), key.as_ptr(), name.as_ptr()) != 0 {
                return Err(Error::python_pending());
            }
        }
        Ok(dict.into_ptr())
    }
}

/// Adds `value` (a new reference, stolen) to the module.
fn add(py: Python<'_>, module: &Owned<'_>, name: &CStr, value: *mut PyObject) -> Result<()> {
    // SAFETY: GIL held; PyModule_AddObject steals `value` only on success.
    if unsafe { (py.PyModule_AddObject)(module.as_ptr(), name.as_ptr(), value) } != 0 {
        py.decref(value);
        return Err(Error::python_pending());
    }
    Ok(())
}

/// Lets blocking driver calls release the GIL (the core's hook, `memory::blocking`): installed
/// when Python first calls into dlpx (module import, the kernel API).
pub fn install_gil_release() {
    crate::memory::blocking::install(|run| crate::cpython::without_gil(run));
}
