//! The bottom of dlpx's CUDA: the driver functions it calls, resolved once from the libcuda that
//! cudarc finds; the driver's names for its built-in streams; and how a blocking call waits.
//!
//! cudarc's own wrappers are not used for the calls: they return `CUresult` as a Rust enum, so a
//! code newer than its bindings (a driver from a later CUDA) would be undefined behaviour, and a
//! missing symbol panics on first use. Here every function returns the raw `c_int`, every symbol
//! is resolved up front (a driver that lacks one is an error, not a panic), and error names come
//! from the driver itself (`cuGetErrorName`), which knows every code it can return.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use cudarc::driver::sys::{
    self, CUcontext, CUdevice, CUdeviceptr, CUevent, CUmemAccessDesc, CUmemPoolProps, CUmemoryPool, CUstream,
};
use once_cell::sync::OnceCell;

use crate::error::{Error, ErrorKind, Result};

pub const CUDA_SUCCESS: c_int = 0;
pub const CUDA_ERROR_INVALID_VALUE: c_int = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: c_int = 2;
/// What an allocation ordered on a stream of another device's context answers.
pub const CUDA_ERROR_INVALID_CONTEXT: c_int = 201;
pub const CUDA_ERROR_NO_DEVICE: c_int = 100;
/// CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED.
pub const ATTRIBUTE_MEMORY_POOLS_SUPPORTED: c_int = 115;
/// CU_MEMPOOL_ATTR_RELEASE_THRESHOLD.
pub const MEMPOOL_ATTR_RELEASE_THRESHOLD: c_int = 4;

/// CU_STREAM_LEGACY and CU_STREAM_PER_THREAD, the driver's names for DLPack's stream 1 and 2.
pub const STREAM_LEGACY: usize = 0x1;
pub const STREAM_PER_THREAD: usize = 0x2;

/// The stream a use on `stream` is recorded as: the per-thread default stream (2) names a
/// different stream on each thread, so a use there is recorded as the legacy stream, which
/// waits for all of them (and which every thread can name later, at the free).
pub fn as_recordable(stream: *mut c_void) -> *mut c_void {
    if stream as usize == STREAM_PER_THREAD {
        STREAM_LEGACY as *mut c_void
    } else {
        stream
    }
}

/// Whether no one can destroy `stream`: NULL, the legacy and the per-thread default streams.
/// A consumer owns every other stream it names and may destroy it as soon as `__dlpack__`
/// returns; the real driver does not refuse a destroyed handle, it crashes inside the call
/// (cuEventRecord, driver 580 on an H100), so dlpx keeps only built-in streams past the call.
pub fn is_built_in(stream: *mut c_void) -> bool {
    matches!(stream as usize, 0 | STREAM_LEGACY | STREAM_PER_THREAD)
}

/// Whether two stream handles name the same stream (NULL is the legacy default stream).
pub fn same_stream(a: usize, b: usize) -> bool {
    let normalise = |s: usize| if s == 0 { STREAM_LEGACY } else { s };
    normalise(a) == normalise(b)
}

/// How a call that blocks on the device (a synchronisation, cuMemFree) may wait.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Through the blocking hook (other Python threads run meanwhile).
    Hooked,
    /// Directly: at exit, when Python may be finalised already.
    AtExit,
}

/// Runs a blocking driver call as `wait` allows.
pub fn wait_for<T>(wait: Wait, f: impl FnOnce() -> T) -> T {
    match wait {
        Wait::Hooked => crate::memory::blocking::blocking(f),
        Wait::AtExit => f(),
    }
}

/// Declares the table and its loader from one list, so a name cannot be declared and not loaded.
macro_rules! driver_functions {
    ($($name:ident($($arg:ty),*);)*) => {
        #[allow(non_snake_case)]
        pub struct Driver {
            $(pub $name: unsafe extern "C" fn($($arg),*) -> c_int,)*
        }

        impl Driver {
            fn resolve(lookup: &dyn Fn(&[u8]) -> Option<*mut c_void>) -> std::result::Result<Driver, String> {
                Ok(Driver {
                    $($name: {
                        let address = lookup(concat!(stringify!($name), "\0").as_bytes())
                            .filter(|p| !p.is_null())
                            .ok_or_else(|| format!("the CUDA driver lacks {}", stringify!($name)))?;
                        // SAFETY: a non-NULL address of the driver function of this name, whose
                        // C signature the declaration spells.
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> c_int>(address) }
                    },)*
                })
            }
        }
    };
}

