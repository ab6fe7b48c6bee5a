//! A kernel library's kernels called from C, without Python: found by name in a library opened
//! once for the process (the same registry `dlpx.load_library` uses), called with `DLTensor`s
//! and scalars in, managed tensors and scalars out. Outputs come from dlpx's allocator; the
//! stream a kernel asks for is dlpx's current stream of the calling thread.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::{self, NonNull};

use crate::abi::*;
use crate::error::{Error, LastError};
use crate::kernels::bind::{bind, Source};
use crate::kernels::signature::Type;
use crate::kernels::value::*;
use crate::kernels::{library, Call, Environment, Kernel, Returned, Value};
use crate::shell::entry::c_entry;

/// A kernel of a loaded kernel library; lives for the process. Opaque.
pub struct DlpxKernel {
    _opaque: [u8; 0],
}

/// A kernel's argument or result, for a C caller (`dlpx_kernel_call`). `kind` says which field
/// holds it; the others are ignored.
#[repr(C)]
pub struct DlpxValue {
    /// `DLPX_VALUE_*`.
    pub kind: DlpxValueKind,
    /// A tensor argument's DLPack flags (`DLPACK_FLAG_BITMASK_READ_ONLY`: the kernel must not
    /// write it); a tensor result's are its managed tensor's.
    pub flags: u64,
    /// A tensor argument: borrowed for the call. Its strides must not be NULL.
    pub tensor: *const DLTensor,
    /// A tensor result: the caller owns it and calls `managed->deleter(managed)`.
    pub managed: *mut DLManagedTensorVersioned,
    /// `DLPX_VALUE_INT`.
    pub int64: i64,
    /// `DLPX_VALUE_FLOAT` (an int argument is taken for a float parameter too).
    pub float64: f64,
    /// `DLPX_VALUE_BOOL`.
    pub boolean: bool,
    /// `DLPX_VALUE_STR`: UTF-8 bytes, `str_size` of them (no NUL needed).
    pub str_data: *const c_char,
    pub str_size: usize,
}

/// Finds the kernel `name` in the kernel library at `path`, opening it if this process has not
/// (with `dlopen`; it stays loaded, as `dlpx.load_library` keeps it: the same library by any
/// path is opened once). `*out` lives for the process. Called from a library constructor (while
/// `dlopen` runs them), it sees the kernels linked so far, and the library is read again, whole,
/// by the next find after the `dlopen`. Returns 0, or -1 with the message in
/// `dlpx_last_error()` and its kind in `dlpx_last_error_kind()` (OSError: not a library;
/// ImportError: no dlpx kernels, a newer kernel ABI, no kernel of that name).
///
/// # Safety
/// `path` and `name` are NUL-terminated; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dlpx_kernel_find(
    path: *const c_char,
    name: *const c_char,
    out: *mut *const DlpxKernel,
) -> c_int {
    c_entry!(LastError, "kernel_find", out(out), given(path, name), || {
        // SAFETY: NUL-terminated, by the function's contract.
        let (path, name) = unsafe { (CStr::from_ptr(path.as_ptr()), CStr::from_ptr(name.as_ptr())) };
        // Read lossily it would name another file: U+FFFD for each bad byte.
        let path = path.to_str().map_err(|_| {
            let fact = format!("the path {path:?} is not UTF-8: dlpx opens libraries by UTF-8 names");
            Error::new(crate::ErrorKind::OSError, fact)
        })?;
        let library = library::open(path)?;
        // A name that is not UTF-8 is no kernel's: kernel names are (checked at load).
        let kernel = name.to_str().ok().and_then(|name| library.kernel(name)).ok_or_else(|| {
            let names: Vec<&str> = library.kernels.iter().map(|k| k.name).collect();
            let name = match name.to_str() {
                Ok(name) => format!("'{name}'"),
                Err(_) => format!("{name:?} (not UTF-8)"),
            };
            Error::new(
                crate::ErrorKind::ImportError,
                format!("{path} has no kernel {name} (it has {})", names.join(", ")),
            )
        })?;
        out.put((kernel as *const Kernel).cast());
        Ok(0)
    })
}

