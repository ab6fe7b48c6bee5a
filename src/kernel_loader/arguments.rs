//! A Python call's arguments as a kernel reads them: bound to the kernel's parameters
//! (`kernels::bind`), each converted with the GIL held — a tensor through the producer seam's
//! view, as `dlpx_view_of` takes it, a scalar by its parameter's type — and the views released
//! when the call is done (`Drop`), on every path.

use std::ptr::NonNull;

use pyo3_ffi::PyObject;

use crate::abi::*;
use crate::args::{self, FastArgs};
use crate::cpython::{type_name, type_of, ExceptionGuard, Python};
use crate::error::{Error, Result};
use crate::kernels::bind::{bind, Source};
use crate::kernels::inline::Inline;
use crate::kernels::signature::{Param, Type, MAX_PARAMETERS};
use crate::kernels::{Kernel, Value};
use crate::producers::{self, Entry};

/// Arguments kept on the stack (a call with more spills to the heap).
const INLINE: usize = 16;

pub struct Arguments<'py> {
    py: Python<'py>,
    values: Inline<Value, INLINE>,
    /// The managed tensors that back views (a row without a non-owning view): released in `Drop`.
    owners: Inline<NonNull<DLManagedTensorVersioned>, INLINE>,
    /// The first tensor argument's entry: its framework allocates the outputs and gets them back.
    pub like: Option<Entry>,
}

impl<'py> Arguments<'py> {
    /// No arguments yet (made where it stays: the lists are a kilobyte, and moving them would
    /// cost a nop kernel a fifth of its time).
    #[inline(always)]
    pub fn new(py: Python<'py>) -> Self {
        Arguments { py, values: Inline::new(), owners: Inline::new(), like: None }
    }

    /// The call's arguments bound to `kernel`'s parameters, whose names are `names` (interned),
    /// converted. TypeErrors name the parameter (the caller names the kernel).
    #[inline(always)]
    pub fn bind(&mut self, kernel: &'static Kernel, names: &[usize], args: FastArgs<'py>) -> Result<()> {
        let signature = &kernel.signature;
        let positional = args.positional();
        let keyword_names = args.keyword_names();
        let matched;
        let keywords: &[usize] = match keyword_names.is_null() {
            true => &[],
            false => {
                matched = keyword_parameters(self.py, kernel, names, keyword_names)?;
                &matched.0[..matched.1]
            }
        };
        let count = positional.len();
        if keywords.is_empty() && signature.takes_only_tensors() && count <= INLINE && signature.filled_by(count) {
            // A tensor kernel's common call (`add(a, b)`, `nop(*xs)`), bound as `bind`'s first
            // case binds it, in one loop: `bind`'s closure is a call per argument. At most
            // INLINE arguments (the lists' room, far below `bind`'s int32 count); the parameter
            // is looked up only to convert None or to name it in an error.
            let (fixed, variadic) = (signature.positional(), signature.variadic());
            let param = |i: usize| &signature.params[variadic.filter(|_| i >= fixed).unwrap_or(i)];
            return positional.iter().enumerate().try_for_each(|(i, &object)| match object != self.py.none {
                true => self.tensor(kernel, object, || param(i)),
                false => self.convert(param(i), object),
            });
        }
        bind(signature, count, keywords, |p, source| {
            let object = match source {
                Source::Default(default) => {
                    self.values.push(Value::of_default(default));
                    return Ok(());
                }
                Source::Positional(i) => positional[i],
                Source::Keyword(k) => args.keyword_value(k),
            };
            self.take(kernel, &signature.params[p], object)
        })
    }

    /// `object` as `param` takes it, pushed as the next argument.
    #[inline(always)]
    fn take(&mut self, kernel: &Kernel, param: &Param, object: *mut PyObject) -> Result<()> {
        match param.ty == Type::Tensor && object != self.py.none {
            // A tensor's view is written where the call keeps it (the common argument: a move
            // of the 64-byte value through the converter's result would cost more than the
            // write itself).
            true => self.tensor(kernel, object, || param),
            false => self.convert(param, object),
        }
    }

    /// The flattened arguments, in the kernel's order.
    pub fn values(&self) -> &[Value] {
        self.values.as_slice()
    }

