//! torch's view of a tensor (and, holding the tensor, its owning import) read through libtorch's
//! stable C functions (`aoti_torch_get_*`, the shim AOTInductor's compiled code links: each
//! catches every C++ exception and returns an error code), in place of its exchange table's
//! `dltensor_from_py_object_no_sync`, which reaches the same `at::Tensor` through pybind11 (a GIL
//! acquisition the caller already holds, a type check and a reference count taken and given
//! back): ~580 instructions a tensor where the functions take ~140. They read what the table's
//! `at::toDLPackNonOwning` reads — `data_ptr()` (the first element's address, copy-on-write
//! storage materialised as the table's writable view does), the device, `dim()`, the dtype,
//! `sizes()` and `strides()` (pointers into the tensor's own metadata), no byte offset — and the
//! view is only used where both agree (docs/design.md, "torch's view through its C shim"):
//!
//! - only `torch.Tensor` and `nn.Parameter` objects (their C++ metadata: a subclass may answer
//!   its sizes in Python), strided, on the CPU or CUDA, of the dtypes below: anything else
//!   (sparse, nested, meta, quantized, another device or dtype, another type) is the table's to
//!   answer or refuse; a tensor with no memory to point at (a functional or fake tensor's
//!   storage) is read as the table reads it, with NULL data, which the view's checks refuse;
//! - each pair of dtype and device is read both ways on its first tensor, and the view used
//!   only after they agreed field by field; a difference turns the shim off for the process
//!   (a RuntimeWarning, or an error under `DLPX_DIRECT_STRICT`), as a direct read's guard does.

use std::ffi::{c_void, CStr};
use std::ptr::{self, NonNull};

use pyo3_ffi::PyTypeObject;

use crate::abi::*;
use crate::cpython::{GilVar, Python};
use crate::error::Result;
use crate::producers::served::Served;

type Get32 = unsafe extern "C" fn(*const c_void, *mut i32) -> i32;
type Get64 = unsafe extern "C" fn(*const c_void, *mut i64) -> i32;
type GetDims = unsafe extern "C" fn(*const c_void, *mut *mut i64) -> i32;
type GetData = unsafe extern "C" fn(*const c_void, *mut *mut c_void) -> i32;
type Constant = unsafe extern "C" fn() -> i32;

/// torch's dtypes the shim reads, by the name of the shim function giving torch's code for each
/// and the DLPack name of the dtype torch exports it as (`at::getDLDataType`): each one checked
/// against the table on its first tensor.
const DTYPES: [(&CStr, &str); 15] = [
    (c"aoti_torch_dtype_bool", "bool"),
    (c"aoti_torch_dtype_uint8", "uint8"),
    (c"aoti_torch_dtype_int8", "int8"),
    (c"aoti_torch_dtype_int16", "int16"),
    (c"aoti_torch_dtype_int32", "int32"),
    (c"aoti_torch_dtype_int64", "int64"),
    (c"aoti_torch_dtype_uint16", "uint16"),
    (c"aoti_torch_dtype_uint32", "uint32"),
    (c"aoti_torch_dtype_uint64", "uint64"),
    (c"aoti_torch_dtype_float16", "float16"),
    (c"aoti_torch_dtype_bfloat16", "bfloat16"),
    (c"aoti_torch_dtype_float32", "float32"),
    (c"aoti_torch_dtype_float64", "float64"),
    (c"aoti_torch_dtype_complex64", "complex64"),
    (c"aoti_torch_dtype_complex128", "complex128"),
];

/// torch's codes for dtypes (`c10::ScalarType`) below this are looked up in one load.
const CODES: usize = 64;

