//! The per-thread current work stream of each (device type, device id).
//!
//! `current_work_stream` must answer in a few nanoseconds, so the registry is a small
//! thread-local table of cells, searched linearly: a thread works with a handful of devices.
//! It has no destructor, so reaching it costs only the thread-local address lookup.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::abi::{DLDevice, DLPackExchangeAPI, DeviceType};
use crate::error::{boundary, Error, LastError, Result};

/// Most (device type, device id) pairs one thread can hold a current stream for.
pub const MAX_STREAMS_PER_THREAD: usize = 16;

/// Whether any thread ever set a stream. Until one does, every answer is NULL without the
/// thread-local lookup (a `__tls_get_addr` call in a shared library, half the cost). A thread
/// always sees its own store, and only its own streams matter to it.
static EVER_SET: AtomicBool = AtomicBool::new(false);

struct Streams {
    len: Cell<usize>,
    /// (device as one key, stream handle); the first `len` are live.
    entries: [(Cell<u64>, Cell<usize>); MAX_STREAMS_PER_THREAD],
}

thread_local! {
    static CURRENT: Streams = const {
        Streams { len: Cell::new(0), entries: [const { (Cell::new(0), Cell::new(0)) }; MAX_STREAMS_PER_THREAD] }
    };
}

#[inline]
fn key(device: DLDevice) -> u64 {
    ((device.device_type.0 as u32 as u64) << 32) | device.device_id as u32 as u64
}

impl Streams {
    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        self.entries[..self.len.get()].iter().position(|(k, _)| k.get() == key)
    }
}

/// Whether any thread ever set a stream (until then every answer is NULL).
#[inline(always)]
pub fn ever_set() -> bool {
    EVER_SET.load(Ordering::Relaxed)
}

/// This thread's current stream on `device`; NULL (the default stream) when none was set.
/// Never panics, so the exchange table answers without a boundary.
#[inline]
pub fn current(device: DLDevice) -> *mut c_void {
    if !EVER_SET.load(Ordering::Relaxed) {
        return std::ptr::null_mut();
    }
    let key = key(device);
    CURRENT.try_with(|streams| streams.find(key).map_or(0, |i| streams.entries[i].1.get())).unwrap_or(0) as *mut c_void
}

/// Whether this thread has set any stream (else every device uses its default stream).
#[inline]
pub fn any_set() -> bool {
    EVER_SET.load(Ordering::Relaxed) && CURRENT.try_with(|streams| streams.len.get() > 0).unwrap_or(false)
}

/// Makes `stream` this thread's current stream on `device` (NULL clears it) and returns the
/// previous one, so a caller can restore it. The entry points refuse devices that keep no
/// streams first (`devices::check_stream_settable`), so no CPU stream is ever kept.
pub fn set_current(device: DLDevice, stream: *mut c_void) -> Result<*mut c_void> {
    if !stream.is_null() {
        EVER_SET.store(true, Ordering::Relaxed);
    }
    let key = key(device);
    CURRENT.with(|streams| {
        let len = streams.len.get();
        match streams.find(key) {
            Some(i) if stream.is_null() => {
                // Removed by moving the last entry into its place.
                let previous = streams.entries[i].1.get();
                streams.entries[i].0.set(streams.entries[len - 1].0.get());
                streams.entries[i].1.set(streams.entries[len - 1].1.get());
                streams.len.set(len - 1);
                Ok(previous as *mut c_void)
            }
            Some(i) => Ok(streams.entries[i].1.replace(stream as usize) as *mut c_void),
            None if stream.is_null() => Ok(std::ptr::null_mut()),
            None if len == MAX_STREAMS_PER_THREAD => Err(Error::value(format!(
                "a thread can hold current streams on at most {MAX_STREAMS_PER_THREAD} devices"
            ))),
            None => {
                streams.entries[len].0.set(key);
                streams.entries[len].1.set(stream as usize);
                streams.len.set(len + 1);
                Ok(std::ptr::null_mut())
            }
        }
    })
}

