//! The calling thread's current work streams, settable from C (docs/design.md, "Streams").

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;

use crate::abi::*;
use crate::error::LastError;
use crate::shell::entry::c_entry;

/// Makes `stream` the calling thread's current work stream on (`device_type`, `device_id`);
/// NULL restores the default. The previous stream is written to `*previous` when `previous`
/// is not NULL, so a caller can restore it. Returns 0, or -1 (see `dlpx_last_error()`) for a
/// CPU device, which has no streams, a device type DLPack does not name, a negative id, or a
/// 17th device with a stream set on this thread (a thread holds current streams on at most 16
/// devices; setting one back to NULL frees its place).
#[no_mangle]
pub extern "C" fn dlpx_set_current_stream(
    device_type: DeviceType,
    device_id: i32,
    stream: *mut c_void,
    previous: *mut *mut c_void,
) -> c_int {
    c_entry!(LastError, "set_current_stream", out(), || {
        let device = DLDevice { device_type, device_id };
        crate::devices::check_stream_settable(device)?;
        let old = crate::stream::set_current(device, stream)?;
        if let Some(previous) = NonNull::new(previous) {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { previous.as_ptr().write(old) };
        }
        Ok(0)
    })
}

/// The calling thread's current work stream on (`device_type`, `device_id`): NULL (the
/// default stream) when none was set, and always NULL for CPU. Returns 0, or -1 when `out` is
/// NULL. The same answer as the table's `current_work_stream`.
#[no_mangle]
pub extern "C" fn dlpx_get_current_stream(device_type: DeviceType, device_id: i32, out: *mut *mut c_void) -> c_int {
    c_entry!(LastError, "get_current_stream", out(out), || {
        out.put(crate::stream::current(DLDevice { device_type, device_id }));
        Ok(0)
    })
}
