//! A kernel's outputs in torch, made through libtorch's C shim rather than its exchange table:
//! `aoti_torch_empty_strided` (the `at::empty_strided` the table's allocator reaches through
//! pybind11, which takes the GIL) allocates, and `THPVariable_Wrap` (what torch's own bindings
//! return every new tensor through) makes the `torch.Tensor`, where the table's `to_py` wraps the
//! managed tensor in a second tensor whose storage calls its deleter. `lib.add` of two 16-float
//! torch tensors takes ~7 300 instructions this way against 9 849 through the table
//! (docs/design.md, "torch's outputs through its C shim").
//!
//! What it gives is held to the request as the table's answer is (`framework_allocator`); where
//! the shim fails (out of memory, a device torch does not have) the table is asked instead, so
//! that its error, in torch's words, is the one raised. Only CPU and CUDA outputs of the dtypes
//! the view reads; anything else is the table's.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::{self, NonNull};

use once_cell::sync::OnceCell;
use pyo3_ffi::PyObject;

use super::torch_shim::Shim;
use crate::abi::*;
use crate::cpython::Python;
use crate::error::Result;
use crate::memory::cpu::{self, Capacity};
use crate::producers::served::Served;

/// `aoti_torch_empty_strided(ndim, sizes, strides, dtype, device_type, device_index, out)`.
type EmptyStrided = unsafe extern "C" fn(i64, *const i64, *const i64, i32, i32, i32, *mut *mut c_void) -> i32;
/// `aoti_torch_delete_tensor_object(tensor)`.
type Delete = unsafe extern "C" fn(*mut c_void) -> i32;
/// `THPVariable_Wrap(at::TensorBase&&)` or one of its other forms (a reference is a pointer; an
/// `AtenTensorHandle` is an `at::Tensor*`): a new reference to the tensor's Python object, or
/// NULL with an exception.
type Wrap = unsafe extern "C" fn(*mut c_void) -> *mut PyObject;

/// The mangled names `THPVariable_Wrap` has had, the cheapest first: by rvalue reference (moves
/// the tensor into the object, leaving the handle's empty: its deletion touches no reference
/// count), by const reference (a copy), by value (an older torch's; the Itanium ABI passes a
/// non-trivial value as a pointer to a copy the caller owns and destroys, which the handle here
/// is). torch 2.11 and 2.15 have the first two.
const WRAPS: [&CStr; 3] = [
    c"_Z16THPVariable_WrapON2at10TensorBaseE",
    c"_Z16THPVariable_WrapRKN2at10TensorBaseE",
    c"_Z16THPVariable_WrapN2at10TensorBaseE",
];

/// libtorch's functions for outputs.
pub struct Outputs {
    shim: &'static Shim,
    empty_strided: EmptyStrided,
    delete: Delete,
    wrap: Wrap,
}

/// Found with the view's functions, kept for the process; read without the GIL (an allocator
/// may be called without it).
static OUTPUTS: OnceCell<&'static Outputs> = OnceCell::new();
/// The outputs made `torch.Tensor`s this way (`dlpx._native._served("torch_outputs")`).
static SERVED: Served = Served::of("torch_outputs");
/// torch's table's allocator: what answers where the shim fails.
static TABLE_ALLOCATOR: OnceCell<DLPackManagedTensorAllocator> = OnceCell::new();

/// One output: the managed tensor handed over (first: its address is the block's), the
/// `at::Tensor` it describes, its header as made and torch's own sizes and strides. The header's
/// shape and strides are the block's copies, which follow the `Output`: a caller that writes
/// them (a kernel by mistake; a C caller that describes the memory anew before
/// `dlpx_to_py_like`) never reaches the `at::Tensor`, and a tensor whose header or arrays changed
/// is what its header says, not the `at::Tensor` ([`to_py`]).
#[repr(C)]
struct Output {
    managed: DLManagedTensorVersioned,
    tensor: *mut c_void,
    made: DLTensor,
    sizes: *const i64,
    strides: *const i64,
}

impl Output {
    /// Whether the managed tensor is still as made: its flags, its header's words, and its
    /// arrays' values against torch's (an element loop: `ndim` is small, and a slice compare is
    /// a `bcmp` call).
    ///
    /// # Safety
    /// A live output [`made`] wrote.
    unsafe fn as_made(&self) -> bool {
        let ndim = self.made.ndim as usize;
        let same = |ours: *const i64, torch: *const i64| {
            // SAFETY: `ndim` values each: the block's copies, the `at::Tensor`'s arrays.
            (0..ndim).all(|i| unsafe { *ours.add(i) == *torch.add(i) })
        };
        self.managed.flags == 0
            && self.managed.dl_tensor.same_header(&self.made)
            && same(self.made.shape, self.sizes)
            && same(self.made.strides, self.strides)
    }
}