/// libtorch's functions and the codes they answer in.
pub struct Shim {
    layout: Get32,
    device_type: Get32,
    device_index: Get32,
    dtype: Get32,
    dim: Get64,
    sizes: GetDims,
    strides: GetDims,
    data_ptr: GetData,
    strided: i32,
    cpu: i32,
    /// -1 (no device type's code) where CUDA tensors are not read.
    cuda: i32,
    /// By torch's dtype code: the DLPack dtype, and its place in [`DTYPES`] (`u8::MAX`: not read).
    dtypes: [(DLDataType, u8); CODES],
    /// The other way: torch's code by [`by_dtype`]'s place (-1: not read).
    codes: [i32; BY_DTYPE],
}

/// DLPack dtype codes (kDLInt to kDLBool) times the widths 8 to 128 bits.
const BY_DTYPE: usize = 7 * 5;

/// Where `dtype` (one lane) has its place in [`Shim`]'s `codes`.
fn by_dtype(dtype: DLDataType) -> Option<usize> {
    let width = match dtype.bits {
        8 => 0,
        16 => 1,
        32 => 2,
        64 => 3,
        128 => 4,
        _ => return None,
    };
    (dtype.lanes == 1 && dtype.code < 7).then_some(dtype.code as usize * 5 + width)
}

/// Where the shim stands: its functions found (or not) with torch's other C++ functions, and
/// the pairs of dtype and device that agreed with the table (bit `2 × dtype + device`).
#[derive(Clone, Copy)]
enum State {
    /// `tensor_type` and `parameter_type` (NULL where there is none): `torch.Tensor` (torch's
    /// own) and `nn.Parameter`, the types read. A subclass may compute its sizes in Python
    /// (`__torch_dispatch__`, a wrapper's), which the shim's reads would run and which frees the
    /// dimensions it gave when asked again: such objects, and any other type publishing torch's
    /// table, go to the table.
    On {
        shim: &'static Shim,
        agreed: u64,
        tensor_type: *mut PyTypeObject,
        parameter_type: *mut PyTypeObject,
    },
    Off,
}

// SAFETY: the types are compared and asked with the GIL held, and live for the process.
unsafe impl Send for State {}

static STATE: GilVar<State> = GilVar::new(State::Off);
/// The views the shim gave (`dlpx._native._served("torch_shim")`).
static SERVED: Served = Served::of("torch_shim");

