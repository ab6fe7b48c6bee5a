//! The `torch` row: torch's own table, with the checks torch's `__dlpack__` makes and its table
//! skips (docs/design.md, "Faithful import"); a writable view or an owning import of a
//! `torch.Tensor` read through torch's C shim instead (`torch_shim`; docs/design.md, "torch's
//! view through its C shim").

use std::ffi::c_void;
use std::ptr::{self, NonNull};

use pyo3_ffi::{PyObject, PyTypeObject};

use super::table;
use super::torch_outputs;
use super::torch_shim;
use super::torch_types::{is_rocm, parameter_type, true_cdata};
use crate::abi::*;
use crate::cpython::{imported_module, type_of, vectorcall_method, GilVar, Interned, Owned, Python};
use crate::error::{Error, Result};
use crate::producers::discovered::Discovered;
use crate::producers::served::Served;
use crate::producers::{Answer, Ask, Entry, Handover, Producer, Row, Suspect, Suspicion};

pub static ROW: Row =
    Row { name: "torch", synthetic: None, guard: None, suspect: Some(&Torch), home: None, producer: &Torch };
struct Torch;

/// The table `torch.Tensor` publishes, once a type publishing one was seen with torch imported.
static TORCH_TABLE: Discovered<&'static DLPackExchangeAPI> = Discovered::new(c"torch", &[]);

impl Producer for Torch {
    fn claims(&self, py: Python<'_>, _ty: *mut PyTypeObject, published: Option<&'static DLPackExchangeAPI>) -> bool {
        published.zip(torch_table(py)).is_some_and(|(published, torch)| std::ptr::eq(published, torch))
    }

    /// torch's table, as the `table` row reads it. Where it fails — it refuses sparse, meta,
    /// quantized and nested tensors with C++ errors where its `__dlpack__` refuses them with
    /// BufferError — the producer's own refusal is the answer; a view it cannot give, the owning
    /// read asks it for.
    ///
    /// A read-only ask (a kernel that only reads) goes through torch's const table where torch
    /// has one: the same tensor, flagged read-only, its copy-on-write storage left shared.
    fn answer<'py>(&self, py: Python<'py>, object: *mut PyObject, entry: Entry, ask: Ask<'_>) -> Answer<'py> {
        let table = match ask.read_only {
            true => torch_const_table(py).unwrap_or(entry.table),
            false => entry.table,
        };
        // A writable view or owning read: torch's C shim reads what the table would (a read-only
        // one needs the const table's `const_data_ptr()`, which the shim has no function for).
        if !ask.read_only {
            let view_entry = entry.table.dltensor_from_py_object_no_sync;
            // SAFETY: `object` is live; the shim reads only torch.Tensor and nn.Parameter objects,
            // whose own at::Tensor `at_tensor` gives once the layout checked out (the shim is on
            // only then).
            let read = unsafe {
                match ask.view {
                    Some(out) => {
                        torch_shim::view(py, object, at_tensor(object), view_entry, out)?.then_some(Handover::View)
                    }
                    // SAFETY: the shim's managed tensor is checked sound and holds the object.
                    None => torch_shim::held(py, object, at_tensor(object), view_entry)?.map(|m| Handover::made(m)),
                }
            };
            if let Some(handover) = read {
                if let (true, Some(dl)) = (ask.on_dlpx_stream, handover.dl_tensor(ask)) {
                    table::order_after_producer(py, entry.table, dl.device)?;
                }
                return Ok(handover);
            }
        }
        match table::read_through(py, object, table, ask) {
            Ok(handover) => Ok(handover),
            Err(err) if err.is_python_pending() => Ok(Handover::Refused),
            Err(err) => Err(err),
        }
    }

    /// A torch tensor decides whether torch's functions, its C shim's among them, are used (as
    /// the first tensor read does); a type leaves it to the next tensor.
    fn ready_outputs(&self, py: Python<'_>, like: *mut PyObject) {
        if !crate::cpython::is_type(py, like) {
            native(py, like, at_tensor(like));
        }
    }

    /// torch's C shim's allocator where it was found (`torch_outputs`), else the table's.
    fn output_allocator(&self, entry: Entry) -> DLPackManagedTensorAllocator {
        torch_outputs::allocator(entry.table)
    }

    fn own_output_to_py(
        &self,
        py: Python<'_>,
        managed: NonNull<DLManagedTensorVersioned>,
    ) -> Option<Result<*mut PyObject>> {
        torch_outputs::to_py(py, managed)
    }
}

