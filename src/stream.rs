//! The per-thread current work stream of each (device type, device id).
//!
//! `current_work_stream` must answer in a few nanoseconds, so the registry is a small
//! thread-local array searched linearly: a thread works with a handful of devices at most.

use std::cell::RefCell;
use std::ffi::c_void;

use crate::abi::{DLDevice, DeviceType};

thread_local! {
    static CURRENT: RefCell<Vec<(DLDevice, *mut c_void)>> = const { RefCell::new(Vec::new()) };
}

/// This thread's current stream on `device`; NULL (the default stream) when none was set.
#[inline]
pub fn current(device: DLDevice) -> *mut c_void {
    if device.device_type == DeviceType::CPU {
        return std::ptr::null_mut();
    }
    CURRENT
        .try_with(|streams| {
            streams.borrow().iter().find(|(d, _)| *d == device).map_or(std::ptr::null_mut(), |&(_, s)| s)
        })
        .unwrap_or(std::ptr::null_mut())
}

/// Whether this thread has set any stream (else every device uses its default stream).
#[inline]
pub fn any_set() -> bool {
    CURRENT.try_with(|streams| !streams.borrow().is_empty()).unwrap_or(false)
}

/// Makes `stream` this thread's current stream on `device` (NULL clears it) and returns the
/// previous one, so a caller can restore it.
pub fn set_current(device: DLDevice, stream: *mut c_void) -> *mut c_void {
    CURRENT.with(|streams| {
        let mut streams = streams.borrow_mut();
        let previous = match streams.iter().position(|(d, _)| *d == device) {
            Some(i) if stream.is_null() => streams.swap_remove(i).1,
            Some(i) => std::mem::replace(&mut streams[i].1, stream),
            None if stream.is_null() => std::ptr::null_mut(),
            None => {
                streams.push((device, stream));
                std::ptr::null_mut()
            }
        };
        previous
    })
}
