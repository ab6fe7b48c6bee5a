//! One call of a kernel: what `DlpxCall*` points to. The kernel reads its arguments here, asks
//! the caller's framework for outputs and its stream, returns results and reports its error;
//! the caller then takes the results ([`Call::finish`]). Every output the kernel allocated and
//! did not return is deleted once, whatever happened (`Drop`).
//!
//! The call is used by the one thread that runs the kernel, with or without the GIL: the
//! environment (allocator, stream) is the caller's to make safe without it.

use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::ptr;

use super::inline::Inline;
use super::library::Kernel;
use super::output::Outputs;
use super::value::{Returned, Value};
use crate::abi::*;
use crate::error::{Error, ErrorKind, Result};

/// The caller's framework, as the kernel reaches it: asked only when the kernel asks (a call that
/// allocates nothing never looks), with or without the GIL, as DLPack allows.
pub trait Environment {
    /// Its allocator (the first tensor argument's framework's; dlpx's otherwise).
    fn allocator(&self) -> DLPackManagedTensorAllocator;
    /// Its current stream on a device (not asked for the CPU).
    fn stream(&self, device: DLDevice) -> Result<*mut c_void>;
}

/// `repr(C)`: its first two fields are kernel.h's `struct DlpxCall`, which kernels read in place
/// (kernel ABI 2): the arguments and their number. Nothing else of it is theirs.
#[repr(C)]
pub struct Call<'a> {
    arguments: *const Value,
    argument_count: i32,
    pub kernel: &'static Kernel,
    /// The arguments as dlpx reads them: `arguments` and `argument_count` are in the kernel's reach,
    /// to write by mistake.
    values: &'a [Value],
    environment: &'a dyn Environment,
    /// Whether the kernel asked the call to keep anything: an output, a result, an error. Until
    /// then the three below are empty, and a call that ends so (a kernel that returns None)
    /// ends with one test of this, where each list's would be a test of its own, twice.
    asked: bool,
    /// Tensors allocated through the call: it owns those not returned yet. Dropped by `Drop`,
    /// where `asked`.
    outputs: ManuallyDrop<Outputs>,
    results: ManuallyDrop<Inline<Returned, 2>>,
    /// The first error: the kernel's report, or a failed request of the kernel's (dropped by
    /// `delete_left`, out of line).
    error: ManuallyDrop<Option<Error>>,
}

/// What the caller's framework reported for `what` the kernel asked (an output, the stream), as
/// the call's error: its kind and message, less a C++ backtrace (torch's), named by the kernel
/// when the call ends (`dlpx: add: output: …`).
#[cold]
pub fn for_the_call(what: &str, err: Error) -> Error {
    let message = err.message();
    let fact = message.strip_prefix("dlpx: ").unwrap_or(&message);
    Error::new(err.kind, format!("{what}: {}", crate::error::without_cpp_backtrace(fact)))
}

impl<'a> Call<'a> {
    /// A call of `kernel` with `arguments` (at most `i32::MAX`: `bind` refuses more).
    pub fn new(kernel: &'static Kernel, arguments: &'a [Value], environment: &'a dyn Environment) -> Self {
        debug_assert!(i32::try_from(arguments.len()).is_ok(), "bind refuses more arguments");
        Call {
            arguments: arguments.as_ptr(),
            argument_count: arguments.len() as i32,
            kernel,
            values: arguments,
            environment,
            asked: false,
            outputs: ManuallyDrop::new(Outputs::new()),
            results: ManuallyDrop::new(Inline::new()),
            error: ManuallyDrop::new(None),
        }
    }

    /// Runs the kernel on this call (through `run`, which may release the GIL around it) and
    /// gives its results, or its error, named after the kernel.
    pub fn run(&mut self, run: impl FnOnce(&mut dyn FnMut() -> i32) -> i32) -> Result<Inline<Returned, 2>> {
        let status = self.start(run);
        self.finish(status)
    }