/// The checks torch's `__dlpack__` makes and its table skips.
impl Suspect for Torch {
    /// `requires_grad` (floating and complex dtypes only), the conjugate bit (complex only),
    /// the negative bit (any dtype: `_neg_view`, the imaginary part of a conjugate). Asked of
    /// torch's own C++ functions where they are found and checked (`native`), else of its Python
    /// methods (`is_neg()` alone costs ~700 instructions: it releases the GIL).
    #[inline]
    fn suspicion(&self, py: Python<'_>, object: *mut PyObject, dl: &DLTensor) -> Result<Option<Suspicion>> {
        let tensor = at_tensor(object);
        // The common case, answered by torch's functions alone: a real dtype, no autograd
        // metadata, no negative bit.
        if let NativeState::Checked(native) = NATIVE.get(py) {
            // SAFETY: as in `suspicion_in_full`.
            let plain = unsafe { (native.autograd_meta)(tensor).is_null() && !(native.is_neg)(tensor) };
            if plain && DataTypeCode(dl.dtype.code) != DataTypeCode::COMPLEX {
                SERVED.count(py);
                return Ok(None);
            }
        }
        suspicion_in_full(py, object, tensor, dl)
    }

    fn resolved(&self, py: Python<'_>, object: *mut PyObject) -> Result<Option<NonNull<PyObject>>> {
        let resolved = call_method(py, object, &RESOLVE_NEG)?;
        Ok(NonNull::new(resolved.into_ptr()))
    }
}

/// [`Torch::suspicion`] in full: whichever of torch's functions or Python methods are at hand
/// (`tensor`: the object's own `at::Tensor`).
#[cold]
fn suspicion_in_full(
    py: Python<'_>,
    object: *mut PyObject,
    tensor: *const c_void,
    dl: &DLTensor,
) -> Result<Option<Suspicion>> {
    let complex = DataTypeCode(dl.dtype.code) == DataTypeCode::COMPLEX;
    let floating = || complex || crate::dtype::is_floating(dl.dtype);
    let (requires_grad, conj, negated) = match native(py, object, tensor) {
        Some(native) => {
            SERVED.count(py);
            (
                // No autograd metadata (the common case), no gradient; with some, Python's answer.
                // SAFETY: `tensor` is the live object's own at::Tensor (checked layout); the
                // functions are torch's, with their C++ signatures (a reference is a pointer).
                !unsafe { (native.autograd_meta)(tensor) }.is_null() && floating() && flag(py, object, &REQUIRES_GRAD)?,
                // SAFETY: as above.
                complex && unsafe { (native.is_conj)(tensor) },
                // SAFETY: as above.
                unsafe { (native.is_neg)(tensor) },
            )
        }
        None => (
            floating() && flag(py, object, &REQUIRES_GRAD)?,
            complex && flag(py, object, &IS_CONJ)?,
            flag(py, object, &IS_NEG)?,
        ),
    };
    let ask_producer = requires_grad || conj;
    Ok((ask_producer || negated).then_some(Suspicion { ask_producer, negated }))
}

/// torch's const table (`torch._C._const_dlpack_exchange_api()`, torch 2.15 and later): its
/// exports are read-only and go through `const_data_ptr()`, so a copy-on-write tensor
/// (`torch._lazy_clone`) is not materialised. A kernel's read view asks it (`Ask::read_only`).
static TORCH_CONST_TABLE: Discovered<&'static DLPackExchangeAPI> = Discovered::new(c"torch._C", &[]);

