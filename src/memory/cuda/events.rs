//! Events: a per-device pool of them, fences that mark where a consumer's work on memory
//! ended, and ordering one stream after another (an event, never a device synchronisation).

use std::ffi::c_void;

use cudarc::driver::sys::{CUcontext, CUdevice, CUevent, CUstream};

use super::device::{device_state, on_device, with_context, DeviceState, EVENT_POOL_SIZE};
use super::driver::{self, check, same_stream, Driver};
use super::uses::{Fence, Uses};
use crate::error::Result;

/// CU_EVENT_DISABLE_TIMING: ordering events need no timestamps, and are cheaper without.
const EVENT_DISABLE_TIMING: u32 = 0x2;

/// Fences the work enqueued so far on `stream` of `device_id` in `uses`: one event per stream,
/// recorded again for a later use (a later point of one stream covers the earlier ones). False
/// when the stream is gone (the reason in `dlpx_last_error()`).
pub fn fence(uses: &mut Uses, device_id: i32, stream: *mut c_void) -> bool {
    let stream = stream as usize;
    let existing = uses.fences.iter().find(|f| f.device_id == device_id && f.stream == stream).map(|f| f.event);
    let recorded = on_device(device_id, |driver, state| match existing {
        Some(event) => {
            // SAFETY: an event of this device's context and a stream of it.
            check(driver, "cuEventRecord", unsafe { (driver.cuEventRecord)(event as CUevent, stream as CUstream) })
                .map(|()| event)
        }
        None => record_event(driver, state, stream),
    });
    match recorded {
        Ok(event) if existing.is_none() => uses.fences.push(Fence { device_id, stream, event }),
        Ok(_) => {}
        Err(err) => {
            crate::error::set_last_error(&err.at("deleter"));
            return false;
        }
    }
    true
}

pub(super) fn fences_done(driver: &Driver, fences: &[Fence]) -> bool {
    // SAFETY: events dlpx created and has not destroyed.
    fences.iter().all(|f| unsafe { (driver.cuEventQuery)(f.event as CUevent) } == driver::CUDA_SUCCESS)
}

/// Gives fences' events back to their devices' pools (or to the driver when a pool is full).
pub(super) fn release_fences(driver: &Driver, fences: &[Fence]) {
    for &Fence { device_id, event, .. } in fences {
        match device_state(device_id) {
            Some(state) => release_event(driver, state, event),
            None => {
                // SAFETY: an event dlpx created, destroyed once.
                unsafe { (driver.cuEventDestroy_v2)(event as CUevent) };
            }
        }
    }
}

/// An event recorded on `stream`, from the device's pool when it has one (the device's context
/// is current).
pub(super) fn record_event(driver: &Driver, state: &DeviceState, stream: usize) -> Result<usize> {
    let pooled = state.events.lock().unwrap_or_else(|p| p.into_inner()).pop();
    let event = match pooled {
        Some(event) => event,
        None => {
            let mut event: CUevent = std::ptr::null_mut();
            // SAFETY: a valid out pointer, with the device's context current.
            check(driver, "cuEventCreate", unsafe { (driver.cuEventCreate)(&mut event, EVENT_DISABLE_TIMING) })?;
            event as usize
        }
    };
    // SAFETY: an event of the current context and a stream of its device.
    let recorded = unsafe { (driver.cuEventRecord)(event as CUevent, stream as CUstream) };
    if let Err(err) = check(driver, "cuEventRecord", recorded) {
        release_event(driver, state, event);
        return Err(err);
    }
    Ok(event)
}

/// Returns an event to its device's pool. Re-recording it later does not disturb waits already
/// enqueued: a wait uses the record current when the wait was enqueued.
pub(super) fn release_event(driver: &Driver, state: &DeviceState, event: usize) {
    let mut pool = state.events.lock().unwrap_or_else(|p| p.into_inner());
    if pool.len() < EVENT_POOL_SIZE {
        pool.push(event);
        return;
    }
    drop(pool);
    // SAFETY: an event dlpx created, destroyed once.
    unsafe { (driver.cuEventDestroy_v2)(event as CUevent) };
}

/// Makes `consumer` wait for the work enqueued so far on `producer` (current context's device).
pub(super) fn enqueue_wait(driver: &Driver, state: &DeviceState, producer: usize, consumer: usize) -> Result<()> {
    let event = record_event(driver, state, producer)?;
    // SAFETY: an event just recorded and a stream (any device may wait on it).
    let waited = check(driver, "cuStreamWaitEvent", unsafe {
        (driver.cuStreamWaitEvent)(consumer as CUstream, event as CUevent, 0)
    });
    release_event(driver, state, event);
    waited
}

/// Makes `consumer` (a stream of the current context's device) wait for the work enqueued so far
/// on `producer`, a stream of peer device `peer` (a kernel there reading this device's memory):
/// the event is recorded in the peer's context; a wait may cross devices.
pub(super) fn wait_for_peer(driver: &Driver, peer: i32, producer: usize, consumer: usize) -> Result<()> {
    let (peer_state, event) =
        on_device(peer, |driver, peer_state| Ok((peer_state, record_event(driver, peer_state, producer)?)))?;
    // SAFETY: a recorded event and a stream of the current context.
    let waited = check(driver, "cuStreamWaitEvent", unsafe {
        (driver.cuStreamWaitEvent)(consumer as CUstream, event as CUevent, 0)
    });
    release_event(driver, peer_state, event);
    waited
}

/// Makes `consumer` wait for the work enqueued so far on `producer` (an event, never a device
/// synchronisation). Equal streams need nothing.
pub fn order_after(device_id: i32, producer: *mut c_void, consumer: *mut c_void) -> Result<()> {
    if same_stream(producer as usize, consumer as usize) {
        return Ok(());
    }
    on_device(device_id, |driver, state| enqueue_wait(driver, state, producer as usize, consumer as usize))
}

/// [`order_after`] for a `producer` another framework named, which may be a stream of another
/// device than the memory's, `device_id` (a CUDA array interface's `stream`: a peer kernel
/// writing this device's memory): its event is recorded in the stream's own context, which the
/// driver is asked for (a call [`order_after`] spares the streams dlpx knows the device of).
pub fn order_after_foreign(device_id: i32, producer: *mut c_void, consumer: *mut c_void) -> Result<()> {
    if driver::is_built_in(producer) || same_stream(producer as usize, consumer as usize) {
        return order_after(device_id, producer, consumer);
    }
    let driver = driver::get()?;
    let mut context: CUcontext = std::ptr::null_mut();
    // SAFETY: a stream handle its owner vouches for (the interface's producer), a writable out.
    check(driver, "cuStreamGetCtx", unsafe { (driver.cuStreamGetCtx)(producer as CUstream, &mut context) })?;
    let mut owner: CUdevice = 0;
    // SAFETY: the stream's context, current only for the question, popped by `with_context`.
    with_context(driver, context, || check(driver, "cuCtxGetDevice", unsafe { (driver.cuCtxGetDevice)(&mut owner) }))?;
    match owner == device_id {
        true => order_after(device_id, producer, consumer),
        false => on_device(device_id, |driver, _| wait_for_peer(driver, owner, producer as usize, consumer as usize)),
    }
}