impl Shim {
    /// The functions, looked up with `symbol` in libtorch (None where one is missing: an older
    /// torch), kept for the process. `rocm`: a ROCm build of torch, whose "cuda" tensors it
    /// exports as ROCm's (`kDLROCM`): the shim reads none of them.
    ///
    /// # Safety
    /// `symbol` gives libtorch's function of that name, which lives for the process.
    pub unsafe fn find(symbol: impl Fn(&CStr) -> Option<NonNull<c_void>>, rocm: bool) -> Option<&'static Shim> {
        // SAFETY: the caller's promise; each name below is a function of the type it is read as
        // (torch/csrc/inductor/aoti_torch/c/shim.h).
        unsafe {
            let get = |name: &CStr| symbol(name).map(|f| std::mem::transmute::<*mut c_void, Get32>(f.as_ptr()));
            let constant = |name: &CStr| {
                symbol(name).map(|f| std::mem::transmute::<*mut c_void, Constant>(f.as_ptr())()).filter(|&c| c >= 0)
            };
            let mut dtypes = [(DLDataType { code: 0, bits: 0, lanes: 0 }, u8::MAX); CODES];
            let mut codes = [-1; BY_DTYPE];
            for (place, &(function, name)) in DTYPES.iter().enumerate() {
                let (Some(code), Some(dtype)) = (constant(function), crate::dtype::parse_dtype(name)) else { continue };
                if let (Some(slot), Some(back)) = (dtypes.get_mut(code as usize), by_dtype(dtype)) {
                    *slot = (dtype, place as u8);
                    codes[back] = code;
                }
            }
            let shim = Shim {
                layout: get(c"aoti_torch_get_layout")?,
                device_type: get(c"aoti_torch_get_device_type")?,
                device_index: get(c"aoti_torch_get_device_index")?,
                dtype: get(c"aoti_torch_get_dtype")?,
                dim: std::mem::transmute::<*mut c_void, Get64>(symbol(c"aoti_torch_get_dim")?.as_ptr()),
                sizes: std::mem::transmute::<*mut c_void, GetDims>(symbol(c"aoti_torch_get_sizes")?.as_ptr()),
                strides: std::mem::transmute::<*mut c_void, GetDims>(symbol(c"aoti_torch_get_strides")?.as_ptr()),
                data_ptr: std::mem::transmute::<*mut c_void, GetData>(symbol(c"aoti_torch_get_data_ptr")?.as_ptr()),
                strided: constant(c"aoti_torch_layout_strided")?,
                cpu: constant(c"aoti_torch_device_type_cpu")?,
                cuda: if rocm { -1 } else { constant(c"aoti_torch_device_type_cuda")? },
                dtypes,
                codes,
            };
            Some(Box::leak(Box::new(shim)))
        }
    }

    /// torch's code for `dtype`, where the shim reads that dtype.
    pub fn code_of(&self, dtype: DLDataType) -> Option<i32> {
        self.codes.get(by_dtype(dtype)?).copied().filter(|&code| code >= 0)
    }

    /// torch's device type and index for `device`: the CPU, or CUDA where the shim reads it.
    pub fn device_code(&self, device: DLDevice) -> Option<(i32, i32)> {
        match device.device_type {
            DeviceType::CPU => Some((self.cpu, device.device_id)),
            DeviceType::CUDA if self.cuda >= 0 => Some((self.cuda, device.device_id)),
            _ => None,
        }
    }

    /// `tensor`'s sizes and strides (pointers into its own metadata) and its first element.
    ///
    /// # Safety
    /// As for [`Shim::read`].
    pub unsafe fn dims_and_data(&self, tensor: *const c_void) -> Option<(*mut i64, *mut i64, *mut c_void)> {
        let (mut shape, mut strides, mut data) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        // SAFETY: the caller's promise; each function writes only its out.
        let status = unsafe {
            (self.sizes)(tensor, &mut shape) | (self.strides)(tensor, &mut strides) | (self.data_ptr)(tensor, &mut data)
        };
        (status == 0).then_some((shape, strides, data))
    }

    /// `tensor`'s view and the bit of its pair of dtype and device, or None where the shim does
    /// not read it (or a function failed: torch's error is left in its shim, never raised).
    ///
    /// # Safety
    /// `tensor` is a live `at::Tensor`, its owner held by the caller.
    #[inline(always)]
    unsafe fn read(&self, tensor: *const c_void) -> Option<(DLTensor, u64)> {
        // SAFETY: the caller's promise; every function writes only its out.
        unsafe {
            let ok = |status: i32| (status == 0).then_some(());
            let (mut layout, mut device, mut code) = (0i32, 0i32, 0i32);
            ok((self.layout)(tensor, &mut layout))?;
            ok((self.device_type)(tensor, &mut device))?;
            ok((self.dtype)(tensor, &mut code))?;
            let (dtype, place) = *self.dtypes.get(usize::try_from(code).ok()?)?;
            if layout != self.strided || place == u8::MAX {
                return None;
            }
            let (device, cuda) = match device {
                d if d == self.cpu => (DLDevice::CPU, 0),
                d if d == self.cuda => {
                    let mut index = 0i32;
                    ok((self.device_index)(tensor, &mut index))?;
                    (DLDevice { device_type: DeviceType::CUDA, device_id: index }, 1)
                }
                _ => return None,
            };
            let (mut ndim, mut shape, mut strides, mut data) =
                (0i64, ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
            ok((self.dim)(tensor, &mut ndim))?;
            ok((self.sizes)(tensor, &mut shape))?;
            ok((self.strides)(tensor, &mut strides))?;
            ok((self.data_ptr)(tensor, &mut data))?;
            let view =
                DLTensor { data, device, ndim: i32::try_from(ndim).ok()?, dtype, shape, strides, byte_offset: 0 };
            Some((view, 1u64 << (2 * place as u32 + cuda)))
        }
    }
}

