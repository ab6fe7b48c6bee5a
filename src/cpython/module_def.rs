//! A single-phase extension module from one `PyModuleDef`, on either object layout
//! (docs/design.md, "Free-threaded CPython"): a `PyModuleDef` begins with an object header, so a
//! free-threaded interpreter gets a copy behind the longer header ([`RuntimeDef`], also what a
//! definition made at run time is kept in), and is told the module does not need the GIL.

use std::ffi::c_void;
use std::mem::ManuallyDrop;

use once_cell::sync::OnceCell;

use super::{layout, lookup, Owned, PyModuleDef, PyObject, Python};
use crate::error::Result;

/// A `PyModuleDef` laid out for this interpreter's object header, starting where this does: the
/// GIL build's as written, or the free-threaded build's.
#[repr(C)]
pub union RuntimeDef {
    gil: ManuallyDrop<PyModuleDef>,
    free_threaded: ManuallyDrop<FreeThreadedDef>,
}

/// The free-threaded build's `PyModuleDef`: `ob_tid`, then flags, a mutex, GC bits and the local
/// reference count (16 bytes the GIL build's header lacks), then what the GIL build's header holds
/// in the same places (`ob_ref_shared` where `ob_refcnt` is, and `ob_type`), then the fields.
#[repr(C)]
struct FreeThreadedDef {
    prefix: [u64; 2],
    def: PyModuleDef,
}

impl RuntimeDef {
    /// `def` (written with `PyModuleDef_HEAD_INIT`) laid out for this interpreter.
    pub fn new(mut def: PyModuleDef) -> RuntimeDef {
        if !layout::free_threaded() {
            return RuntimeDef { gil: ManuallyDrop::new(def) };
        }
        // SAFETY: the header is two words in the GIL build's layout the definition is written in;
        // they become the longer header's last two: no reference count (ob_ref_shared 0), no type.
        unsafe { std::ptr::write_bytes(std::ptr::addr_of_mut!(def.m_base.ob_base).cast::<u8>(), 0, 16) };
        RuntimeDef { free_threaded: ManuallyDrop::new(FreeThreadedDef { prefix: [0, FLAGS_AND_LOCAL_COUNT], def }) }
    }

    /// The definition to give CPython: this one's address, on either layout.
    pub fn as_ptr(&mut self) -> *mut PyModuleDef {
        (self as *mut RuntimeDef).cast()
    }
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
    // SAFETY: `def` is a valid static definition; the copy is leaked: it lives as long as the
    // module may.
    let copy =
        *COPY.get_or_init(|| unsafe { (*Box::into_raw(Box::new(RuntimeDef::new(def.read())))).as_ptr() } as usize);
    // SAFETY: as above.
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
