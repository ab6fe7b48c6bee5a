//! A dtype argument as users pass it (docs/python.md, "Arguments"): a name, a `(code, bits,
//! lanes)` triple, or a peer's dtype object, read without importing the peer. A name (a str read
//! in place) is the hot path; every other form is read out of line.

use pyo3_ffi::PyObject;

use super::{attribute, by_name, int_attribute, int_or_none, read_peer, str_attribute, Peer, MODULE};
use crate::abi::DLDataType;
use crate::cpython::{imported_module, is_tuple, is_type, shown, Interned, Owned, Python};
use crate::dtype::{names, parse_dtype};
use crate::error::{Error, Result};

static BYTEORDER: Interned = Interned::new(c"byteorder");
static DTYPE: Interned = Interned::new(c"dtype");
static IS_FLOATING_POINT: Interned = Interned::new(c"is_floating_point");
static ISBUILTIN: Interned = Interned::new(c"isbuiltin");
static ITEMSIZE: Interned = Interned::new(c"itemsize");
static KIND: Interned = Interned::new(c"kind");
static NAME: Interned = Interned::new(c"name");
static TYPE: Interned = Interned::new(c"type");
static TYPE_NAME: Interned = Interned::new(c"__name__");

/// A dtype argument: a name (`float32`, `float32x4`, `bfloat16`; tvm_ffi's dtype is a str), a
/// `(code, bits, lanes)` triple, numpy's dtype (cupy's and jax's are numpy's, ml_dtypes' are
/// numpy dtypes), a scalar type (`np.float32`, `jnp.float32`, `ml_dtypes.bfloat16`) or torch's
/// dtype.
pub fn dtype(py: Python<'_>, object: *mut PyObject) -> Result<DLDataType> {
    by_name(py, object, "dtype", parse_dtype, forms).unwrap_or_else(|| not_a_name(py, object))
}

/// The peers whose dtype objects are read by a mark; jax's, cupy's and ml_dtypes' dtypes are
/// numpy's, tvm_ffi's is a str (a name), and scalar types are types (`scalar_type`).
static PEERS: [Peer<DLDataType>; 2] = [
    Peer { name: "numpy", package: "numpy", mark: &ISBUILTIN, read: numpy },
    Peer { name: "torch", package: "torch", mark: &IS_FLOATING_POINT, read: torch },
];

/// What a dtype may be, for messages.
#[cold]
fn forms() -> String {
    format!(
        "a dtype is a name ({}; x<lanes> makes a vector: float32x4), a (code, bits, lanes) triple, or a {}, jax, \
         ml_dtypes or tvm_ffi dtype",
        names(),
        PEERS.iter().map(|peer| peer.name).collect::<Vec<_>>().join(", ")
    )
}

/// Every form but a name. A peer's dtype is asked before any sequence: numpy's has a length
/// (its fields).
#[inline(never)]
fn not_a_name(py: Python<'_>, object: *mut PyObject) -> Result<DLDataType> {
    if is_tuple(py, object) {
        return triple(py, object);
    }
    if is_type(py, object) {
        return scalar_type(py, object);
    }
    if let Some(read) = read_peer(py, object, &PEERS) {
        return read;
    }
    // SAFETY: GIL held; `object` is live.
    if unsafe { (py.PySequence_Check)(object) } != 0 {
        return triple(py, object);
    }
    Err(Error::type_error(format!("dtype={}: {}", shown(py, object), forms())))
}

/// `(code, bits, lanes)`, each in its field's range; DLPack's rules are checked where the
/// tensor is made (a triple reaches any dtype DLPack allows, named or not).
fn triple(py: Python<'_>, object: *mut PyObject) -> Result<DLDataType> {
    let raw = super::int_sequence(py, object, "dtype")?;
    let [code, bits, lanes] = raw[..] else {
        return Err(Error::type_error(format!(
            "dtype={}: a (code, bits, lanes) triple has 3 integers, not {}",
            shown(py, object),
            raw.len()
        )));
    };
    match (u8::try_from(code), u8::try_from(bits), u16::try_from(lanes)) {
        (Ok(code), Ok(bits), Ok(lanes)) => Ok(DLDataType { code, bits, lanes }),
        _ => Err(Error::value(format!("dtype=({code}, {bits}, {lanes}): code and bits are 0..=255, lanes 0..=65535"))),
    }
}