/// Turns the shim on for objects of exactly `tensor_type` (torch's own `torch.Tensor`) or
/// `parameter_type` (`nn.Parameter`, NULL for none), both kept for the process, with the
/// functions `find` found (once, with torch's other functions).
pub fn found(
    py: Python<'_>,
    shim: Option<&'static Shim>,
    tensor_type: *mut PyTypeObject,
    parameter_type: *mut PyTypeObject,
) {
    if let Some(shim) = shim.filter(|_| !tensor_type.is_null()) {
        STATE.set(py, State::On { shim, agreed: 0, tensor_type, parameter_type });
    }
}

/// `tensor`'s view in `out` through the shim: Ok(true) where it gave it. On a pair's first
/// tensor the table (`table`, torch's `dltensor_from_py_object_no_sync`, for `object`) is asked
/// too, and its view is the answer; the shim's is used from then on only where they agreed.
///
/// # Safety
/// `object` is live, and where it is a `torch.Tensor` or `nn.Parameter`, `tensor` is its own
/// `at::Tensor` (the layout checked).
#[inline(always)]
pub unsafe fn view(
    py: Python<'_>,
    object: *mut pyo3_ffi::PyObject,
    tensor: *const c_void,
    table: crate::abi::DLPackDLTensorFromPyObjectNoSync,
    out: &std::cell::Cell<DLTensor>,
) -> Result<bool> {
    let State::On { shim, agreed, tensor_type, parameter_type } = STATE.get(py) else { return Ok(false) };
    let ty = crate::cpython::type_of(py, object);
    if ty != tensor_type && ty != parameter_type {
        return Ok(false);
    }
    // SAFETY: the caller's promise.
    let Some((view, pair)) = (unsafe { shim.read(tensor) }) else { return Ok(false) };
    if agreed & pair == 0 {
        return first_of_pair(py, object, table, out, view, pair);
    }
    out.set(view);
    SERVED.count(py);
    Ok(true)
}

/// `object`'s tensor through the shim as an owning managed tensor that holds a reference to
/// `object` (as the numpy row's reads do: `held`), for `from_dlpack` and `dlpx_import`, where
/// torch's table has the same pybind11 path around `toDLPackVersioned`; Ok(None) where the shim
/// does not read it, or reads what a managed tensor cannot describe (the table then answers, and
/// the import's checks refuse what it gives).
///
/// # Safety
/// As for [`view`].
#[inline]
pub unsafe fn held(
    py: Python<'_>,
    object: *mut pyo3_ffi::PyObject,
    tensor: *const c_void,
    table: crate::abi::DLPackDLTensorFromPyObjectNoSync,
) -> Result<Option<NonNull<DLManagedTensorVersioned>>> {
    let slot = std::cell::Cell::new(DLTensor::EMPTY);
    // SAFETY: the caller's promise.
    if !unsafe { view(py, object, tensor, table, &slot) }? {
        return Ok(None);
    }
    let read = slot.get();
    // SAFETY: a view of the live tensor: `ndim` extents and strides where it is sound.
    let sound =
        (0..=crate::layout::MAX_NDIM as i32).contains(&read.ndim) && unsafe { crate::validate::is_sound(&read, 0) };
    let Some(object) = NonNull::new(object).filter(|_| sound) else { return Ok(None) };
    let ndim = read.ndim as usize;
    let dims = (0..ndim).map(|i| {
        // SAFETY: `i < ndim`, the length of both (checked sound above).
        unsafe { (*read.shape.add(i), *read.strides.add(i)) }
    });
    let reference = crate::producers::held::Reference::to(py, object);
    // SAFETY: the reference keeps the tensor, and so its memory, valid while it is held; `dims`
    // yields `ndim` pairs, at most MAX_NDIM, of a view checked sound above (its reach with it;
    // torch's arrays, read twice, stay as they are while the caller holds the tensor: a resize
    // on another thread of a free-threaded interpreter races in torch itself, its memory too).
    unsafe { crate::producers::held::managed_holding_sound(py, reference, read, dims, false) }.map(Some)
}

