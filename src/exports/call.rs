//! The kernel's side of a call (`<dlpx/kernel.h>`): a kernel is `int fn(DlpxCall *call)`, and
//! these functions are what it needs besides its arguments, which it reads in place
//! (`call->arguments`, ABI 2): outputs from the caller's framework, the caller's stream, its
//! results, its error; and its arguments by index, for a caller without kernel.h (ABI 1
//! libraries, other languages) and for kernel.h's readers when a read fails. Each is a shell
//! over one method of `kernels::Call`. They need no GIL and touch no Python; call them from the
//! thread that runs the kernel (the call is not shared between threads).
//!
//! Every function that fails returns -1 (or says so in its result) and records the error in the
//! call: the kernel then returns -1, and the caller raises it, named after the kernel
//! (`dlpx: add: argument 9 asked for; the call has 3 (0 to 2)`).

use std::ffi::{c_char, c_int, c_void};

use crate::abi::*;
use crate::error::{c_text, set_last_error, Channel, Error, FailureValue, Result};
use crate::kernels::call::for_the_call;
use crate::kernels::value::{DlpxValueKind, Returned, Value};
use crate::kernels::Call;
use crate::shell::entry::c_entry;

/// One call of a kernel, valid until the kernel returns. Opaque.
pub struct DlpxCall {
    _opaque: [u8; 0],
}

/// A failure inside a call function goes into the call (its first error) and to
/// `dlpx_last_error()`.
#[derive(Clone, Copy)]
struct IntoCall(*mut DlpxCall);

impl Channel for IntoCall {
    fn deliver(self, err: &Error) {
        set_last_error(err);
        // SAFETY: a call the kernel was handed (live while it runs), or NULL.
        if let Some(call) = unsafe { self.0.cast::<Call<'static>>().as_mut() } {
            call.record(err.clone());
        }
    }
}

/// The shell: the boundary, the call, errors named after the kernel.
fn on_call<T: FailureValue>(
    call: *mut DlpxCall,
    context: &'static str,
    body: impl FnOnce(&mut Call) -> Result<T>,
) -> T {
    c_entry!(IntoCall(call), context, out(), given(call), || {
        // SAFETY: the pointer the kernel was handed, valid while it runs.
        let call = unsafe { call.cast::<Call<'static>>().as_mut() };
        body(&mut *call).map_err(|err| err.at(call.kernel.name))
    })
}

/// The argument at `index`, as `kind` (`"a tensor"`) through `read`.
fn read_argument<T>(call: &Call, index: i32, kind: &'static str, read: impl FnOnce(&Value) -> Option<T>) -> Result<T> {
    let value = call.argument(index as i64)?;
    read(value).ok_or_else(|| call.wrong_kind(index as i64, value, kind))
}

/// Writes `value` through `out`, a caller's pointer that must not be NULL.
fn write<T>(out: *mut T, what: &'static str, value: T) -> Result<c_int> {
    crate::error::out(out, what)?.put(value);
    Ok(0)
}

/// How many arguments the call has: the parameters, with `*name`'s values where it stands.
/// -1 for a NULL call.
///
/// # Safety
/// `call` is the call the kernel was handed, or NULL.
#[no_mangle]
pub unsafe extern "C" fn dlpx_call_argument_count(call: *const DlpxCall) -> i32 {
    on_call(call.cast_mut(), "call_argument_count", |call| Ok(call.argument_count() as i32))
}

/// The kind (`DLPX_VALUE_*`) of argument `index`: a tensor, an int, a float, a bool, a str, or
/// None (an optional parameter left at None). -1, and the call's error, for an index out of
/// range.
///
/// # Safety
/// `call` is the call the kernel was handed, or NULL.
#[no_mangle]
pub unsafe extern "C" fn dlpx_call_argument_kind(call: *mut DlpxCall, index: i32) -> DlpxValueKind {
    on_call(call, "call_argument_kind", |call| Ok(call.argument(index as i64)?.kind()))
}

/// Argument `index` as a tensor: `*out_tensor` the `DLTensor` (valid until the kernel returns),
/// `*out_flags` its DLPack flags. `DLPACK_FLAG_BITMASK_READ_ONLY` there means the kernel must not
/// write through `data` (`bytes`, a read-only numpy array, a jax array), whichever way dlpx read
/// it (`DlpxTensorView.flags`' rule). `out_flags` may be NULL. Returns 0, or -1 (another kind, an
/// index out of range).
///
/// # Safety
/// `call` is the call the kernel was handed, or NULL; `out_tensor` is writable; `out_flags` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dlpx_call_tensor(
    call: *mut DlpxCall,
    index: i32,
    out_tensor: *mut *const DLTensor,
    out_flags: *mut u64,
) -> c_int {
    // The fast way is kernel.h's: `dlpx_argument_tensor` reads in place and comes here only to
    // report what fails.
    on_call(call, "call_tensor", |call| {
        let (tensor, flags) = read_argument(call, index, "a tensor", |value| match value {
            Value::Tensor(tensor, flags) => Some((tensor as *const DLTensor, *flags)),
            _ => None,
        })?;
        write(out_tensor, "out_tensor", tensor)?;
        if !out_flags.is_null() {
            write(out_flags, "out_flags", flags)?;
        }
        Ok(0)
    })
}