/// torch's const table, when torch is imported and has one.
fn torch_const_table(py: Python<'_>) -> Option<&'static DLPackExchangeAPI> {
    TORCH_CONST_TABLE.get_or_find(py, |py, torch_c| {
        let make = crate::cpython::attribute(py, torch_c.as_ptr(), c"_const_dlpack_exchange_api")?;
        // SAFETY: GIL held; a live callable; the result is a new reference (NULL on failure,
        // whose exception is cleared: an older torch's function that fails gives no table).
        let capsule = Owned::new(py, unsafe { (py.PyObject_CallObject)(make.as_ptr(), ptr::null_mut()) }).ok();
        let Some(capsule) = capsule else {
            // SAFETY: GIL held.
            unsafe { (py.PyErr_Clear)() };
            return None;
        };
        // SAFETY: GIL held; a capsule of another name gives NULL and an exception, cleared.
        let head = unsafe { (py.PyCapsule_GetPointer)(capsule.as_ptr(), c"dlpack_exchange_api".as_ptr()) };
        if head.is_null() {
            // SAFETY: GIL held.
            unsafe { (py.PyErr_Clear)() };
            return None;
        }
        // SAFETY: torch's table is static, as its published one is; its chain is readable.
        unsafe { crate::chain::select_supported(head.cast_const().cast()) }.ok()
    })
}

/// torch's table, when torch is imported.
fn torch_table(py: Python<'_>) -> Option<&'static DLPackExchangeAPI> {
    TORCH_TABLE.get_or_find(py, |py, torch| {
        let tensor = crate::cpython::attribute(py, torch.as_ptr(), c"Tensor")?;
        table::published_v1(py, tensor.as_ptr().cast())
    })
}

/// `bool at::native::is_neg(const at::Tensor&)` and `is_conj` (the kernels behind torch's
/// `is_neg()` / `is_conj()`: they read the tensor's dispatch keys, no dispatcher), and
/// `AutogradMeta* torch::autograd::impl::get_autograd_meta(const at::TensorBase&)`: a C++
/// reference is a pointer in the C calling convention.
#[derive(Clone, Copy)]
struct Native {
    is_neg: unsafe extern "C" fn(*const c_void) -> bool,
    is_conj: unsafe extern "C" fn(*const c_void) -> bool,
    autograd_meta: unsafe extern "C" fn(*const c_void) -> *const c_void,
}

/// What dlpx knows of torch's C++ functions: not looked for yet, found and checked, or off
/// (missing, a layout that did not check out, or `DLPX_DIRECT_OFF=torch`): Python's methods.
#[derive(Clone, Copy)]
enum NativeState {
    Unknown,
    Checked(Native),
    Off,
}

static NATIVE: GilVar<NativeState> = GilVar::new(NativeState::Unknown);
/// The calls torch's functions answered (`dlpx._native._served("torch")`).
static SERVED: Served = Served::of("torch");

// A `THPVariable` is `{PyObject_HEAD; at::Tensor cdata; …}` and an `at::Tensor` is one pointer,
// its `TensorImpl*`: the tensor begins where the object's own fields do (`cpython::layout`).

/// torch's functions, where the layout read checks out (`tensor`, `object`'s own `at::Tensor`
/// at [`at_tensor`]). The first object checks it: its `TensorImpl*` read after the object header
/// must be the one torch's `_cdata` reports, else the functions stay unused.
#[inline]
fn native(py: Python<'_>, object: *mut PyObject, tensor: *const c_void) -> Option<Native> {
    match NATIVE.get(py) {
        NativeState::Checked(native) => Some(native),
        NativeState::Off => None,
        NativeState::Unknown => match find_native(py, object, tensor)? {
            // Decided by this object: the functions, or Python's methods from now on.
            Some(found) => {
                NATIVE.set(py, NativeState::Checked(found));
                Some(found)
            }
            None => {
                NATIVE.set(py, NativeState::Off);
                None
            }
        },
    }
}

/// The address of `object`'s own `at::Tensor` (valid once the layout checked out).
#[inline(always)]
fn at_tensor(object: *mut PyObject) -> *const c_void {
    crate::cpython::layout::fields(object).cast::<c_void>().cast_const()
}

/// torch's functions, and with them its C shim's (`torch_shim::found`), once the layout checked
/// out: Some(None) where they are not to be used (switched off, missing, a layout that did not
/// check out), None where `object` cannot decide (not a `torch.Tensor`: the next one decides).
///
/// `torch.Tensor` is torch's own (`THPVariableClass`, the class its C++ makes tensors of), not
/// whatever `torch.Tensor` names now, and `object`'s `_cdata` is read through that class's
/// descriptor, which a subclass's attribute cannot override: code that rebinds the name or fakes
/// the attribute cannot make dlpx read another object as a tensor.
#[cold]
fn find_native(py: Python<'_>, object: *mut PyObject, tensor: *const c_void) -> Option<Option<Native>> {
    if crate::producers::guard::named(crate::producers::guard::OFF_VARIABLE, ROW.name) {
        return Some(None);
    }
    let Some(path) = imported_module(py, c"torch._C")
        .and_then(|torch_c| crate::cpython::attribute(py, torch_c.as_ptr(), c"__file__"))
        .and_then(|file| py.str_value(file.as_ptr(), "torch._C.__file__").ok())
        .and_then(|path| std::ffi::CString::new(path).ok())
    else {
        return Some(None);
    };
    // SAFETY: RTLD_NOLOAD finds the extension Python loaded (no code runs); `dlsym` on its handle
    // searches the libraries it links (libtorch_cpu); the interpreter keeps it loaded.
    unsafe {
        let library = libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        if library.is_null() {
            return Some(None);
        }
        let symbol = |name: &std::ffi::CStr| NonNull::new(libc::dlsym(library, name.as_ptr()));
        let decided = decide(py, object, tensor, &symbol);
        libc::dlclose(library);
        decided
    }
}

/// [`find_native`] with torch's symbols at hand (`symbol`).
///
/// # Safety
/// `symbol` gives torch's symbols, which live for the process.
unsafe fn decide(
    py: Python<'_>,
    object: *mut PyObject,
    tensor: *const c_void,
    symbol: &dyn Fn(&std::ffi::CStr) -> Option<NonNull<c_void>>,
) -> Option<Option<Native>> {
    // SAFETY: `THPVariableClass` is a `PyObject*` torch sets to torch.Tensor as it loads.
    let Some(tensor_type) =
        symbol(c"THPVariableClass").and_then(|at| NonNull::new(unsafe { *at.as_ptr().cast::<*mut PyObject>() }))
    else {
        return Some(None);
    };
    let tensor_type = tensor_type.as_ptr().cast::<PyTypeObject>();
    // SAFETY: GIL held; two live types.
    if unsafe { (py.PyType_IsSubtype)(type_of(py, object), tensor_type) } == 0 {
        return None;
    }
    // SAFETY: a torch tensor object is at least a PyObject and a pointer long: `tensor` is where
    // its fields begin.
    let read = unsafe { tensor.cast::<*mut c_void>().read() };
    let reported = true_cdata(py, tensor_type.cast(), object);
    if reported.is_null() || read != reported {
        return Some(None);
    }
    // SAFETY: the caller's promise.
    let shim = unsafe { torch_shim::Shim::find(symbol, is_rocm(py)) };
    if let Some(shim) = shim {
        // SAFETY: as above.
        unsafe { torch_outputs::Outputs::find(shim, symbol) };
    }
    torch_shim::found(py, shim, tensor_type, parameter_type(py, tensor_type));
    // SAFETY: each symbol is the C++ function of the type it is read as (a reference is a pointer).
    let found = unsafe {
        (|| {
            Some(Native {
                is_neg: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*const c_void) -> bool>(
                    symbol(c"_ZN2at6native6is_negERKNS_6TensorE")?.as_ptr(),
                ),
                is_conj: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*const c_void) -> bool>(
                    symbol(c"_ZN2at6native7is_conjERKNS_6TensorE")?.as_ptr(),
                ),
                autograd_meta: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*const c_void) -> *const c_void>(
                    symbol(c"_ZN5torch8autograd4impl17get_autograd_metaERKN2at10TensorBaseE")?.as_ptr(),
                ),
            })
        })()
    };
    Some(found)
}