driver_functions! {
    cuInit(c_uint);
    cuDriverGetVersion(*mut c_int);
    cuDeviceGetCount(*mut c_int);
    cuDeviceGet(*mut CUdevice, c_int);
    cuDeviceGetAttribute(*mut c_int, c_int, CUdevice);
    cuDeviceCanAccessPeer(*mut c_int, CUdevice, CUdevice);
    cuDevicePrimaryCtxRetain(*mut CUcontext, CUdevice);
    cuDevicePrimaryCtxRelease_v2(CUdevice);
    cuDevicePrimaryCtxGetState(CUdevice, *mut c_uint, *mut c_int);
    cuCtxPushCurrent_v2(CUcontext);
    cuCtxPopCurrent_v2(*mut CUcontext);
    cuCtxGetDevice(*mut CUdevice);
    cuStreamGetCtx(CUstream, *mut CUcontext);
    cuGetErrorName(c_int, *mut *const c_char);
    cuMemPoolCreate(*mut CUmemoryPool, *const CUmemPoolProps);
    cuMemPoolSetAttribute(CUmemoryPool, c_int, *mut c_void);
    cuMemPoolTrimTo(CUmemoryPool, usize);
    cuMemPoolSetAccess(CUmemoryPool, *const CUmemAccessDesc, usize);
    cuMemAllocFromPoolAsync(*mut CUdeviceptr, usize, CUmemoryPool, CUstream);
    cuMemFreeAsync(CUdeviceptr, CUstream);
    cuMemAlloc_v2(*mut CUdeviceptr, usize);
    cuMemFree_v2(CUdeviceptr);
    cuMemAllocManaged(*mut CUdeviceptr, usize, c_uint);
    cuMemHostAlloc(*mut *mut c_void, usize, c_uint);
    cuMemFreeHost(*mut c_void);
    cuEventCreate(*mut CUevent, c_uint);
    cuEventRecord(CUevent, CUstream);
    cuEventQuery(CUevent);
    cuEventSynchronize(CUevent);
    cuEventDestroy_v2(CUevent);
    cuStreamWaitEvent(CUstream, CUevent, c_uint);
    cuStreamSynchronize(CUstream);
    cuStreamIsCapturing(CUstream, *mut c_int);
    cuCtxSynchronize();
    cuMemcpyDtoHAsync_v2(*mut c_void, CUdeviceptr, usize, CUstream);
    cuMemcpyDtoDAsync_v2(CUdeviceptr, CUdeviceptr, usize, CUstream);
    cuPointerGetAttribute(*mut c_void, c_int, CUdeviceptr);
}

/// The loaded, initialised driver and the device count; or why there is none.
struct Loaded {
    driver: Driver,
    device_count: i32,
}

static LOADED: OnceCell<std::result::Result<Loaded, (ErrorKind, String)>> = OnceCell::new();

/// The driver, loaded and initialised on first use (thread-safe; later calls are a load).
pub fn get() -> Result<&'static Driver> {
    loaded().map(|l| &l.driver)
}

/// The number of CUDA devices.
pub fn device_count() -> Result<i32> {
    loaded().map(|l| l.device_count)
}

fn loaded() -> Result<&'static Loaded> {
    // cuInit can take a second: the GIL is released for it (see `without_gil`).
    let loaded = match LOADED.get() {
        Some(loaded) => loaded,
        None => crate::memory::blocking::blocking(|| LOADED.get_or_init(load)),
    };
    match loaded {
        Ok(loaded) => Ok(loaded),
        Err((kind, message)) => Err(Error::new(*kind, message)),
    }
}

