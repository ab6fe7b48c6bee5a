//! The `numpy` row: arrays read through numpy's own array struct (docs/python.md, "What each
//! direct read rests on").

use std::ffi::{c_char, c_int, c_void};
use std::mem::size_of;
use std::ptr::{self, NonNull};

use pyo3_ffi::{PyObject, PyTypeObject};

use crate::abi::*;
use crate::cpython::{layout, type_of, Owned, Python};
use crate::error::Result;
use crate::layout::MAX_NDIM;
use crate::producers::discovered::Discovered;
use crate::producers::held::{self, Reference};
use crate::producers::home::Home;
use crate::producers::{synthetic, Answer, Ask, Entry, Guard, Handover, Producer, Row};

pub static ROW: Row = Row {
    name: "numpy",
    synthetic: Some(&TABLE),
    guard: Some(&GUARD),
    suspect: None,
    home: Some(&HOME),
    producer: &Numpy,
};
struct Numpy;
static HOME: Home = Home::new(c"numpy");
static TABLE: DLPackExchangeAPI = synthetic::table(false);
static GUARD: Guard = Guard::new("numpy", c"numpy", &["2.4", "2.5"]);

/// numpy's `ndarray` type, once numpy is imported with a known ABI.
static ARRAY_TYPE: Discovered<NonNull<PyTypeObject>> = Discovered::new(c"numpy", &[]);

/// numpy's scalar base type, `numpy.generic`, once numpy is imported with a known ABI.
static GENERIC_TYPE: Discovered<NonNull<PyTypeObject>> = Discovered::new(c"numpy", &[]);

/// Slots of numpy's `_ARRAY_API` table (`__multiarray_api.h`): `PyArray_Type`,
/// `PyGenericArrType_Type`.
const ARRAY_TYPE_SLOT: usize = 2;
const GENERIC_TYPE_SLOT: usize = 10;

impl Producer for Numpy {
    fn claims(&self, py: Python<'_>, ty: *mut PyTypeObject, _: Option<&'static DLPackExchangeAPI>) -> bool {
        ARRAY_TYPE.get_or_find(py, |py, _| read_array_api(py, ARRAY_TYPE_SLOT)) == NonNull::new(ty)
    }

    fn answer<'py>(&self, py: Python<'py>, object: *mut PyObject, _: Entry, _: Ask<'_>) -> Answer<'py> {
        // SAFETY: a managed tensor this read filled, ours, valid as made.
        Ok(managed_of(py, object)?.map_or(Handover::Uncovered, |managed| unsafe { Handover::made(managed) }))
    }
}

const _: () = assert!(size_of::<isize>() == size_of::<i64>(), "npy_intp is read as i64");

/// numpy's `PyArrayObject_fields` after the object header (`cpython::layout`), up to `flags`.
#[repr(C)]
struct ArrayFields {
    data: *mut c_void,
    nd: c_int,
    dimensions: *const isize,
    strides: *const isize,
    base: *mut PyObject,
    descr: *const PyObject,
    flags: c_int,
}

/// The prefix of numpy's `PyArray_Descr` that numpy 1.x and 2.x share, after the header.
#[repr(C)]
struct DescrPrefix {
    typeobj: *mut PyTypeObject,
    kind: c_char,
    type_: c_char,
    byteorder: c_char,
    former_flags: c_char,
    type_num: c_int,
}

/// `NPY_ABI_VERSION` of numpy 1.x and 2.x: the layouts above hold for both.
const KNOWN_ABI_VERSIONS: [u32; 2] = [0x0100_0009, 0x0200_0000];
const NPY_ARRAY_ALIGNED: c_int = 0x0100;
const NPY_ARRAY_WRITEABLE: c_int = 0x0400;

/// The DLPack dtype and item size of a builtin numpy type number with a fixed-size numeric
/// item; None for the others (long double, object, strings, datetimes, structured, user types).
fn dtype_of(type_num: c_int) -> Option<(DLDataType, usize)> {
    let long = size_of::<std::ffi::c_long>() as u8 * 8;
    let (code, bits) = match type_num {
        0 => (DataTypeCode::BOOL, 8),
        1 => (DataTypeCode::INT, 8),
        2 => (DataTypeCode::UINT, 8),
        3 => (DataTypeCode::INT, 16),
        4 => (DataTypeCode::UINT, 16),
        5 => (DataTypeCode::INT, 32),
        6 => (DataTypeCode::UINT, 32),
        7 => (DataTypeCode::INT, long),
        8 => (DataTypeCode::UINT, long),
        9 => (DataTypeCode::INT, 64),
        10 => (DataTypeCode::UINT, 64),
        11 => (DataTypeCode::FLOAT, 32),
        12 => (DataTypeCode::FLOAT, 64),
        14 => (DataTypeCode::COMPLEX, 64),
        15 => (DataTypeCode::COMPLEX, 128),
        23 => (DataTypeCode::FLOAT, 16),
        _ => return None,
    };
    Some((DLDataType { code: code.0, bits, lanes: 1 }, bits as usize / 8))
}