impl Outputs {
    /// Looks the functions up with `symbol` (None where one is missing) and keeps them.
    ///
    /// # Safety
    /// As for [`Shim::find`].
    pub unsafe fn find(shim: &'static Shim, symbol: &dyn Fn(&CStr) -> Option<NonNull<c_void>>) {
        // SAFETY: each name is a function of the type it is read as (shim.h; WRAPS above).
        let outputs = unsafe {
            (|| {
                Some(Outputs {
                    shim,
                    empty_strided: std::mem::transmute::<*mut c_void, EmptyStrided>(
                        symbol(c"aoti_torch_empty_strided")?.as_ptr(),
                    ),
                    delete: std::mem::transmute::<*mut c_void, Delete>(
                        symbol(c"aoti_torch_delete_tensor_object")?.as_ptr(),
                    ),
                    wrap: std::mem::transmute::<*mut c_void, Wrap>(
                        WRAPS.iter().find_map(|name| symbol(name))?.as_ptr(),
                    ),
                })
            })()
        };
        if let Some(outputs) = outputs {
            let _ = OUTPUTS.set(Box::leak(Box::new(outputs)));
        }
    }
}

/// The allocator for torch outputs: the shim's where it was found, else `table`'s (torch's).
pub fn allocator(table: &'static DLPackExchangeAPI) -> DLPackManagedTensorAllocator {
    let _ = TABLE_ALLOCATOR.set(table.managed_tensor_allocator);
    match OUTPUTS.get() {
        Some(_) => Some(allocate),
        None => table.managed_tensor_allocator,
    }
}

/// `managed` as a `torch.Tensor` where [`allocate`] made it and its header and flags are as
/// made (None otherwise: the table's `to_py` then imports what the header says): on success the
/// object owns the memory and `managed` is gone; on failure the caller still owns it.
pub fn to_py(py: Python<'_>, managed: NonNull<DLManagedTensorVersioned>) -> Option<Result<*mut PyObject>> {
    let ours = |d| std::ptr::fn_addr_eq(d, delete_output as unsafe extern "C" fn(*mut DLManagedTensorVersioned));
    // SAFETY: a live managed tensor, by the caller's contract; only its deleter is read.
    if !unsafe { managed.as_ref() }.deleter.is_some_and(ours) {
        return None;
    }
    let outputs = OUTPUTS.get()?;
    let output = managed.as_ptr().cast::<Output>();
    // SAFETY: one of ours (its deleter), so an `Output`, live.
    if !unsafe { (*output).as_made() } {
        return None;
    }
    // SAFETY: the GIL is held (the token); one of ours, so an `Output` whose tensor is live.
    let object = unsafe { (outputs.wrap)((*output).tensor) };
    Some(match object.is_null() {
        true => Err(crate::cpython::take_pending(py)),
        false => {
            // The object holds the tensor now; ours goes.
            // SAFETY: ours to delete, once.
            unsafe { delete_output(managed.as_ptr()) };
            SERVED.count(py);
            Ok(object)
        }
    })
}

/// DLPack's allocator contract, through the shim; torch's table's where the shim does not serve
/// the request or fails.
#[allow(non_snake_case)] // `SetError` keeps the DLPack header's parameter name
unsafe extern "C" fn allocate(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    SetError: Option<unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char)>,
) -> c_int {
    let mut given = None;
    crate::error::guard("torch output", || {
        // SAFETY: the allocator's contract: a valid prototype.
        given = OUTPUTS.get().zip(unsafe { prototype.as_ref() }).and_then(|(o, p)| unsafe { made(o, p) });
    });
    match given {
        Some(managed) => {
            // SAFETY: as above.
            unsafe { *out = managed };
            0
        }
        None => match TABLE_ALLOCATOR.get().copied().flatten() {
            // SAFETY: the same call, to the table's allocator.
            Some(table) => unsafe { table(prototype, out, error_ctx, SetError) },
            None => -1,
        },
    }
}