    /// Runs the kernel on this call (through `run`, as [`Call::run`]) and gives what it
    /// returned; [`Call::returned_nothing`] then [`Call::finish`] say what came of it.
    #[inline(always)]
    pub fn start(&mut self, run: impl FnOnce(&mut dyn FnMut() -> i32) -> i32) -> i32 {
        let function = self.kernel.function;
        let this = (self as *mut Call<'a>).cast::<c_void>();
        // SAFETY: the kernel's function gets the call it was exported to take; the call lives
        // across it and no Rust reference to it is used meanwhile.
        run(&mut || unsafe { function(this) })
    }

    /// Whether a kernel that returned `status` succeeded with nothing to hand back: it asked
    /// for no output, returned no result and reported no error (`lib.nop`'s call). Its results
    /// need not be taken then: there are none, and `finish` would move the empty list out.
    #[inline(always)]
    pub fn returned_nothing(&self, status: i32) -> bool {
        status == 0 && !self.asked
    }

    /// The results of a kernel that returned `status`: its error when it reported one or a
    /// request failed (whatever it returned then), a RuntimeError when it returned non-zero
    /// without one or changed an output's header (the framework's: `output`).
    #[inline(always)]
    pub fn finish(&mut self, status: i32) -> Result<Inline<Returned, 2>> {
        match self.error.is_none() && status == 0 && (self.outputs.is_empty() || self.outputs.unchanged()) {
            true => Ok(self.results.take()),
            false => Err(self.failure(status)),
        }
    }

    /// Why the call failed (`finish`). Its outputs are deleted with it, by their framework's
    /// deleter, which may read the header it made: it gets it back.
    #[cold]
    #[inline(never)]
    fn failure(&mut self, status: i32) -> Error {
        let err = match (self.error.take(), status) {
            (Some(error), _) => error,
            (None, 0) => {
                let (index, what) = self.outputs.changed().unwrap_or((0, "header"));
                self.named(changed(index, what))
            }
            (None, status) => self.named(Error::runtime(format!(
                "the kernel returned {status} without reporting an error (dlpx_call_error)"
            ))),
        };
        self.outputs.restore();
        err
    }

    /// `err` named after the kernel: `dlpx: add: …`.
    fn named(&self, err: Error) -> Error {
        err.at(self.kernel.name)
    }

    /// Keeps the first error; a request that fails reports it here as well as returning it.
    pub fn record(&mut self, err: Error) -> Error {
        let err = self.named(err);
        self.asked = true;
        if self.error.is_none() {
            *self.error = Some(err.clone());
        }
        err
    }

    pub fn argument_count(&self) -> usize {
        self.values.len()
    }

    /// The arguments, in the kernel's order.
    #[inline]
    pub fn arguments(&self) -> &'a [Value] {
        self.values
    }

    /// Argument `index`; an IndexError beyond the last one (argument 9 of 3 is an error, never
    /// a read past the end).
    pub fn argument(&self, index: i64) -> Result<&Value> {
        let n = self.argument_count();
        usize::try_from(index).ok().and_then(|i| self.arguments().get(i)).ok_or_else(|| {
            Error::new(
                ErrorKind::IndexError,
                match n {
                    0 => format!("argument {index} asked for; the call has none"),
                    _ => format!("argument {index} asked for; the call has {n} (0 to {})", n - 1),
                },
            )
        })
    }

    /// A TypeError: argument `index` is not of the kind the kernel asked for.
    pub fn wrong_kind(&self, index: i64, value: &Value, wanted: &str) -> Error {
        let param = self.kernel.signature.param_of(index as usize, self.argument_count()).map(|p| p.name.as_str());
        Error::type_error(format!(
            "argument {index} ('{}') is {}, not {wanted}",
            param.unwrap_or("?"),
            value.kind_name()
        ))
    }

    /// Allocates an output in the caller's framework: owned by the call until the kernel
    /// returns it, deleted with the call otherwise.
    pub fn allocate(&mut self, device: DLDevice, dtype: DLDataType, shape: &[i64]) -> Result<*mut DLTensor> {
        // What no framework can allocate is the kernel's mistake, refused alike whichever
        // framework serves the call (torch's table calls a negative shape a MemoryError).
        check_request(device, dtype, shape).map_err(|err| for_the_call("output", err))?;
        // SAFETY: a table's allocator, under DLPack's contract.
        let managed =
            unsafe { super::framework_allocator::allocate(self.environment.allocator(), device, dtype, shape) }
                .map_err(|err| for_the_call("output", err))?;
        self.asked = true;
        self.outputs.keep(managed);
        // SAFETY: a live managed tensor the call owns.
        Ok(unsafe { &mut (*managed.as_ptr()).dl_tensor })
    }

