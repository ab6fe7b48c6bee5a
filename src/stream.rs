//! The per-thread current work stream of each (device type, device id).
//!
//! `current_work_stream` must answer in a few nanoseconds, so the registry is a small
//! thread-local table of cells, searched linearly: a thread works with a handful of devices.
//! It has no destructor, so reaching it costs only the thread-local address lookup.

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::abi::{DLDevice, DeviceType};
use crate::error::{Error, Result};

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
    if device.device_type == DeviceType::CPU || !EVER_SET.load(Ordering::Relaxed) {
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
/// previous one, so a caller can restore it.
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
