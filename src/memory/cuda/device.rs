//! Per-device state: the primary context dlpx retains, the pool device memory comes from, and
//! the device's event pool; running driver calls with a device's context current.

use std::sync::Mutex;

use cudarc::driver::sys::{
    CUcontext, CUdevice, CUmemAccessDesc, CUmemAccess_flags, CUmemAllocationHandleType, CUmemAllocationType,
    CUmemLocation, CUmemLocationType, CUmemPoolProps, CUmemoryPool,
};
use once_cell::sync::OnceCell;

use super::driver::{self, check, Driver};
use crate::error::{Error, Result};
use crate::memory::blocking::blocking;

/// What dlpx keeps per device: its primary context, and the pool device memory comes from.
pub(super) struct DeviceState {
    pub(super) context: usize,
    /// A dlpx-owned pool that keeps freed memory for reuse (release threshold: never), or 0 on a
    /// device without memory pools, where memory comes from cuMemAlloc.
    pub(super) pool: usize,
    /// Events of this device's context, free for reuse (cuEventCreate/Destroy cost about a
    /// microsecond each; an export to another stream or a pinned free needs one).
    pub(super) events: Mutex<Vec<usize>>,
}

/// Most free events kept per device.
pub(super) const EVENT_POOL_SIZE: usize = 64;

pub(super) static DEVICES: OnceCell<Box<[OnceCell<DeviceState>]>> = OnceCell::new();

/// The state of `device_id`, after checking that the device exists; set up once per device.
fn device(device_id: i32) -> Result<(&'static Driver, &'static DeviceState)> {
    let driver = driver::get()?;
    let count = driver::device_count()?;
    if device_id < 0 || device_id >= count {
        return Err(Error::value(format!(
            "device cuda:{device_id} does not exist: this machine has {count} CUDA device(s)"
        )));
    }
    let devices = DEVICES.get_or_init(|| (0..count).map(|_| OnceCell::new()).collect());
    let cell = &devices[device_id as usize];
    let state = match cell.get() {
        Some(state) => state,
        // Creating a primary context takes a while: without the GIL (see `without_gil`).
        None => blocking(|| cell.get_or_try_init(|| set_up(driver, device_id)))?,
    };
    Ok((driver, state))
}

fn set_up(driver: &Driver, device_id: i32) -> Result<DeviceState> {
    if let Some(value) = &super::classes::settings().unreadable {
        return Err(Error::value(format!(
            "DLPX_CUDA_CACHE_BYTES={value:?} is no byte count (a number of bytes, or of K, M or G: 512M, 4G; 0 turns the cache off)"
        )));
    }
    let mut device: CUdevice = 0;
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: valid out pointers; the ordinal was checked against the device count.
    unsafe {
        check(driver, "cuDeviceGet", (driver.cuDeviceGet)(&mut device, device_id))?;
        check(driver, "cuDevicePrimaryCtxRetain", (driver.cuDevicePrimaryCtxRetain)(&mut ctx, device))?;
    }
    let count = driver::device_count()?;
    match with_context(driver, ctx, || Ok(create_pool(driver, device, count))) {
        Ok(pool) => Ok(DeviceState { context: ctx as usize, pool: pool as usize, events: Mutex::new(Vec::new()) }),
        Err(err) => {
            // Not set up: the next request retries from the start, so give the retain back.
            // SAFETY: the retain made above.
            unsafe { (driver.cuDevicePrimaryCtxRelease_v2)(device) };
            Err(err)
        }
    }
}

/// A pool on `device` that never releases freed memory on its own (the default pool's threshold
/// is 0: memory would go back to the driver at every synchronisation), or NULL where the device
/// has no memory pools or the pool cannot be made — cuMemAlloc serves those.
fn create_pool(driver: &Driver, device: CUdevice, device_count: i32) -> CUmemoryPool {
    let mut supported = 0;
    // SAFETY: a valid out pointer and device.
    let asked =
        unsafe { (driver.cuDeviceGetAttribute)(&mut supported, driver::ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device) };
    if asked != driver::CUDA_SUCCESS || supported == 0 {
        return std::ptr::null_mut();
    }
    let props = CUmemPoolProps {
        allocType: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        handleTypes: CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
        location: CUmemLocation { type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: device },
        win32SecurityAttributes: std::ptr::null_mut(),
        maxSize: 0,
        usage: 0,
        reserved: [0; 54],
    };
    let mut pool: CUmemoryPool = std::ptr::null_mut();
    let mut threshold = u64::MAX;
    // SAFETY: valid pointers; the attribute takes a cuuint64_t.
    unsafe {
        if (driver.cuMemPoolCreate)(&mut pool, &props) != driver::CUDA_SUCCESS {
            return std::ptr::null_mut();
        }
        // Without the threshold the pool still works, releasing memory at synchronisations.
        let _ = (driver.cuMemPoolSetAttribute)(
            pool,
            driver::MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        );
    }
    grant_peer_access(driver, pool, device, device_count);
    pool
}

