//! The `capsule` row: a DLPack capsule handed over as it is, consumed (renamed `used_…`).

use pyo3_ffi::{PyObject, PyTypeObject};

use super::{synthetic, Entry, Producer, Read, Request, Row};
use crate::abi::*;
use crate::capsule;
use crate::cpython::Python;
use crate::error::Result;
use crate::tensor::Tensor;

pub static ROW: Row = Row { name: "capsule", synthetic: Some(&TABLE), guard: None, producer: &CapsuleObject };
struct CapsuleObject;
static TABLE: DLPackExchangeAPI = synthetic::table(false);

impl Producer for CapsuleObject {
    fn claims(&self, py: Python<'_>, ty: *mut PyTypeObject, _: Option<&'static DLPackExchangeAPI>) -> bool {
        ty.cast::<PyObject>() == py.capsule_type
    }

    fn managed(&self, py: Python<'_>, object: *mut PyObject, _: Entry) -> Read {
        capsule::consume(py, object)?.export_versioned(0).map(Some)
    }

    fn import(&self, py: Python<'_>, object: *mut PyObject, _: Entry, _: Request) -> Result<Option<Tensor>> {
        capsule::consume(py, object).map(Some)
    }
}