/// A name torch's tensors answer to: an attribute, or a method taking no argument.
struct Name {
    name: Interned,
    method: bool,
}

static REQUIRES_GRAD: Name = Name { name: Interned::new(c"requires_grad"), method: false };
static IS_CONJ: Name = Name { name: Interned::new(c"is_conj"), method: true };
static IS_NEG: Name = Name { name: Interned::new(c"is_neg"), method: true };
static RESOLVE_NEG: Name = Name { name: Interned::new(c"resolve_neg"), method: true };

/// Whether `object.<name>` (or `object.<name>()`) is True.
#[inline]
fn flag(py: Python<'_>, object: *mut PyObject, name: &Name) -> Result<bool> {
    let value = call_method(py, object, name)?;
    Ok(value.as_ptr() == py.true_)
}

fn call_method<'py>(py: Python<'py>, object: *mut PyObject, name: &Name) -> Result<Owned<'py>> {
    let key = name.name.get(py)?;
    // SAFETY: the token proves the GIL is held; `object` and the interned name are live.
    let value = unsafe {
        match (name.method, vectorcall_method()) {
            (false, _) => (py.PyObject_GetAttr)(object, key),
            (true, Some(call)) => call(key, [object].as_ptr(), 1, ptr::null_mut()),
            (true, None) => match Owned::new(py, (py.PyObject_GetAttr)(object, key)) {
                Ok(method) => (py.PyObject_CallObject)(method.as_ptr(), ptr::null_mut()),
                Err(_) => ptr::null_mut(),
            },
        }
    };
    Owned::new(py, value).map_err(|_| Error::python_pending())
}