/// A new output for `prototype` (compact), or None where the shim does not make it.
///
/// # Safety
/// `prototype.shape` holds `ndim` values.
unsafe fn made(outputs: &Outputs, prototype: &DLTensor) -> Option<*mut DLManagedTensorVersioned> {
    let shim = outputs.shim;
    let ndim = usize::try_from(prototype.ndim).ok().filter(|&n| n <= crate::layout::MAX_NDIM)?;
    let code = shim.code_of(prototype.dtype)?;
    let (device_type, device_index) = shim.device_code(prototype.device)?;
    let shape: &[i64] = match ndim {
        0 => &[],
        // SAFETY: the caller's promise.
        _ => unsafe { std::slice::from_raw_parts(prototype.shape, ndim) },
    };
    // The request was checked (`check_request`): its byte size fits, so its strides do.
    let mut strides = [0i64; crate::layout::MAX_NDIM];
    crate::layout::compact_strides(shape, &mut strides[..ndim]);
    let mut tensor = ptr::null_mut();
    // SAFETY: `ndim` sizes and strides; a writable out.
    let status = unsafe {
        (outputs.empty_strided)(
            ndim as i64,
            shape.as_ptr(),
            strides.as_ptr(),
            code,
            device_type,
            device_index,
            &mut tensor,
        )
    };
    if status != 0 || tensor.is_null() {
        return None;
    }
    // Its sizes, strides and memory read back (the rest is what was asked for, which
    // `framework_allocator` holds the answer to, sizes and strides included).
    // SAFETY: a live tensor the shim just made, ours.
    let Some((sizes, torch_strides, data)) = (unsafe { shim.dims_and_data(tensor) }) else {
        // SAFETY: ours, deleted once.
        unsafe { (outputs.delete)(tensor) };
        return None;
    };
    let Some(block) = alloc_block(ndim) else {
        // SAFETY: ours, deleted once.
        unsafe { (outputs.delete)(tensor) };
        return None;
    };
    let output = block.cast::<Output>();
    // SAFETY: a block of `ndim` dimensions: the `Output`, then its shape and strides; torch's
    // arrays hold `ndim` values each. A loop, not `copy_nonoverlapping` (a `memcpy` call for a
    // length known only now, ~40 instructions each for an output's one or two values).
    let (shape, strides) = unsafe {
        let shape = output.as_ptr().add(1).cast::<i64>();
        for i in 0..ndim {
            shape.add(i).write(*sizes.add(i));
            shape.add(ndim + i).write(*torch_strides.add(i));
        }
        (shape, shape.add(ndim))
    };
    let dl_tensor = DLTensor {
        data,
        device: prototype.device,
        ndim: prototype.ndim,
        dtype: prototype.dtype,
        shape,
        strides,
        byte_offset: 0,
    };
    // SAFETY: as above: room and alignment for an `Output` first.
    unsafe {
        output.write(Output {
            managed: DLManagedTensorVersioned {
                version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
                manager_ctx: ptr::null_mut(),
                deleter: Some(delete_output),
                flags: 0,
                dl_tensor,
            },
            tensor,
            made: dl_tensor,
            sizes,
            strides: torch_strides,
        })
    };
    Some(output.as_ptr().cast())
}

/// A block for an output of `ndim` dimensions (its `Output`, then its shape and strides): from
/// dlpx's allocator, whose per-thread cache makes it a pop and a push where `malloc` and `free`
/// cost ~150 instructions a call. One size for the common few dimensions, a constant at the
/// call (a size class reckoned on every call costs `lib.add` ~40 instructions).
#[inline(always)]
fn alloc_block(ndim: usize) -> Option<NonNull<u8>> {
    match ndim <= SMALL_NDIM {
        true => cpu::alloc(SMALL_BLOCK),
        false => cpu::alloc(large_block(ndim)),
    }
}

/// Frees a block [`alloc_block`] gave for `ndim` dimensions.
///
/// # Safety
/// As for `cpu::free`.
#[inline(always)]
unsafe fn free_block(block: NonNull<u8>, ndim: usize) {
    // SAFETY: the caller's contract, with the capacity it was allocated with.
    unsafe {
        match ndim <= SMALL_NDIM {
            true => cpu::free(block, SMALL_BLOCK),
            false => cpu::free(block, large_block(ndim)),
        }
    }
}

/// The block of an output of one dimension, and the dimensions its size class holds (6).
const SMALL_BLOCK: Capacity = match cpu::capacity_for(size_of::<Output>() + 2 * size_of::<i64>()) {
    Some(capacity) => capacity,
    None => panic!("an Output fits a size class"),
};
const SMALL_NDIM: usize = (SMALL_BLOCK.bytes() - size_of::<Output>()) / (2 * size_of::<i64>());

#[cold]
fn large_block(ndim: usize) -> Capacity {
    cpu::capacity_for(size_of::<Output>() + 2 * ndim * size_of::<i64>()).expect("MAX_NDIM dimensions fit a size class")
}

/// An output's deleter: the `at::Tensor` released (its memory, where nothing else holds it),
/// the block freed. Any thread, with or without the GIL: the tensor has no Python object of its
/// own until [`to_py`], which deletes this first.
unsafe extern "C" fn delete_output(managed: *mut DLManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    // SAFETY: one of ours (the deleter is only ever ours), deleted once: its tensor read out,
    // its block freed.
    let tensor = unsafe {
        let output = managed.cast::<Output>();
        // Its own `ndim` (the header's is the caller's to change).
        let (tensor, ndim) = ((*output).tensor, (*output).made.ndim as usize);
        free_block(NonNull::new_unchecked(managed.cast()), ndim);
        tensor
    };
    if let Some(outputs) = OUTPUTS.get() {
        // SAFETY: the tensor this output made, released once.
        unsafe { (outputs.delete)(tensor) };
    }
}