/// Lets every device that can reach `device`'s memory reach the pool's: pool memory ignores
/// cuCtxEnablePeerAccess, so without this a kernel on a peer (torch copying between GPUs with
/// peer access on) would fault where cuMemAlloc'd memory works. Best effort: a device that
/// cannot be granted access just reads through copies, as without peer access.
fn grant_peer_access(driver: &Driver, pool: CUmemoryPool, device: CUdevice, device_count: i32) {
    for peer in (0..device_count).filter(|&p| p != device) {
        let mut can = 0;
        // SAFETY: a valid out pointer and two valid ordinals.
        if unsafe { (driver.cuDeviceCanAccessPeer)(&mut can, peer, device) } != driver::CUDA_SUCCESS || can == 0 {
            continue;
        }
        let access = CUmemAccessDesc {
            location: CUmemLocation { type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: peer },
            flags: CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: a pool dlpx created and one valid descriptor.
        let _ = unsafe { (driver.cuMemPoolSetAccess)(pool, &access, 1) };
    }
}

/// Checks that `device_id` exists (and sets it up), for requests that need no memory.
pub fn check_device(device_id: i32) -> Result<()> {
    device(device_id).map(|_| ())
}

/// Runs `f` with `ctx` current on this thread, restoring the caller's context afterwards.
pub(super) fn with_context<T>(driver: &Driver, ctx: CUcontext, f: impl FnOnce() -> Result<T>) -> Result<T> {
    /// Pops on drop, so an early return or a panic inside `f` leaves no context pushed.
    struct Pushed<'a>(&'a Driver);
    impl Drop for Pushed<'_> {
        fn drop(&mut self) {
            let mut popped: CUcontext = std::ptr::null_mut();
            // SAFETY: pops what `with_context` pushed on this thread.
            unsafe { (self.0.cuCtxPopCurrent_v2)(&mut popped) };
        }
    }
    // SAFETY: a retained primary context; push and pop are paired on this thread.
    unsafe { check(driver, "cuCtxPushCurrent", (driver.cuCtxPushCurrent_v2)(ctx))? };
    let _pushed = Pushed(driver);
    f()
}

/// Waits (without the GIL) for all work of the current context: only where an ordering that
/// should have been an event cannot be made, so that memory is never freed under a reader.
pub(super) fn synchronise_context(driver: &Driver) {
    // SAFETY: a context is current (callers run inside `with_context`).
    blocking(|| unsafe { (driver.cuCtxSynchronize)() });
}

/// Runs `f` on `device_id` with its primary context current.
pub(super) fn on_device<T>(
    device_id: i32,
    f: impl FnOnce(&'static Driver, &'static DeviceState) -> Result<T>,
) -> Result<T> {
    let (driver, state) = device(device_id)?;
    with_context(driver, state.context as CUcontext, || f(driver, state))
}

/// Waits for all work of `device_id` (the fallback when an ordering cannot be made).
pub fn synchronise_device(device_id: i32) {
    let _ = on_device(device_id, |driver, _| {
        synchronise_context(driver);
        Ok(())
    });
}

/// A set-up device's state (events are only made on those).
pub(super) fn device_state(device_id: i32) -> Option<&'static DeviceState> {
    DEVICES.get()?.get(usize::try_from(device_id).ok()?)?.get()
}

/// The devices someone works on: dlpx's, and those whose primary context another framework
/// holds (torch copying from a pinned block to cuda:1 retains cuda:1's).
pub(super) fn devices_in_use(driver: &'static Driver) -> impl Iterator<Item = i32> {
    let count = driver::device_count().unwrap_or(0);
    (0..count).filter(move |&device_id| {
        if device_state(device_id).is_some() {
            return true;
        }
        let (mut flags, mut active) = (0, 0);
        // SAFETY: valid out pointers and ordinal.
        let asked = unsafe { (driver.cuDevicePrimaryCtxGetState)(device_id, &mut flags, &mut active) };
        asked == driver::CUDA_SUCCESS && active != 0
    })
}

/// The devices dlpx has set up so far, with their state.
pub(super) fn set_up_devices() -> impl Iterator<Item = (i32, &'static DeviceState)> {
    DEVICES
        .get()
        .into_iter()
        .flat_map(|devices| devices.iter().enumerate().filter_map(|(i, d)| d.get().map(|d| (i as i32, d))))
}

/// A driver's answer to an allocation of `nbytes`: MemoryError naming the size for
/// CUDA_ERROR_OUT_OF_MEMORY, the driver's own error otherwise.
pub(super) fn out_of_memory(driver: &Driver, code: i32, nbytes: usize, of: &str) -> Result<()> {
    if code == driver::CUDA_ERROR_OUT_OF_MEMORY {
        return Err(Error::memory(format!("out of memory allocating {nbytes} bytes of {of}")));
    }
    check(driver, "CUDA allocation", code)
}

/// MemoryError naming the size and the device.
pub(super) fn no_memory(nbytes: usize, device_id: i32) -> Error {
    Error::memory(format!("out of memory allocating {nbytes} bytes on CUDA device {device_id}"))
}
