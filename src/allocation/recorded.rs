//! The streams that used a tensor's memory, besides its allocation stream: recorded on the
//! tensor's header so that its free (or the reuse of pinned memory) waits for them (torch's
//! `record_stream`, done for the consumer streams dlpx hears of).

use std::ffi::c_void;
use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use super::{is_ours, Header};
use crate::abi::DLManagedTensorVersioned;
use crate::devices::{self, Device, Memory, Uses};

/// Records that work on the data of `managed` (a block from `allocate`; anything else is
/// ignored) is being ordered on `stream` of `device_id`: freeing the data then waits for that
/// stream's work, or reuse does (pinned memory).
///
/// # Safety
/// `managed` points to a live managed tensor (the header is reached through this pointer, so it
/// must carry the provenance of the whole block, not of a reference to the managed tensor).
pub unsafe fn record_use(managed: NonNull<DLManagedTensorVersioned>, device_id: i32, stream: *mut c_void) {
    // SAFETY: forwarded contract.
    let Some((header, device, memory)) = (unsafe { recorded_memory(managed) }) else { return };
    let home = header.managed.dl_tensor.device;
    if let Some(entry) = device.use_to_record(home, memory, device_id, stream) {
        with_uses(header, |uses| uses.add_stream(entry));
    }
}

/// Records that a consumer's work on the data of `managed` was enqueued on `stream` of
/// `device_id` and is now complete as far as the host knows (its export was released): an event
/// recorded there now, which the free (or pinned reuse) waits for. Unlike a recorded stream it
/// touches no stream handle later. `stream` must still be alive: a built-in stream (exports keep
/// no other, see `Device::outlives_its_consumer`).
///
/// # Safety
/// As for [`record_use`].
pub unsafe fn record_fence(managed: NonNull<DLManagedTensorVersioned>, device_id: i32, stream: *mut c_void) {
    // SAFETY: forwarded contract.
    let Some((header, device, memory)) = (unsafe { recorded_memory(managed) }) else { return };
    let home = header.managed.dl_tensor.device;
    let mut fenced = true;
    with_uses(header, |uses| fenced = device.fence(home, memory, uses, device_id, stream));
    if !fenced {
        // The stream is already gone: wait for the devices rather than free under a reader.
        device.synchronise(device_id);
        if home.device_id != device_id {
            device.synchronise(home.device_id);
        }
    }
}

/// The header, device and memory of one of our blocks whose memory came from the device seam;
/// None for anything else (nothing to record).
///
/// # Safety
/// As for [`record_use`].
unsafe fn recorded_memory<'a>(
    managed: NonNull<DLManagedTensorVersioned>,
) -> Option<(&'a Header, &'static dyn Device, Memory)> {
    // SAFETY: live, per the contract.
    if !is_ours(unsafe { managed.as_ref() }) {
        return None;
    }
    // SAFETY: ours, so `managed` is the first field of a live Header.
    let header = unsafe { &*managed.as_ptr().cast::<Header>() };
    let memory = header.memory?;
    let device = devices::of(header.managed.dl_tensor.device.device_type)?;
    Some((header, device, memory))
}

/// Runs `f` on the header's use list, creating it on first use.
fn with_uses(header: &Header, f: impl FnOnce(&mut Uses)) {
    let mut uses = header.uses.load(Ordering::Acquire);
    if uses.is_null() {
        let fresh = Box::into_raw(Box::new(Mutex::new(Uses::default())));
        match header.uses.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => uses = fresh,
            Err(winner) => {
                // SAFETY: `fresh` lost the race and was never shared.
                drop(unsafe { Box::from_raw(fresh) });
                uses = winner;
            }
        }
    }
    // SAFETY: the list lives until the deleter, which cannot run while the caller holds the tensor.
    f(&mut unsafe { &*uses }.lock().unwrap_or_else(|p| p.into_inner()));
}