/// The kernel's signature with its types, e.g. `add(a: tensor, b: tensor) -> tensor`, and its
/// doc after a blank line. Static storage; NULL for a NULL kernel.
///
/// # Safety
/// `kernel` is NULL or from `dlpx_kernel_find`.
#[no_mangle]
pub unsafe extern "C" fn dlpx_kernel_signature(kernel: *const DlpxKernel) -> *const c_char {
    c_entry!(LastError, "kernel_signature", out(), given(kernel), || {
        // SAFETY: a kernel from dlpx_kernel_find (process lifetime).
        let kernel = unsafe { kernel.cast::<Kernel>().as_ref() };
        Ok(kernel.described.as_ptr())
    })
}

/// Calls `kernel` with `nargs` positional arguments (defaults fill the parameters left out;
/// a `*name` parameter takes what is left over). Its results are written to `results` (room for
/// `capacity`), their number to `*nresults`; tensor results are the caller's to delete. Outputs
/// come from dlpx's allocator; a kernel asking for a stream gets dlpx's current stream of this
/// thread. Returns 0, or -1 with the message in `dlpx_last_error()` (`dlpx: add: …`, the
/// kernel's own error or a TypeError naming the parameter), `*nresults` 0 (when `nresults` is
/// not NULL) and nothing to delete.
/// `dlpx_kernel_call_named` passes keyword arguments too.
///
/// # Safety
/// `kernel` is from `dlpx_kernel_find`; `args` holds `nargs` values (NULL when 0) whose tensors
/// and strings are valid for the call; `results` has room for `capacity` values; `nresults` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn dlpx_kernel_call(
    kernel: *const DlpxKernel,
    args: *const DlpxValue,
    nargs: usize,
    results: *mut DlpxValue,
    capacity: usize,
    nresults: *mut usize,
) -> c_int {
    c_entry!(LastError, "kernel_call", out(), given(kernel), || {
        // SAFETY: the function's contract, with no keywords.
        unsafe { call(kernel, args, nargs, &Keywords::NONE, results, capacity, nresults) }
    })
}

/// `dlpx_kernel_call` with keyword arguments, as CPython's vectorcall passes them: `args` holds
/// the `nargs` positional values, then one value for each of the `nnames` names, in order
/// (`names[i]` names `args[nargs + i]`, a parameter's name, NUL-terminated UTF-8). A keyword-only
/// parameter (after `*` or `*name` in the signature) is set this way only. A name the kernel has
/// not, a name given twice or one that a positional argument already fills, and the `*name`
/// parameter's own name are TypeErrors, as Python's.
///
/// # Safety
/// `dlpx_kernel_call`'s, and: `args` holds `nargs + nnames` values (NULL when none); `names`
/// holds `nnames` pointers (NULL when 0), each to a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dlpx_kernel_call_named(
    kernel: *const DlpxKernel,
    args: *const DlpxValue,
    nargs: usize,
    names: *const *const c_char,
    nnames: usize,
    results: *mut DlpxValue,
    capacity: usize,
    nresults: *mut usize,
) -> c_int {
    c_entry!(LastError, "kernel_call_named", out(), given(kernel), || {
        if nnames > 0 && names.is_null() {
            return Err(Error::null("names (with nnames > 0)"));
        }
        let keywords = Keywords { names, count: nnames };
        // SAFETY: the function's contract.
        unsafe { call(kernel, args, nargs, &keywords, results, capacity, nresults) }
    })
}

/// A C call's keyword names: `count` pointers at `names`.
struct Keywords {
    names: *const *const c_char,
    count: usize,
}

impl Keywords {
    const NONE: Keywords = Keywords { names: ptr::null(), count: 0 };

