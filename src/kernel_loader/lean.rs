//! EXPERIMENT
use std::mem::MaybeUninit;
use std::ptr;

use pyo3_ffi::PyObject;

use crate::abi::*;
use crate::cpython::{released, Python};
use crate::error::Result;
use crate::kernels::{Call, Environment, Kernel, Value};
use crate::producers;

pub const LEAN: usize = 8;

struct Owners<'py> {
    py: Python<'py>,
    list: [*mut DLManagedTensorVersioned; LEAN],
    count: usize,
}

impl Drop for Owners<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.count != 0 {
            self.release();
        }
    }
}
impl Owners<'_> {
    #[cold]
    #[inline(never)]
    fn release(&mut self) {
        let _guard = crate::cpython::ExceptionGuard::save_with_gil(self.py);
        for &owner in self.list[..self.count].iter().rev() {
            unsafe { crate::tensor::delete_managed(ptr::NonNull::new_unchecked(owner)) };
        }
    }
}

#[inline(always)]
pub fn call(py: Python<'_>, kernel: &'static Kernel, positional: &[*mut PyObject]) -> Result<*mut PyObject> {
    let mut values = [const { MaybeUninit::<Value>::uninit() }; LEAN];
    let mut owners = Owners { py, list: [ptr::null_mut(); LEAN], count: 0 };
    let n = positional.len();
    for i in 0..n {
        let object = positional[i];
        let (view, flags) = Value::empty_tensor_in(&mut values[i]);
        match producers::view(py, object, view, false) {
            Ok((owner, read_flags)) => {
                crate::kernels::with_dims(view);
                *flags = read_flags;
                if !owner.is_null() {
                    owners.list[owners.count] = owner;
                    owners.count += 1;
                }
            }
            Err(err) => return Err(err.at(kernel.name)),
        }
    }
    let like = match n {
        0 => None,
        _ => Some(producers::framework_of(py, positional[0])),
    };
    let like = super::outputs_like::chosen(py).map_err(|err| err.at(kernel.name))?.or(like);
    let table = like.map(|entry| entry.table).or_else(crate::tensor_type::own_table);
    let holding = kernel.short.then_some(py);
    let stream = |device: DLDevice| super::function::stream_of(table, device, holding);
    let allocator = table.and_then(|t| t.managed_tensor_allocator);
    // SAFETY: the first n slots are written.
    let values = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<Value>(), n) };
    let returned = {
        let mut call = Call::new(kernel, values, Environment { allocator, stream: &stream });
        let status = call.start(|run| match kernel.short {
            true => run(),
            false => unsafe { released(py, run) },
        });
        match call.plain(status) {
            true => None,
            false => Some(call.finish(status)),
        }
    };
    drop(owners);
    let Some(returned) = returned else { return Ok(py.new_none()) };
    super::results::to_py(py, like, returned?).map_err(|err| super::results::refused(py, kernel.name, err))
}
