//! The `capsule` row: a DLPack capsule handed over as it is, consumed (renamed `used_…`).

use std::ptr::NonNull;

use pyo3_ffi::{PyObject, PyTypeObject};

use crate::abi::*;
use crate::cpython::{Owned, Python};
use crate::producers::{synthetic, Answer, Ask, Entry, Handover, Producer, Row};

pub static ROW: Row =
    Row { name: "capsule", synthetic: Some(&TABLE), guard: None, suspect: None, home: None, producer: &CapsuleObject };
struct CapsuleObject;
static TABLE: DLPackExchangeAPI = synthetic::table(false);

impl Producer for CapsuleObject {
    fn claims(&self, py: Python<'_>, ty: *mut PyTypeObject, _: Option<&'static DLPackExchangeAPI>) -> bool {
        ty.cast::<PyObject>() == py.capsule_type
    }

    fn answer<'py>(&self, py: Python<'py>, object: *mut PyObject, _: Entry, _: Ask<'_>) -> Answer<'py> {
        // SAFETY: the caller's object, live while the token lives.
        let capsule = Owned::from_borrowed(py, unsafe { NonNull::new_unchecked(object) });
        Ok(Handover::capsule(capsule))
    }
}
