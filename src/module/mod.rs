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
use crate::producers::{self, Request};
use crate::shell::method_def;
use crate::tensor_type::{self, device_class};

const MODULE_DOC: &CStr = c"Native core of dlpx (libdlpx.so loaded as a Python extension module).";

// The module's definition: CPython keeps (and initialises) it for the life of the process.
static METHODS: CStatic<[PyMethodDef; 14]> = CStatic::new([
    method_def!("empty", fastcall tensors::empty, c"empty(shape, dtype='float32', device='cpu') -> Tensor\n\nAn uninitialised compact tensor from dlpx's allocator (the exchange table's)."),
    method_def!("from_dlpack", fastcall tensors::from_dlpack, c"from_dlpack(x, /, *, device=None, copy=None) -> Tensor\n\nImports any DLPack producer's tensor (or a DLPack capsule), zero-copy when possible."),
    method_def!("exchange_api_of", one tables::exchange_api_of, c"exchange_api_of(type_or_object) -> PyCapsule\n\nThe DLPackExchangeAPI a C kernel uses for objects of this type: its own, or dlpx's synthetic one (a PyCapsule named 'dlpack_exchange_api')."),
    method_def!("_row_of", one tables::row_of, c"_row_of(type_or_object) -> str\n\nThe name of the importer row that reads objects of this type."),
    method_def!("_served", one tables::served, c"_served(row) -> int\n\nThe calls the direct read named row (numpy, tvm_ffi, jax, array_api_strict; torch: its native checks) answered (by this thread, on a free-threaded interpreter)."),
    method_def!("exchange_api_info", one tables::exchange_api_info, c"exchange_api_info(type_or_object) -> dict | None\n\nThe exchange table a type publishes: version, the prev_api chain, which entries are set."),
    method_def!("_set_device_class", one device_class::set_device_class, c"Registers the class that Tensor.device returns."),
    method_def!("_set_current_stream" as "set_current_stream", fastcall streams::set_current_stream, c"_set_current_stream(device_type, device_id, handle) -> previous handle"),
    method_def!("_record_stream" as "record_stream", fastcall streams::record_stream, c"_record_stream(tensor, device_id, handle)"),
    method_def!("_empty_cache" as "empty_cache", noargs streams::empty_cache, c"_empty_cache()"),
    method_def!("_cuda_memory_stats" as "memory_stats", one streams::cuda_memory_stats, c"_cuda_memory_stats(device_id) -> dict"),
    method_def!("_current_stream" as "current_stream", fastcall streams::current_stream, c"_current_stream(device_type, device_id) -> handle (0: default)"),
    method_def!("_cuda_driver_present" as "cuda_driver_present", noargs streams::cuda_driver_present, c"Whether libcuda can be loaded in this process."),
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