/// numpy's dtype (ml_dtypes' are numpy dtypes too), by the cheapest reading that is whole: a
/// built-in one (`isbuiltin` 1: native byte order, no fields) by its kind and item size; a
/// registered type (2: ml_dtypes') by its type's name, which is its dtype name; any other (0:
/// byte-swapped, structured, with metadata) by its name (`dtype.name` is Python code, some
/// microseconds) in native byte order only, the one DLPack has.
fn numpy(py: Python<'_>, object: *mut PyObject, isbuiltin: &Owned<'_>) -> Result<DLDataType> {
    let isbuiltin = int_or_none(py, isbuiltin.as_ptr());
    if isbuiltin == Some(1) {
        let kind = str_attribute(py, object, &KIND).and_then(|kind| kind.bytes().next());
        let size = int_attribute(py, object, &ITEMSIZE).and_then(|size| u8::try_from(size).ok());
        let dtype = kind.zip(size).and_then(|(kind, size)| crate::array_formats::from_kind(kind, size));
        return dtype.ok_or_else(|| no_dlpack_dtype(py, object));
    }
    const NATIVE: &str = if cfg!(target_endian = "little") { "<" } else { ">" };
    let order = str_attribute(py, object, &BYTEORDER);
    if !order.is_some_and(|order| ["=", "|", NATIVE].contains(&order.as_str())) {
        return Err(Error::value(format!(
            "dtype={} is not in native byte order, the only one DLPack has",
            shown(py, object)
        )));
    }
    let name = match isbuiltin {
        Some(2) => attribute(py, object, &TYPE).and_then(|ty| str_attribute(py, ty.as_ptr(), &TYPE_NAME)),
        _ => str_attribute(py, object, &NAME),
    };
    name.as_deref().and_then(parse_dtype).ok_or_else(|| no_dlpack_dtype(py, object))
}

/// torch's dtype, read by its name after `torch.`, when that fills its item: torch keeps
/// `int1`..`int7` and `uint1`..`uint7` one to a byte and exports them as 8-bit integers, so they
/// have no DLPack dtype (`float4_e2m1fn_x2`, two to a byte, is exported as two lanes).
fn torch(py: Python<'_>, object: *mut PyObject, _is_floating_point: &Owned<'_>) -> Result<DLDataType> {
    // A tensor has `is_floating_point` too: it is no dtype at all.
    if crate::cpython::type_name(py, object) != "torch.dtype" {
        return Err(Error::type_error(format!("dtype={}: {}", shown(py, object), forms())));
    }
    // SAFETY: GIL held; `object` is live; the new reference is released by `Owned`, a failure's
    // exception cleared (the refusal below says what went wrong).
    let text = Owned::new(py, unsafe { (py.PyObject_Str)(object) }).and_then(|s| py.str_value(s.as_ptr(), "str"));
    if text.is_err() {
        // SAFETY: GIL held.
        unsafe { (py.PyErr_Clear)() };
    }
    let dtype = text.ok().as_deref().and_then(|text| text.strip_prefix("torch.")).and_then(parse_dtype);
    match (dtype, int_attribute(py, object, &ITEMSIZE)) {
        (Some(dtype), Some(size)) if i64::from(dtype.bits) * i64::from(dtype.lanes) == size * 8 => Ok(dtype),
        (Some(dtype), Some(size)) => Err(Error::value(format!(
            "dtype={} has no DLPack dtype: torch keeps it in {} bits an item, not {}",
            shown(py, object),
            size * 8,
            u32::from(dtype.bits) * u32::from(dtype.lanes)
        ))),
        _ => Err(no_dlpack_dtype(py, object)),
    }
}

/// A scalar type: numpy's own (cupy's are numpy's) are handed to `numpy.dtype`, from
/// `sys.modules` (one of numpy's types means numpy is imported; dlpx imports no peer);
/// jax.numpy's and ml_dtypes' carry their numpy dtype as `dtype`. Python's own types are no
/// dtype.
fn scalar_type(py: Python<'_>, ty: *mut PyObject) -> Result<DLDataType> {
    let dtype = match str_attribute(py, ty, &MODULE).as_deref() {
        Some("numpy") => imported_module(py, c"numpy")
            .and_then(|numpy| attribute(py, numpy.as_ptr(), &DTYPE))
            .and_then(|numpy_dtype| call_one(py, &numpy_dtype, ty)),
        _ => attribute(py, ty, &DTYPE),
    };
    let numpy_dtype = dtype.as_ref().and_then(|dtype| Some((dtype, attribute(py, dtype.as_ptr(), &ISBUILTIN)?)));
    match numpy_dtype {
        Some((dtype, isbuiltin)) => numpy(py, dtype.as_ptr(), &isbuiltin),
        None => Err(Error::type_error(format!("dtype={}: {}", shown(py, ty), forms()))),
    }
}

/// `callable(argument)`, or None with the failure cleared.
fn call_one<'py>(py: Python<'py>, callable: &Owned<'py>, argument: *mut PyObject) -> Option<Owned<'py>> {
    // SAFETY: GIL held; PyTuple_SetItem steals the reference taken for it; a failure's
    // exception is cleared, as nobody reads it.
    unsafe {
        let result = Owned::new(py, (py.PyTuple_New)(1)).and_then(|args| {
            (py.Py_IncRef)(argument);
            (py.PyTuple_SetItem)(args.as_ptr(), 0, argument);
            Owned::new(py, (py.PyObject_CallObject)(callable.as_ptr(), args.as_ptr()))
        });
        if result.is_err() {
            (py.PyErr_Clear)();
        }
        result.ok()
    }
}

#[cold]
fn no_dlpack_dtype(py: Python<'_>, object: *mut PyObject) -> Error {
    Error::value(format!("dtype={} has no DLPack dtype dlpx names; {}", shown(py, object), forms()))
}