    /// `object` as `param` takes it, pushed as the next argument. Each arm pushes the variant it
    /// makes, so only that variant's fields are stored: a `Value` returned and then pushed is
    /// copied whole, with wide loads of the narrow stores just made, which stall
    /// (`Value::empty_tensor_in`).
    #[inline]
    fn convert(&mut self, param: &Param, object: *mut PyObject) -> Result<()> {
        let py = self.py;
        let values = &mut self.values;
        match (object == py.none, param.ty) {
            (true, _) if param.optional => values.push(Value::None),
            (true, _) => return Err(wrong_type(py, param, object)),
            (false, Type::Tensor) => unreachable!("bind converts tensors in place"),
            (false, Type::Int) => match args::int_value(py, object, "") {
                Ok(value) => values.push(Value::Int(value)),
                Err(err) => return Err(number_error(py, param, object, err)),
            },
            (false, Type::Float) => {
                // SAFETY: GIL held; `object` is live; -1.0 with an exception set is the failure.
                let value = unsafe { (py.PyFloat_AsDouble)(object) };
                // SAFETY: GIL held.
                if value == -1.0 && !unsafe { (py.PyErr_Occurred)() }.is_null() {
                    return Err(number_error(py, param, object, Error::python_pending()));
                }
                values.push(Value::Float(value));
            }
            (false, Type::Bool) if object == py.true_ || object == py.false_ => {
                values.push(Value::Bool(object == py.true_))
            }
            // numpy's bool scalar (`a[0] > 0`) as pybind11 takes it; no other truthy object.
            (false, Type::Bool) if matches!(type_name(py, object).as_str(), "numpy.bool" | "numpy.bool_") => {
                // SAFETY: GIL held; `object` is live; numpy's bool cannot fail to be true or false.
                values.push(Value::Bool(unsafe { (py.PyObject_IsTrue)(object) } == 1))
            }
            (false, Type::Bool) => return Err(wrong_type(py, param, object)),
            (false, Type::Str) => {
                // The text stays in the str, which the caller holds for the call.
                let (data, size) =
                    py.with_str(object, "", |text| (text.as_ptr(), text.len())).map_err(|err| match err.kind {
                        crate::ErrorKind::TypeError => wrong_type(py, param, object),
                        // `: a str with no UTF-8 …`, named here (not on every call's way in).
                        _ => Error::new(err.kind, format!("parameter '{}'{}", param.name, err.fact())),
                    })?;
                values.push(Value::Str(data, size));
            }
        }
        Ok(())
    }

    /// A view of `object`, as `dlpx_view_of` takes it, as the next argument; the first one
    /// decides the framework.
    #[inline(always)]
    fn tensor<'k>(&mut self, kernel: &Kernel, object: *mut PyObject, param: impl FnOnce() -> &'k Param) -> Result<()> {
        let py = self.py;
        // SAFETY: the slot is written whole at once.
        let (view, flags) = Value::empty_tensor_in(unsafe { self.values.push_uninit() });
        match producers::view(py, object, view, false) {
            Ok((owner, read_flags)) => {
                crate::kernels::with_dims(view);
                *flags = read_flags;
                if let Some(owner) = NonNull::new(owner) {
                    self.owners.push(owner);
                }
            }
            Err(err) => {
                self.values.pop();
                return Err(tensor_error(py, kernel, param(), object, err));
            }
        }
        if self.like.is_none() {
            self.like = Some(producers::framework_of(py, object));
        }
        Ok(())
    }
}

/// The parameter each keyword of a call names (`keyword_names`, a tuple of str), and how many.
#[cold]
fn keyword_parameters(
    py: Python<'_>,
    kernel: &Kernel,
    names: &[usize],
    keyword_names: *mut PyObject,
) -> Result<([usize; MAX_PARAMETERS], usize)> {
    // SAFETY: GIL held; the call's tuple of str.
    let count = (unsafe { (py.PyTuple_Size)(keyword_names) }) as usize;
    let mut keywords = [0usize; MAX_PARAMETERS];
    for k in 0..count {
        // SAFETY: k < len(keyword_names); the item is borrowed from the tuple.
        let p = parameter(py, kernel, names, unsafe { (py.PyTuple_GetItem)(keyword_names, k as _) })?;
        // More keywords than parameters name one twice (a str subclass whose `__eq__` never
        // holds gets past CPython's own check): the first repeated, as `bind` would name it.
        let Some(slot) = keywords.get_mut(k) else {
            let twice = keywords.iter().enumerate().find(|&(j, q)| keywords[..j].contains(q)).map_or(p, |(_, &q)| q);
            let name = &kernel.signature.params[twice].name;
            return Err(Error::type_error(format!("got multiple values for argument '{name}'")));
        };
        *slot = p;
    }
    Ok((keywords, count))
}

