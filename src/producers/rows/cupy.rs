//! The `cupy` row: `cupy.ndarray`, read as the `dlpack` row reads any `__dlpack__` (CuPy's own
//! export, with dlpx's stream asked for so that the read is ordered after CuPy's work). It is a
//! row of its own for the way back: a kernel's outputs for CuPy inputs come back as
//! `cupy.ndarray` (`cupy.from_dlpack`), not as `dlpx.Tensor`.

use pyo3_ffi::{PyObject, PyTypeObject};

use super::dlpack;
use crate::abi::*;
use crate::cpython::{attribute, Python};
use crate::producers::discovered::Discovered;
use crate::producers::home::Home;
use crate::producers::{synthetic, Answer, Ask, Entry, Producer, Row};

pub static ROW: Row =
    Row { name: "cupy", synthetic: Some(&TABLE), guard: None, suspect: None, home: Some(&HOME), producer: &Cupy };
struct Cupy;
static HOME: Home = Home::new(c"cupy");
static TABLE: DLPackExchangeAPI = synthetic::table(false);

/// `cupy.ndarray`, once CuPy is imported (kept for the process: the extension is never unloaded).
#[derive(Clone, Copy)]
struct Found {
    ndarray: *mut PyTypeObject,
}

static FOUND: Discovered<Found> = Discovered::new(c"cupy", &[]);

impl Producer for Cupy {
    fn claims(&self, py: Python<'_>, ty: *mut PyTypeObject, _: Option<&'static DLPackExchangeAPI>) -> bool {
        let found = FOUND.get_or_find(py, |py, module| {
            // The reference is kept: the type lives as long as CuPy, which is never unloaded.
            attribute(py, module.as_ptr(), c"ndarray").map(|t| Found { ndarray: t.into_ptr().cast() })
        });
        found.is_some_and(|found| found.ndarray == ty)
    }

    fn answer<'py>(&self, py: Python<'py>, object: *mut PyObject, _: Entry, ask: Ask<'_>) -> Answer<'py> {
        dlpack::export(py, object, ask.request)
    }
}
