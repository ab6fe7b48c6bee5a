//! Reading the dict of an array interface: numpy's `__array_interface__` (version 3) and the
//! CUDA array interface (versions 2 and 3), which share their keys (docs/design.md R12):
//! `shape`, `typestr` (with `descr`, refused unless it says no more than `typestr`), `strides`
//! in bytes (None: C order), `data` (a pointer and a read-only flag; numpy's may also be None,
//! the object's own buffer, or an object exporting one, at `offset`), `__ref` (numpy's: what
//! keeps the pointed-to memory, where the owner does not), `mask` (refused),
//! `version`, and the CUDA one's `stream`.

use pyo3_ffi::PyObject;

use crate::abi::DLDataType;
use crate::args;
use crate::array_formats;
use crate::cpython::{Interned, Owned, Python};
use crate::error::{Error, ErrorKind, Result};
use crate::layout::{self, MAX_NDIM};

/// Which interface a dict is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Host,
    Cuda,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Host => "__array_interface__",
            Kind::Cuda => "__cuda_array_interface__",
        }
    }
}

/// Where the memory is.
pub enum Data<'py> {
    /// An address, whether it is read-only, and what keeps the memory there: the interface's
    /// owner, or the dict's `__ref` where it has one (a numpy scalar's interface points into a
    /// temporary array only `__ref` holds: the scalar does not).
    Pointer { address: usize, readonly: bool, keeper: Owned<'py> },
    /// The buffer of an object (the interface's owner when `data` was None), `offset` bytes in.
    Buffer(Owned<'py>, usize),
}

/// What an interface says.
pub struct Interface<'py> {
    pub dtype: DLDataType,
    pub ndim: usize,
    pub shape: [i64; MAX_NDIM],
    /// Element strides (from bytes), when every stride is a whole number of items.
    pub strides: [i64; MAX_NDIM],
    /// The strides in bytes (as given, or C order's).
    pub byte_strides: [i64; MAX_NDIM],
    /// Why the strides have no element form (a copy crosses, where one is asked for), if so.
    pub unaligned: Option<Error>,
    pub data: Data<'py>,
    /// The CUDA interface's `stream`: None absent or None (nothing to synchronise with).
    pub stream: Option<i64>,
}

/// The attribute names and the dict's keys, interned once: a lookup by an interned str hashes
/// nothing and compares pointers (one by a C string makes, hashes and frees a str each time).
static HOST: Interned = Interned::new(c"__array_interface__");
static CUDA: Interned = Interned::new(c"__cuda_array_interface__");
static VERSION: Interned = Interned::new(c"version");
static MASK: Interned = Interned::new(c"mask");
static TYPESTR: Interned = Interned::new(c"typestr");
static DESCR: Interned = Interned::new(c"descr");
static SHAPE: Interned = Interned::new(c"shape");
static STRIDES: Interned = Interned::new(c"strides");
static DATA: Interned = Interned::new(c"data");
static OFFSET: Interned = Interned::new(c"offset");
static STREAM: Interned = Interned::new(c"stream");
static REF: Interned = Interned::new(c"__ref");