/// The index of the parameter a keyword names (by address: a call site's keywords are interned
/// strs, as `names` are); a TypeError for a name the kernel has not.
fn parameter(py: Python<'_>, kernel: &Kernel, names: &[usize], keyword: *mut PyObject) -> Result<usize> {
    if let Some(p) = names.iter().position(|&n| n == keyword as usize) {
        return Ok(p);
    }
    let text = py.str_value(keyword, "a keyword argument name").map_err(|err| match err.kind {
        // A name with no UTF-8 (a lone surrogate) is no parameter's either: its repr spells it.
        crate::ErrorKind::ValueError if !err.is_python_pending() => {
            Error::type_error(format!("got an unexpected keyword argument {}", crate::cpython::shown(py, keyword)))
        }
        _ => err,
    })?;
    let params = &kernel.signature.params;
    params
        .iter()
        .position(|p| p.name == text)
        .ok_or_else(|| Error::type_error(format!("got an unexpected keyword argument '{text}'")))
}

impl Drop for Arguments<'_> {
    /// Inline, as most rows' views own nothing: the release is out of line (see `Call`'s drop).
    #[inline(always)]
    fn drop(&mut self) {
        if !self.owners.is_empty() {
            self.release_owners();
        }
    }
}

impl Arguments<'_> {
    /// Releases the managed tensors that backed views.
    #[cold]
    #[inline(never)]
    fn release_owners(&mut self) {
        let owners = self.owners.as_slice();
        // A deleter may run Python code: an exception an argument's conversion left stays aside.
        let _guard = ExceptionGuard::save_with_gil(self.py);
        for &owner in owners.iter().rev() {
            // SAFETY: a managed tensor the view took, released once, with the GIL held.
            unsafe { crate::tensor::delete_managed(owner) };
        }
    }
}

/// "parameter 'b' takes a tensor, got str".
#[cold]
fn wrong_type(py: Python<'_>, param: &Param, object: *mut PyObject) -> Error {
    let optional = if param.optional { " or None" } else { "" };
    let article = if param.ty == Type::Int { "an" } else { "a" };
    Error::type_error(format!(
        "parameter '{}' takes {article} {}{optional}, got {}",
        param.name,
        param.ty.name(),
        type_name(py, object)
    ))
}

/// Why `object` did not convert to `param`'s number: no number (a TypeError, pending or ours,
/// also one an `__index__` raised: a numpy array's) → ours naming the parameter; an int past
/// int64 (ours, not pending) → an OverflowError, as CPython's own conversions and a C++
/// parameter's narrowing say; anything else pending (a KeyboardInterrupt from `__index__`, an
/// int too large for a float) raised as it is.
#[cold]
fn number_error(py: Python<'_>, param: &Param, object: *mut PyObject, err: Error) -> Error {
    let pending = err.is_python_pending();
    let type_error = match pending {
        true => crate::cpython::pending_is(py, crate::ErrorKind::TypeError),
        false => err.kind == crate::ErrorKind::TypeError,
    };
    match (type_error, pending) {
        (true, _) => {
            if pending {
                // SAFETY: GIL held; the conversion's exception is replaced by ours.
                unsafe { (py.PyErr_Clear)() };
            }
            wrong_type(py, param, object)
        }
        (false, true) => err,
        (false, false) => Error::new(
            crate::ErrorKind::OverflowError,
            format!("parameter '{}': the int does not fit in 64 bits (int64)", param.name),
        ),
    }
}

/// Why `object` is no tensor: a TypeError for what is plainly not one (a str, a number), else the
/// seam's refusal (a BufferError: a torch tensor that requires grad), naming the parameter; a
/// producer's own exception of a builtin type (numpy's BufferError for a big-endian array) names
/// it too, raised from it; any other passes unchanged.
#[cold]
fn tensor_error(py: Python<'_>, kernel: &Kernel, param: &Param, object: *mut PyObject, err: Error) -> Error {
    let ty = type_of(py, object);
    let scalar = [py.unicode_type, py.long_type, py.float_type, py.bool_type].iter().any(|&t| t.cast() == ty);
    match (scalar, err.is_python_pending()) {
        (true, pending) => {
            if pending {
                // SAFETY: GIL held; the producer's exception is replaced by ours.
                unsafe { (py.PyErr_Clear)() };
            }
            wrong_type(py, param, object)
        }
        (false, true) => {
            crate::cpython::reword_pending(py, &format!("dlpx: {}: parameter '{}': ", kernel.name, param.name))
        }
        (false, false) => Error::new(err.kind, format!("parameter '{}': {}", param.name, err.fact())),
    }
}