/// A pair's first tensor: read by the table too, the two compared; the table's view is the
/// answer (Ok(true)), or its failure (Ok(false): the caller asks it again and raises it).
#[cold]
fn first_of_pair(
    py: Python<'_>,
    object: *mut pyo3_ffi::PyObject,
    table: crate::abi::DLPackDLTensorFromPyObjectNoSync,
    out: &std::cell::Cell<DLTensor>,
    ours: DLTensor,
    pair: u64,
) -> Result<bool> {
    let Some(table) = table else { return Ok(false) };
    // Ours, copied before the table is asked: asking again may move what the first answer
    // pointed at (a tensor whose metadata is computed on demand).
    let (our_shape, our_strides) = (dims(&ours, ours.shape), dims(&ours, ours.strides));
    // SAFETY: the table's contract: the GIL held (the token), an object of its type, a writable
    // DLTensor (the cell's, which nothing else borrows during the call).
    if unsafe { table(object.cast(), out.as_ptr()) } != 0 {
        // SAFETY: the token proves the GIL is held; the caller's second read raises it anew.
        unsafe { (py.PyErr_Clear)() };
        return Ok(false);
    }
    let theirs = out.get();
    match difference((&ours, our_shape, our_strides), &theirs) {
        None => {
            STATE.replace(py, |now| match now {
                State::On { shim, agreed, tensor_type, parameter_type } => {
                    State::On { shim, agreed: agreed | pair, tensor_type, parameter_type }
                }
                off => off,
            });
            Ok(true)
        }
        Some(difference) => {
            let fact = format!("torch's C shim reads a tensor otherwise than its exchange table: {difference}");
            let instead = "dlpx asks torch's exchange table for every tensor from now on";
            crate::producers::guard::disagreement(py, &fact, instead, || STATE.set(py, State::Off))?;
            Ok(true)
        }
    }
}

/// What differs between two views of one tensor (ours with its dimensions copied), or None.
fn difference(ours: (&DLTensor, Option<Vec<i64>>, Option<Vec<i64>>), theirs: &DLTensor) -> Option<String> {
    let (view, shape, strides) = ours;
    let theirs_dims = (dims(theirs, theirs.shape), dims(theirs, theirs.strides));
    let same = view.data == theirs.data
        && view.device == theirs.device
        && view.ndim == theirs.ndim
        && view.dtype == theirs.dtype
        && view.byte_offset == theirs.byte_offset
        && (&shape, &strides) == (&theirs_dims.0, &theirs_dims.1);
    (!same).then(|| {
        format!(
            "the shim's {} against the table's {}",
            describe(view, &shape, &strides),
            describe(theirs, &theirs_dims.0, &theirs_dims.1)
        )
    })
}

/// A view's extents or strides (`at`), or None where it has none.
fn dims(view: &DLTensor, at: *mut i64) -> Option<Vec<i64>> {
    let ndim = usize::try_from(view.ndim).ok().filter(|&n| n > 0 && !at.is_null())?;
    // SAFETY: a view of a live tensor, its shape and strides `ndim` long.
    Some(unsafe { std::slice::from_raw_parts(at, ndim) }.to_vec())
}

#[cold]
fn describe(view: &DLTensor, shape: &Option<Vec<i64>>, strides: &Option<Vec<i64>>) -> String {
    format!(
        "data {:p} + {}, {}, ndim {}, {}, shape {shape:?}, strides {strides:?}",
        view.data,
        view.byte_offset,
        crate::device_names::name(view.device),
        view.ndim,
        crate::dtype::dtype_name(view.dtype),
    )
}