    /// The parameter each name is, in order, read one by one: at most one past the kernel's
    /// parameters is read (by then a name is unknown or repeated), whatever `count` says.
    ///
    /// # Safety
    /// `names` holds `count` pointers, each NULL or to a NUL-terminated string.
    unsafe fn parameters(&self, kernel: &Kernel) -> Result<Vec<usize>, Error> {
        let params = &kernel.signature.params;
        let mut matched: Vec<usize> = Vec::with_capacity(self.count.min(params.len() + 1));
        for i in 0..self.count {
            // SAFETY: i < count, by the caller's contract.
            let name = unsafe { *self.names.add(i) };
            if name.is_null() {
                return Err(Error::value(format!("names[{i}] is NULL")));
            }
            // SAFETY: NUL-terminated, by the caller's contract.
            let name = unsafe { CStr::from_ptr(name) };
            let Ok(text) = name.to_str() else {
                // No parameter's: their names are UTF-8 (checked at load).
                return Err(Error::type_error(format!("got an unexpected keyword argument {name:?} (not UTF-8)")));
            };
            let Some(p) = params.iter().position(|param| param.name == text) else {
                return Err(Error::type_error(format!("got an unexpected keyword argument '{text}'")));
            };
            if matched.contains(&p) {
                return Err(Error::type_error(format!("got multiple values for argument '{}'", params[p].name)));
            }
            matched.push(p);
        }
        Ok(matched)
    }
}

/// One C call of `kernel`: `args` (positional, then one for each keyword), bound, converted,
/// run; its results written out.
///
/// # Safety
/// `dlpx_kernel_call_named`'s contract.
unsafe fn call(
    kernel: NonNull<DlpxKernel>,
    args: *const DlpxValue,
    nargs: usize,
    keywords: &Keywords,
    results: *mut DlpxValue,
    capacity: usize,
    nresults: *mut usize,
) -> Result<c_int, Error> {
    // SAFETY: a kernel from dlpx_kernel_find (process lifetime).
    let kernel: &'static Kernel = unsafe { kernel.cast::<Kernel>().as_ref() };
    if nresults.is_null() {
        return Err(Error::null("nresults"));
    }
    // Written first: a failure leaves no count of results that are not there.
    // SAFETY: non-NULL; writable, by the contract.
    unsafe { nresults.write(0) };
    match (capacity > 0 && results.is_null(), (nargs > 0 || keywords.count > 0) && args.is_null()) {
        (true, _) => return Err(Error::null("results (with capacity > 0)")),
        (_, true) if nargs > 0 => return Err(Error::null("args (with nargs > 0)")),
        (_, true) => return Err(Error::null("args (with nnames > 0)")),
        _ => {}
    }
    // SAFETY: the caller's contract.
    let named = unsafe { keywords.parameters(kernel) }.map_err(|err| err.at(kernel.name))?;
    // Room for the usual call; more grows as `bind` takes them. A hostile count is refused by
    // `bind` (naming it) before anything is read or allocated for it: values are read one by
    // one, by index, never as one slice of `nargs` (its length could pass `isize::MAX`).
    let mut values = Vec::with_capacity(nargs.min(1024).max(kernel.signature.params.len()));
    bind(&kernel.signature, nargs, &named, |p, source| {
        let param = &kernel.signature.params[p];
        let at = match source {
            Source::Default(default) => {
                values.push(Value::of_default(default));
                return Ok(());
            }
            Source::Positional(i) => i,
            // `bind` took nargs (below i32::MAX) and `named` holds at most one per parameter.
            Source::Keyword(k) => nargs + k,
        };
        // SAFETY: `bind` gives a positional index below `nargs`, a count it accepted, and a
        // keyword index below `nnames`; `args` holds `nargs + nnames` values, by the contract.
        let value = argument(unsafe { &*args.add(at) }, param.ty, param.optional)
            .map_err(|fact| Error::type_error(format!("parameter '{}': {fact}", param.name)))?;
        values.push(value);
        Ok(())
    })
    .map_err(|err| err.at(kernel.name))?;
    let returned = Call::new(kernel, &values, &Dlpx).run(|kernel| kernel())?;
    if returned.len() > capacity {
        let n = returned.len();
        returned.as_slice().iter().copied().for_each(Returned::discard);
        return Err(
            Error::value(format!("the kernel returned {n} results; results has room for {capacity}")).at(kernel.name)
        );
    }
    let n = returned.len();
    for (i, &result) in returned.as_slice().iter().enumerate() {
        // SAFETY: i < capacity, by the check above.
        unsafe { results.add(i).write(result_value(result)) };
    }
    // SAFETY: non-NULL, checked above.
    unsafe { nresults.write(n) };
    Ok(0)
}