fn load() -> std::result::Result<Loaded, (ErrorKind, String)> {
    let runtime = |message: String| (ErrorKind::RuntimeError, message);
    // SAFETY: only tries to dlopen libcuda; culib() below panics unless this found one.
    if !unsafe { sys::is_culib_present() } {
        return Err(runtime("CUDA driver not found (libcuda.so could not be loaded)".to_string()));
    }
    // SAFETY: present, per the check above; the library stays loaded for the process.
    let library = unsafe { sys::culib() };
    // SAFETY: looking a symbol up has no effect; the address is only used through its signature.
    let lookup = |name: &[u8]| unsafe { library.get::<*mut c_void>(name).ok().map(|symbol| *symbol) };
    if let Some(get_version) = lookup(b"cuDriverGetVersion\0").filter(|p| !p.is_null()) {
        // Asked before the whole table: an old driver lacks newer functions, and "too old" says why.
        // SAFETY: the driver's cuDriverGetVersion, callable before cuInit.
        let get_version =
            unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_int) -> c_int>(get_version) };
        let mut version = 0;
        // SAFETY: a valid out pointer.
        if unsafe { get_version(&mut version) } == CUDA_SUCCESS && version < MIN_DRIVER_VERSION {
            return Err(too_old(version));
        }
    }
    let driver = Driver::resolve(&lookup).map_err(runtime)?;
    // SAFETY: cuInit may be called any number of times from any thread.
    let initialised = unsafe { (driver.cuInit)(0) };
    if initialised == CUDA_ERROR_NO_DEVICE {
        // A driver on a machine without a GPU: every device request names the count, 0.
        return Ok(Loaded { driver, device_count: 0 });
    }
    check(&driver, "cuInit", initialised).map_err(|e| (e.kind, e.fact().to_string()))?;
    let mut version = 0;
    // SAFETY: a valid out pointer.
    check(&driver, "cuDriverGetVersion", unsafe { (driver.cuDriverGetVersion)(&mut version) })
        .map_err(|e| (e.kind, e.fact().to_string()))?;
    if version < MIN_DRIVER_VERSION {
        return Err(too_old(version));
    }
    let mut device_count = 0;
    // SAFETY: a valid out pointer after a successful cuInit.
    check(&driver, "cuDeviceGetCount", unsafe { (driver.cuDeviceGetCount)(&mut device_count) })
        .map_err(|e| (e.kind, e.fact().to_string()))?;
    Ok(Loaded { driver, device_count })
}

/// Stream-ordered allocation (memory pools) arrived in CUDA 11.2.
const MIN_DRIVER_VERSION: c_int = 11020;

fn too_old(version: c_int) -> (ErrorKind, String) {
    (ErrorKind::RuntimeError, format!("the CUDA driver is too old: version {version}, dlpx needs 11.2 or later"))
}

/// Whether libcuda can be loaded (without initialising it).
pub fn present() -> bool {
    // SAFETY: only tries to dlopen libcuda.
    unsafe { sys::is_culib_present() }
}

/// `Ok` for CUDA_SUCCESS; else an error naming the call and the driver's name for the code
/// (MemoryError for out of memory).
pub fn check(driver: &Driver, what: &str, code: c_int) -> Result<()> {
    if code == CUDA_SUCCESS {
        return Ok(());
    }
    let kind = if code == CUDA_ERROR_OUT_OF_MEMORY { ErrorKind::MemoryError } else { ErrorKind::RuntimeError };
    Err(Error::new(kind, format!("{what} failed: {}", error_name(driver, code))))
}

/// The driver's name for `code` ("CUDA_ERROR_INVALID_VALUE"), or the number when it has none.
fn error_name(driver: &Driver, code: c_int) -> String {
    let mut name: *const c_char = std::ptr::null();
    // SAFETY: a valid out pointer; the driver returns a static string or leaves it NULL.
    if unsafe { (driver.cuGetErrorName)(code, &mut name) } == CUDA_SUCCESS && !name.is_null() {
        // SAFETY: a NUL-terminated static string from the driver.
        return format!("{} ({code})", unsafe { CStr::from_ptr(name) }.to_string_lossy());
    }
    format!("CUDA error {code} (unknown to this driver)")
}