    /// The caller's current stream on `device` (NULL for the CPU, which has none to ask).
    pub fn stream(&self, device: DLDevice) -> Result<*mut c_void> {
        match device.device_type {
            DeviceType::CPU => Ok(ptr::null_mut()),
            // As an output on it is refused: no framework has a stream there to give.
            other if !crate::device_names::is_known(other) => {
                Err(for_the_call("stream", crate::device_names::unknown(other)))
            }
            // As a tensor argument there is (it got NULL, where setting one is refused).
            _ if device.device_id < 0 => {
                Err(for_the_call("stream", crate::device_names::negative_id(device.device_id)))
            }
            _ => self.environment.stream(device).map_err(|err| for_the_call("stream", err)),
        }
    }

    /// Returns `output`, a tensor this call allocated, as the next result.
    pub fn return_tensor(&mut self, output: *const DLTensor) -> Result<()> {
        let Some(managed) = self.outputs.take(output) else {
            return Err(Error::value(
                "returned a tensor this call did not allocate, or returned it twice (dlpx_call_allocate gives outputs)",
            ));
        };
        self.asked = true;
        self.results.push(Returned::Tensor(managed));
        Ok(())
    }

    /// Returns a scalar as the next result.
    pub fn return_scalar(&mut self, value: Returned) {
        self.asked = true;
        self.results.push(value);
    }

    /// The kernel's own error: `kind` a Python exception name (one dlpx does not know arrives as
    /// RuntimeError, its name kept in the message).
    pub fn report(&mut self, kind: &str, message: &str) {
        let message = match message.is_empty() {
            true => "the kernel reported an error without a message",
            false => message,
        };
        let err = match ErrorKind::from_name(kind) {
            Some(kind) => Error::new(kind, message),
            None if kind.is_empty() => Error::runtime(message),
            None => Error::runtime(format!("{kind}: {message}")),
        };
        self.record(err);
    }
}

impl Drop for Call<'_> {
    /// Inline, as the common call has nothing left to delete: the checks stay among the call's
    /// own lines, and the deletions are out of line (a separate function is lines to fetch again
    /// on every call, once a CUDA launch has evicted them: docs/cuda.md).
    #[inline(always)]
    fn drop(&mut self) {
        if self.asked {
            if !(self.outputs.all_returned() && self.results.is_empty() && self.error.is_none()) {
                self.delete_left();
            }
            // SAFETY: dropped once, here, as the call goes (a call never asked holds nothing in
            // them: nothing spilled to the heap).
            unsafe {
                ManuallyDrop::drop(&mut self.outputs);
                ManuallyDrop::drop(&mut self.results);
            }
        }
    }
}

impl Call<'_> {
    /// Deletes the outputs the kernel did not return, the results nobody took and an error
    /// nobody took.
    #[cold]
    #[inline(never)]
    fn delete_left(&mut self) {
        // SAFETY: dropped once, here, as the call goes.
        unsafe { ManuallyDrop::drop(&mut self.error) };
        for managed in self.outputs.unreturned() {
            // SAFETY: outputs the call owns, never handed out; each is deleted once (the call
            // is going: nothing reads the list after this).
            unsafe { crate::tensor::delete_managed(managed) };
        }
        for &result in self.results.as_slice() {
            result.discard();
        }
    }
}

/// A request no tensor can answer: an unknown device type, an id no device of it has (cpu:1,
/// cuda:-1: refused here, whatever framework allocates, where torch's allocator gave cpu:0), an
/// unknown dtype, a negative extent, a byte size past 64 bits (a shape `ndim` long is the
/// caller's: `dlpx_call_allocate` checked it).
fn check_request(device: DLDevice, dtype: DLDataType, shape: &[i64]) -> Result<()> {
    if !crate::device_names::is_known(device.device_type) {
        return Err(crate::device_names::unknown(device.device_type));
    }
    crate::devices::check_id(device)?;
    crate::dtype::check(dtype)?;
    crate::layout::nbytes(crate::layout::numel(shape)?, dtype, 0).map(|_| ())
}

/// "output 0's shape was changed by the kernel": what a kernel may write of an output is its data.
#[cold]
fn changed(index: usize, what: &str) -> Error {
    Error::runtime(format!(
        "the kernel changed output {index}'s {what}: an output's header (ndim to byte_offset, its shape and strides) is its framework's, and a kernel writes only its data"
    ))
}