/// `numpy.ndarray` when `ty` is one of numpy's scalar types (a subclass of `numpy.generic`:
/// `numpy.float32`), which no row names numpy for: they are read through their
/// `__array_interface__`, but a kernel's outputs like them are numpy's (docs/kernels.md, "Which
/// argument decides"). None before numpy is imported.
pub fn array_type_of_scalar(py: Python<'_>, ty: *mut PyTypeObject) -> Option<*mut PyTypeObject> {
    let generic = GENERIC_TYPE.get_or_find(py, |py, _| read_array_api(py, GENERIC_TYPE_SLOT))?;
    let array = ARRAY_TYPE.get_or_find(py, |py, _| read_array_api(py, ARRAY_TYPE_SLOT))?;
    // SAFETY: GIL held; two live types.
    (unsafe { (py.PyType_IsSubtype)(ty, generic.as_ptr()) } != 0).then_some(array.as_ptr())
}

/// The type in `slot` of numpy's `_ARRAY_API` table, when slot 0, `PyArray_GetNDArrayCVersion`,
/// reports a known ABI.
fn read_array_api(py: Python<'_>, slot: usize) -> Option<NonNull<PyTypeObject>> {
    // SAFETY: GIL held; failures are cleared; the capsule holds numpy's API table (numpy names
    // it NULL), which lives as long as numpy, which is never unloaded.
    unsafe {
        let module = [c"numpy._core._multiarray_umath", c"numpy.core._multiarray_umath"].iter().find_map(|name| {
            let module = (py.PyImport_ImportModule)(name.as_ptr());
            if module.is_null() {
                (py.PyErr_Clear)();
            }
            Owned::new(py, module).ok()
        })?;
        let capsule = Owned::new(py, (py.PyObject_GetAttrString)(module.as_ptr(), c"_ARRAY_API".as_ptr()));
        let table = capsule.ok().map(|c| (py.PyCapsule_GetPointer)(c.as_ptr(), ptr::null())).unwrap_or(ptr::null_mut());
        if table.is_null() {
            (py.PyErr_Clear)();
            return None;
        }
        let table = table.cast::<*mut c_void>();
        let version: unsafe extern "C" fn() -> u32 = std::mem::transmute(*table);
        KNOWN_ABI_VERSIONS.contains(&version()).then(|| NonNull::new((*table.add(slot)).cast::<PyTypeObject>()))?
    }
}

/// A managed tensor describing `object` when it is a numpy array this read covers: it holds a
/// reference to the array, released by its deleter (which takes the GIL). It is valid as made:
/// the fields a tensor could be refused for are checked as they are read (ndim, dtype, byte
/// order, alignment, element strides), and numpy's own invariants stand for the rest, as its
/// layout does (non-negative extents whose byte size fits `npy_intp`, data for a non-empty
/// array: numpy refuses to make any other). None: not such an array, or not covered (the seam
/// asks `__dlpack__`).
pub fn managed_of(py: Python<'_>, object: *mut PyObject) -> Result<Option<NonNull<DLManagedTensorVersioned>>> {
    if ARRAY_TYPE.get(py) != NonNull::new(type_of(py, object)) {
        return Ok(None);
    }
    // SAFETY: the exact type is numpy's ndarray of a known ABI, so the object is laid out as
    // `ArrayFields`; the descr and dimension arrays live as long as the array.
    unsafe {
        let array = &*layout::fields(object).cast::<ArrayFields>();
        let descr = &*layout::fields(array.descr.cast_mut()).cast::<DescrPrefix>();
        let Some((dtype, itemsize)) = dtype_of(descr.type_num) else { return Ok(None) };
        let native = if cfg!(target_endian = "little") { b'<' } else { b'>' };
        let ndim = array.nd as usize;
        if ![b'=', b'|', native].contains(&(descr.byteorder as u8))
            || array.flags & NPY_ARRAY_ALIGNED == 0
            || ndim > MAX_NDIM
        {
            return Ok(None);
        }
        // A 0-d array has NULL `dimensions` and `strides`: no slice may be made from them. An
        // `npy_intp` is an `i64` on the 64-bit machines dlpx builds for.
        let (shape, strides): (&[i64], &[i64]) = match ndim {
            0 => (&[], &[]),
            _ => (
                std::slice::from_raw_parts(array.dimensions.cast::<i64>(), ndim),
                std::slice::from_raw_parts(array.strides.cast::<i64>(), ndim),
            ),
        };
        // Checked here, before the reference is taken, and converted again as the block is
        // written: a mask and a shift each, cheaper than a buffer of MAX_NDIM strides to fill.
        if strides.iter().any(|&s| crate::layout::whole_items(s, itemsize as i64).is_none()) {
            return Ok(None);
        }
        let readonly = array.flags & NPY_ARRAY_WRITEABLE == 0;
        let tensor = DLTensor {
            data: array.data,
            device: DLDevice::CPU,
            ndim: ndim as i32,
            dtype,
            shape: ptr::null_mut(),
            strides: ptr::null_mut(),
            byte_offset: 0,
        };
        let items = |stride| crate::layout::whole_items(stride, itemsize as i64).unwrap_or_default();
        let dims = shape.iter().zip(strides).map(|(&extent, &stride)| (extent, items(stride)));
        let reference = Reference::to(py, NonNull::new_unchecked(object));
        held::managed_holding(py, reference, tensor, dims, readonly).map(Some)
    }
}