/// The interface `kind` of `owner`, read from its attribute.
pub fn interface_of<'py>(py: Python<'py>, owner: *mut PyObject, kind: Kind) -> Result<Interface<'py>> {
    let name = match kind {
        Kind::Host => HOST.get(py)?,
        Kind::Cuda => CUDA.get(py)?,
    };
    // SAFETY: GIL held; `owner` and the name are live.
    let dict = Owned::new(py, unsafe { (py.PyObject_GetAttr)(owner, name) })?;
    let refuse = |what: String| Error::buffer(format!("{}: {what}", kind.name()));
    // SAFETY: GIL held; PyDict_Size fails (and says so) for anything but a dict.
    if unsafe { (py.PyDict_Size)(dict.as_ptr()) } < 0 {
        // SAFETY: as above.
        unsafe { (py.PyErr_Clear)() };
        return Err(refuse("is not a dict".into()));
    }
    let item = |key: &Interned| get(py, dict.as_ptr(), key);

    let version = item(&VERSION)?.ok_or_else(|| refuse("no version".into()))?;
    let version = args::int_value(py, version.as_ptr(), "version")?;
    let versions: &[i64] = if kind == Kind::Host { &[3] } else { &[2, 3] };
    if !versions.contains(&version) {
        return Err(refuse(format!("version {version} is not read (dlpx reads {versions:?})")));
    }
    if let Some(mask) = item(&MASK)? {
        if !args::is_none(py, mask.as_ptr()) {
            return Err(refuse("a mask is refused (DLPack has no masked arrays)".into()));
        }
    }
    let typestr = item(&TYPESTR)?.ok_or_else(|| refuse("no typestr".into()))?;
    let descr = item(&DESCR)?;
    let dtype = py.with_str(typestr.as_ptr(), "typestr", |typestr| {
        let dtype = array_formats::from_typestr(typestr)?;
        match &descr {
            Some(descr) => check_descr(py, descr.as_ptr(), typestr).map(|()| dtype).map_err(|()| {
                refuse(format!("a descr that typestr {typestr:?} does not describe is refused (a structured dtype)"))
            }),
            None => Ok(dtype),
        }
    })??;

    let shape_object = item(&SHAPE)?.ok_or_else(|| refuse("no shape".into()))?;
    // At most MAX_NDIM of them: a longer sequence is refused as it is read.
    let extents = args::int_sequence(py, shape_object.as_ptr(), "shape")?;
    layout::numel(&extents).map_err(Error::into_buffer_error)?;
    let ndim = extents.len();
    let mut shape = [0i64; MAX_NDIM];
    shape[..ndim].copy_from_slice(&extents);
    let item_size = (dtype.bits / 8) as i64;
    let (mut strides, mut byte_strides, mut unaligned) = ([0i64; MAX_NDIM], [0i64; MAX_NDIM], None);
    match item(&STRIDES)?.filter(|s| !args::is_none(py, s.as_ptr())) {
        None => {
            layout::compact_strides(&shape[..ndim], &mut strides[..ndim]);
            for (b, s) in byte_strides[..ndim].iter_mut().zip(&strides[..ndim]) {
                *b = s * item_size;
            }
        }
        Some(object) => {
            let bytes = args::int_sequence(py, object.as_ptr(), "strides")?;
            if bytes.len() != ndim {
                return Err(refuse(format!("{} strides for {ndim} dimensions", bytes.len())));
            }
            byte_strides[..ndim].copy_from_slice(&bytes);
            unaligned = layout::element_strides(bytes.iter().copied(), item_size, &mut strides[..ndim]).err();
        }
    }

    let data = match item(&DATA)? {
        Some(data) if is_tuple(py, data.as_ptr()) => {
            let (address, readonly) = pointer_and_flag(py, data.as_ptr())
                .map_err(|_| refuse("data must be (address: int, read_only: bool)".into()))?;
            let keeper = match item(&REF)? {
                Some(keeper) => keeper,
                None => Owned::from_borrowed(py, std::ptr::NonNull::new(owner).ok_or_else(|| Error::null("object"))?),
            };
            Data::Pointer { address, readonly, keeper }
        }
        _ if kind == Kind::Cuda => return Err(refuse("data must be (address: int, read_only: bool)".into())),
        data => {
            let offset = match item(&OFFSET)? {
                Some(o) => usize::try_from(args::int_value(py, o.as_ptr(), "offset")?)
                    .map_err(|_| refuse("a negative offset".into()))?,
                None => 0,
            };
            let exporter = match data.filter(|d| !args::is_none(py, d.as_ptr())) {
                Some(buffer) => buffer,
                None => Owned::from_borrowed(py, std::ptr::NonNull::new(owner).ok_or_else(|| Error::null("object"))?),
            };
            Data::Buffer(exporter, offset)
        }
    };

    // `stream` is version 3's (version 2 has no such key: one there is not the producer's word).
    let stream = match item(&STREAM)? {
        Some(s) if kind == Kind::Cuda && version >= 3 => match args::stream_value(py, s.as_ptr(), "stream")? {
            Some(0) => return Err(refuse("stream 0 is ambiguous and not allowed (the interface says 1 or 2)".into())),
            v => v,
        },
        _ => None,
    };
    Ok(Interface { dtype, ndim, shape, strides, byte_strides, unaligned, data, stream })
}

/// `dict[key]` as a new reference, None when absent.
fn get<'py>(py: Python<'py>, dict: *mut PyObject, key: &Interned) -> Result<Option<Owned<'py>>> {
    crate::cpython::dict_item(py, dict, key.get(py)?)
}

fn is_tuple(py: Python<'_>, object: *mut PyObject) -> bool {
    // SAFETY: GIL held; a live object (PyTuple_Size fails, and says so, for anything else).
    let size = unsafe { (py.PyTuple_Size)(object) };
    if size < 0 {
        // SAFETY: as above.
        unsafe { (py.PyErr_Clear)() };
    }
    size >= 0
}

/// `(address, read_only)` from the interface's `data` tuple.
fn pointer_and_flag(py: Python<'_>, data: *mut PyObject) -> Result<(usize, bool)> {
    // SAFETY: GIL held; `data` is a live tuple; items are borrowed from it.
    unsafe {
        if (py.PyTuple_Size)(data) != 2 {
            return Err(Error::new(ErrorKind::BufferError, "not a pair"));
        }
        let address = args::int_value(py, (py.PyTuple_GetItem)(data, 0), "data[0]")?;
        let readonly = args::optional_bool(py, (py.PyTuple_GetItem)(data, 1), "data[1]")?.unwrap_or(false);
        Ok((usize::try_from(address).map_err(|_| Error::buffer("a negative address"))?, readonly))
    }
}

/// Whether `descr` says no more than `typestr`: `[('', typestr)]`, numpy's own for a plain dtype.
fn check_descr(py: Python<'_>, descr: *mut PyObject, typestr: &str) -> std::result::Result<(), ()> {
    // SAFETY: GIL held; new references are owned, borrowed ones live with `descr`.
    unsafe {
        if (py.PySequence_Check)(descr) == 0 || (py.PySequence_Size)(descr) != 1 {
            (py.PyErr_Clear)();
            return Err(());
        }
        let field = Owned::new(py, (py.PySequence_GetItem)(descr, 0)).map_err(|_| (py.PyErr_Clear)())?;
        if (py.PySequence_Check)(field.as_ptr()) == 0 || (py.PySequence_Size)(field.as_ptr()) != 2 {
            (py.PyErr_Clear)();
            return Err(());
        }
        let is = |i, expected: &str| {
            let item = Owned::new(py, (py.PySequence_GetItem)(field.as_ptr(), i)).map_err(|_| (py.PyErr_Clear)())?;
            py.with_str(item.as_ptr(), "descr", |text| text == expected).map_err(|_| ())
        };
        match is(0, "")? && is(1, typestr)? {
            true => Ok(()),
            false => Err(()),
        }
    }
}