/// A C caller's argument for a parameter of type `ty`; why not, otherwise.
fn argument(value: &DlpxValue, ty: Type, optional: bool) -> std::result::Result<Value, String> {
    Ok(match (value.kind, ty) {
        (DLPX_VALUE_NONE, _) if optional => Value::None,
        (DLPX_VALUE_TENSOR, Type::Tensor) => {
            // SAFETY: the caller's tensor, valid for the call, or NULL (refused).
            let tensor = unsafe { value.tensor.as_ref() }.ok_or("its tensor is NULL")?;
            // No device has a negative index (a kernel would allocate "like" it, or ask its stream).
            if tensor.device.device_id < 0 {
                return Err(format!("its device_id is {} (negative)", tensor.device.device_id));
            }
            // The flags a kernel reads (kernel.h: the other bits are 0); the sizes are checked
            // as they say (padded or packed).
            let flags = crate::layout::carried_flags(value.flags, tensor.dtype);
            // SAFETY: a caller's DLTensor whose shape and strides are `ndim` long.
            if !unsafe { crate::validate::check_view(tensor, flags) }.map_err(|err| err.fact().to_string())? {
                return Err("its strides are NULL (pass them: DLPack 1.2 and later)".into());
            }
            let mut tensor = *tensor;
            crate::kernels::with_dims(&mut tensor);
            Value::Tensor(tensor, flags)
        }
        (DLPX_VALUE_INT, Type::Int) => Value::Int(value.int64),
        (DLPX_VALUE_INT, Type::Float) => Value::Float(value.int64 as f64),
        (DLPX_VALUE_FLOAT, Type::Float) => Value::Float(value.float64),
        (DLPX_VALUE_BOOL, Type::Bool) => Value::Bool(value.boolean),
        (DLPX_VALUE_STR, Type::Str) => {
            if value.str_data.is_null() && value.str_size > 0 {
                return Err("its str_data is NULL".into());
            }
            let bytes = match value.str_size {
                // An empty string may have a NULL pointer, which no slice may.
                0 => &[][..],
                // SAFETY: `str_size` bytes at `str_data` (not NULL), valid for the call.
                size => unsafe { std::slice::from_raw_parts(value.str_data.cast::<u8>(), size) },
            };
            std::str::from_utf8(bytes).map_err(|_| "its string is not UTF-8".to_string())?;
            // A kernel never sees a NULL string (its memcpy of 0 bytes from it would be UB in C).
            Value::Str(if bytes.is_empty() { c"".as_ptr().cast() } else { value.str_data.cast() }, value.str_size)
        }
        (kind, ty) => return Err(format!("takes {}, got {}", ty.name(), kind_name(kind))),
    })
}

/// A `DLPX_VALUE_*` kind as a caller's error names it.
fn kind_name(kind: i32) -> String {
    match crate::kernels::value::kind_names(kind) {
        Some((name, constant)) => format!("{name} ({constant})"),
        None => format!("value kind {kind}, which is none of DLPX_VALUE_*"),
    }
}

fn result_value(result: Returned) -> DlpxValue {
    let mut value = DlpxValue {
        kind: DLPX_VALUE_NONE,
        flags: 0,
        tensor: ptr::null(),
        managed: ptr::null_mut(),
        int64: 0,
        float64: 0.0,
        boolean: false,
        str_data: ptr::null(),
        str_size: 0,
    };
    match result {
        Returned::Tensor(managed) => {
            value.kind = DLPX_VALUE_TENSOR;
            // SAFETY: a live managed tensor, now the caller's.
            value.flags = unsafe { managed.as_ref() }.flags;
            value.managed = managed.as_ptr();
        }
        Returned::Int(i) => (value.kind, value.int64) = (DLPX_VALUE_INT, i),
        Returned::Float(f) => (value.kind, value.float64) = (DLPX_VALUE_FLOAT, f),
        Returned::Bool(b) => (value.kind, value.boolean) = (DLPX_VALUE_BOOL, b),
    }
    value
}

/// A call from C: outputs from dlpx's allocator, dlpx's current stream.
struct Dlpx;

impl Environment for Dlpx {
    fn allocator(&self) -> DLPackManagedTensorAllocator {
        Some(crate::allocation::allocator_entry as _)
    }

    fn stream(&self, device: DLDevice) -> crate::error::Result<*mut c_void> {
        Ok(crate::stream::current(device))
    }
}