/// Argument `index` as an `int64_t`. Returns 0, or -1.
///
/// # Safety
/// `call` is the call the kernel was handed, or NULL; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dlpx_call_int(call: *mut DlpxCall, index: i32, out: *mut i64) -> c_int {
    on_call(call, "call_int", |call| {
        let value = read_argument(call, index, "an int", |v| if let Value::Int(i) = v { Some(*i) } else { None })?;
        write(out, "out", value)
    })
}

/// Argument `index` as a `double` (a float parameter: Python ints arrive converted). Returns 0, or -1.
///
/// # Safety
/// `call` is the call the kernel was handed, or NULL; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dlpx_call_float(call: *mut DlpxCall, index: i32, out: *mut f64) -> c_int {
    on_call(call, "call_float", |call| {
        let value = read_argument(call, index, "a float", |v| if let Value::Float(f) = v { Some(*f) } else { None })?;
        write(out, "out", value)
    })
}

/// Argument `index` as a `bool`. Returns 0, or -1.
///
/// # Safety
/// `call` is the call the kernel was handed, or NULL; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dlpx_call_bool(call: *mut DlpxCall, index: i32, out: *mut bool) -> c_int {
    on_call(call, "call_bool", |call| {
        let value = read_argument(call, index, "a bool", |v| if let Value::Bool(b) = v { Some(*b) } else { None })?;
        write(out, "out", value)
    })
}

/// Argument `index` as a string: `*out_data` its UTF-8 bytes (valid until the kernel returns;
/// not NUL-terminated), `*out_size` their number. Returns 0, or -1.
///
/// # Safety
/// `call` is the call the kernel was handed, or NULL; both outs are writable.
#[no_mangle]
pub unsafe extern "C" fn dlpx_call_str(
    call: *mut DlpxCall,
    index: i32,
    out_data: *mut *const c_char,
    out_size: *mut usize,
) -> c_int {
    on_call(call, "call_str", |call| {
        let (data, size) =
            read_argument(call, index, "a str", |v| if let Value::Str(p, n) = v { Some((*p, *n)) } else { None })?;
        write(out_data, "out_data", data.cast())?;
        write(out_size, "out_size", size)
    })
}

/// Allocates an output in the caller's framework: with the allocator of the first tensor
/// argument's framework (a torch tensor in → torch's allocator; dlpx's for everything else, and
/// for a C caller), compact row-major, `ndim` dimensions of `shape` (copied), on `device`.
/// `*out` is the new tensor, whose data the kernel writes from `data` (its `byte_offset` is 0:
/// an allocator's answer that is not so, or not the tensor asked for, is refused). Its header (`ndim` to `byte_offset`,
/// and the shape and strides it points to) is the framework's: a kernel that changes it fails
/// the call with a RuntimeError when it returns, and the framework gets its header back. The
/// call owns the tensor until `dlpx_call_return_tensor(call, *out)`, and deletes it if the
/// kernel never returns it.
/// Returns 0, or -1 (MemoryError when the allocator is out of memory).
///
/// # Safety
/// `call` is the call the kernel was handed, or NULL; `shape` holds `ndim` values (NULL when 0); `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dlpx_call_allocate(
    call: *mut DlpxCall,
    device: DLDevice,
    dtype: DLDataType,
    ndim: i32,
    shape: *const i64,
    out: *mut *mut DLTensor,
) -> c_int {
    on_call(call, "call_allocate", |call| {
        let out = crate::error::out(out, "out")?;
        // What the request itself gets wrong is the output's error, as what `allocate` refuses.
        // SAFETY: `ndim` values where not NULL, by the function's contract.
        let shape = unsafe { crate::layout::dims(ndim, shape, "shape") }.map_err(|err| for_the_call("output", err))?;
        out.put(call.allocate(device, dtype, shape)?);
        Ok(0)
    })
}