/// `current_work_stream` of dlpx's table and of the synthetic ones: the calling thread's current
/// stream (NULL for CPU and until one is set). Never touches Python; errors go to
/// `dlpx_last_error()`.
///
/// # Safety
/// The table's contract: `out` is NULL or writable.
pub unsafe extern "C" fn current_work_stream_entry(
    device_type: DeviceType,
    device_id: i32,
    out: *mut *mut c_void,
) -> c_int {
    if out.is_null() {
        // SAFETY: forwarded contract.
        return unsafe { current_work_stream_checked(device_type, device_id, out) };
    }
    // Until some thread sets a stream, every device has its default stream: answered here, with
    // no stack frame. Otherwise the thread-local lookup (which finds none for the CPU: no entry
    // point lets one be set), a tail call that cannot panic (so no boundary).
    if !ever_set() {
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { out.write(std::ptr::null_mut()) };
        return 0;
    }
    // SAFETY: as above.
    unsafe { current_work_stream_lookup(device_type, device_id, out) }
}

#[inline(never)]
unsafe extern "C" fn current_work_stream_lookup(
    device_type: DeviceType,
    device_id: i32,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: non-NULL and writable, checked by the caller.
    unsafe { out.write(current(DLDevice { device_type, device_id })) };
    0
}

/// Never touches Python: tvm-ffi calls it with the GIL released. Errors go to dlpx_last_error().
#[cold]
unsafe extern "C" fn current_work_stream_checked(
    device_type: DeviceType,
    device_id: i32,
    out: *mut *mut c_void,
) -> c_int {
    boundary(LastError, "current_work_stream", || {
        crate::error::out(out, "out_current_stream")?.put(current(DLDevice { device_type, device_id }));
        Ok(0)
    })
}

/// Whether this registry serves `table`'s `current_work_stream` (dlpx's table and the synthetic
/// ones): then [`current`] answers without the entry, and without the GIL.
pub fn serves(table: &DLPackExchangeAPI) -> bool {
    type Entry = unsafe extern "C" fn(DeviceType, i32, *mut *mut c_void) -> c_int;
    table.current_work_stream.is_some_and(|entry| std::ptr::fn_addr_eq(entry, current_work_stream_entry as Entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cuda(id: i32) -> DLDevice {
        DLDevice { device_type: DeviceType::CUDA, device_id: id }
    }

    #[test]
    fn streams_are_per_thread_and_per_device_and_restorable() {
        let s1 = 0x1000 as *mut c_void;
        assert_eq!(set_current(cuda(0), s1).unwrap(), std::ptr::null_mut());
        assert_eq!(current(cuda(0)), s1);
        assert_eq!(current(cuda(1)), std::ptr::null_mut(), "another device keeps its default");
        assert_eq!(current(DLDevice::CPU), std::ptr::null_mut());
        std::thread::spawn(|| assert_eq!(current(cuda(0)), std::ptr::null_mut(), "another thread too")).join().unwrap();
        assert_eq!(set_current(cuda(0), std::ptr::null_mut()).unwrap(), s1, "clearing returns the previous");
        assert!(!any_set());
    }

    #[test]
    fn a_thread_holds_streams_on_at_most_sixteen_devices() {
        std::thread::spawn(|| {
            for id in 0..MAX_STREAMS_PER_THREAD as i32 {
                set_current(cuda(id), 0x2000 as *mut c_void).unwrap();
            }
            let err = set_current(cuda(99), 0x2000 as *mut c_void).unwrap_err();
            assert!(err.fact().contains("at most 16 devices"), "{}", err.fact());
            // Removing one (the last moves into its slot) makes room, and the others keep theirs.
            set_current(cuda(3), std::ptr::null_mut()).unwrap();
            set_current(cuda(99), 0x3000 as *mut c_void).unwrap();
            assert_eq!(current(cuda(99)), 0x3000 as *mut c_void);
            assert_eq!(current(cuda(15)), 0x2000 as *mut c_void);
            assert_eq!(current(cuda(3)), std::ptr::null_mut());
        })
        .join()
        .unwrap();
    }
}
