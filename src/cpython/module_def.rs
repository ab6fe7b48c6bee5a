//! A single-phase extension module from one `PyModuleDef`, on either object layout
//! (docs/design.md, "Free-threaded CPython"): a `PyModuleDef` begins with an object header, so a
//! free-threaded interpreter gets a copy behind the longer header, and is told the module does not
//! need the GIL.

use std::ffi::c_void;

use once_cell::sync::OnceCell;

use super::{layout, lookup, Owned, PyModuleDef, PyObject, Python};
use crate::error::Result;

/// The free-threaded build's `PyModuleDef`: `ob_tid`, then flags, a mutex, GC bits and the local
/// reference count (16 bytes the GIL build's header lacks), then what the GIL build's header holds
/// in the same places (`ob_ref_shared` where `ob_refcnt` is, and `ob_type`), then the fields.
#[repr(C)]
struct FreeThreadedDef {
    prefix: [u64; 2],
    def: PyModuleDef,
}

/// The second word of the free-threaded header as `PyObject_HEAD_INIT` writes it (little-endian):
/// `ob_flags = _Py_STATICALLY_ALLOCATED_FLAG` (4, which 3.15 checks a definition for), no mutex
/// or GC bits, `ob_ref_local = UINT32_MAX` (immortal: a static definition is never freed).
const FLAGS_AND_LOCAL_COUNT: u64 = ((u32::MAX as u64) << 32) | 4;

/// `Py_MOD_GIL_NOT_USED`.
const GIL_NOT_USED: *mut c_void = std::ptr::without_provenance_mut(1);

/// Creates the module `def` describes (CPython's import machinery is running, GIL held); on a
/// free-threaded interpreter it declares that the module does not need the GIL.
pub fn create_module(py: Python<'_>, def: *mut PyModuleDef) -> Result<Owned<'_>> {
    if !layout::free_threaded() {
        // SAFETY: the token proves the GIL is held; `def` is static; 3 is the stable ABI's version.
        return Owned::new(py, unsafe { (py.PyModule_Create2)(def, 3) });
    }
    static COPY: OnceCell<usize> = OnceCell::new();
    let copy = *COPY.get_or_init(|| {
        // SAFETY: `def` is a valid static definition; its header words are rewritten for the
        // longer header: no reference count (ob_ref_shared 0) and no type yet.
        let mut def = unsafe { def.read() };
        // SAFETY: the header is two words in the GIL build's layout the definition is written in.
        unsafe { std::ptr::write_bytes(std::ptr::addr_of_mut!(def.m_base.ob_base).cast::<u8>(), 0, 16) };
        Box::into_raw(Box::new(FreeThreadedDef { prefix: [0, FLAGS_AND_LOCAL_COUNT], def })) as usize
    });
    // SAFETY: as above; the copy is leaked: it lives as long as the module may.
    let module = Owned::new(py, unsafe { (py.PyModule_Create2)(copy as *mut PyModuleDef, 3) })?;
    if let Ok(set_gil) = lookup("PyUnstable_Module_SetGIL\0") {
        // SAFETY: `int PyUnstable_Module_SetGIL(PyObject *module, void *gil)` (3.13 and later).
        let set_gil: unsafe extern "C" fn(*mut PyObject, *mut c_void) -> i32 = unsafe { std::mem::transmute(set_gil) };
        // SAFETY: GIL held (attached); a module just created.
        if unsafe { set_gil(module.as_ptr(), GIL_NOT_USED) } != 0 {
            return Err(crate::error::Error::python_pending());
        }
    }
    Ok(module)
}