/// The caller's current stream on `device`: its framework's (`torch.cuda.current_stream()` for
/// a torch tensor in), dlpx's per-thread stream otherwise; NULL for the CPU. Launch there.
/// Returns 0, or -1 (a ValueError for a device type DLPack does not name).
///
/// # Safety
/// `call` is the call the kernel was handed, or NULL; `out_stream` is writable.
#[no_mangle]
pub unsafe extern "C" fn dlpx_call_stream(
    call: *mut DlpxCall,
    device: DLDevice,
    out_stream: *mut *mut c_void,
) -> c_int {
    on_call(call, "call_stream", |call| write(out_stream, "out_stream", call.stream(device)?))
}

/// Returns `output` (a tensor `dlpx_call_allocate` gave this call) as the kernel's next result.
/// One result comes back as itself, several as a tuple, none as None. Returns 0, or -1 (a tensor
/// the call did not allocate, or one returned already).
///
/// # Safety
/// `call` is the call the kernel was handed, or NULL.
#[no_mangle]
pub unsafe extern "C" fn dlpx_call_return_tensor(call: *mut DlpxCall, output: *const DLTensor) -> c_int {
    on_call(call, "call_return_tensor", |call| call.return_tensor(output).map(|()| 0))
}

/// Returns an `int64_t` as the kernel's next result. Returns 0, or -1 for a NULL call.
///
/// # Safety
/// `call` is the call the kernel was handed, or NULL.
#[no_mangle]
pub unsafe extern "C" fn dlpx_call_return_int(call: *mut DlpxCall, value: i64) -> c_int {
    on_call(call, "call_return_int", |call| {
        call.return_scalar(Returned::Int(value));
        Ok(0)
    })
}

/// Returns a `double` as the kernel's next result. Returns 0, or -1 for a NULL call.
///
/// # Safety
/// `call` is the call the kernel was handed, or NULL.
#[no_mangle]
pub unsafe extern "C" fn dlpx_call_return_float(call: *mut DlpxCall, value: f64) -> c_int {
    on_call(call, "call_return_float", |call| {
        call.return_scalar(Returned::Float(value));
        Ok(0)
    })
}

/// Returns a `bool` as the kernel's next result. Returns 0, or -1 for a NULL call.
///
/// # Safety
/// `call` is the call the kernel was handed, or NULL.
#[no_mangle]
pub unsafe extern "C" fn dlpx_call_return_bool(call: *mut DlpxCall, value: bool) -> c_int {
    on_call(call, "call_return_bool", |call| {
        call.return_scalar(Returned::Bool(value));
        Ok(0)
    })
}

/// Reports the kernel's error: `kind` names the Python exception the caller gets
/// ("ValueError", "TypeError", "IndexError", "MemoryError", …; a name dlpx does not map is a
/// RuntimeError that keeps it), `message` says what went wrong; the caller's message is
/// `dlpx: <kernel>: <message>`. The first error of a call is the one reported. Always returns
/// -1, so that a kernel can `return dlpx_call_error(call, "ValueError", "shapes differ");`.
///
/// # Safety
/// `call` is the call the kernel was handed, or NULL; `kind` and `message` are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn dlpx_call_error(call: *mut DlpxCall, kind: *const c_char, message: *const c_char) -> c_int {
    on_call(call, "call_error", |call| {
        // SAFETY: NULL or NUL-terminated, by the function's contract.
        call.report(unsafe { &c_text(kind) }, unsafe { &c_text(message) });
        Ok(())
    });
    -1
}
