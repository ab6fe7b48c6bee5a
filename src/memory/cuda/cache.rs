//! The block cache in front of the driver's pool (docs/cuda.md, "The CUDA block cache").
//!
//! The allocator's two stories, each in one function. The allocation ([`alloc_device`], then
//! [`climb`]) is a ladder: an idle block of its device, stream and class from the thread's bins
//! (no driver call, no shared lock), else from the device's shared lists (`idle`), else the
//! driver, retried after giving idle blocks back, then after synchronising. The free
//! ([`free_device`]) is one choice: a block used on other streams is kept until events recorded
//! after those uses complete; else it goes to the thread's bin for its stream (stream order
//! makes a reuse there safe at once), or to the shared list when the bin is full; beyond the
//! cap, to the driver. Memory larger than the largest class, memory allocated while its stream
//! is being captured into a CUDA graph, and memory of a device without a cache go to the driver
//! and back.

use std::ffi::c_void;
use std::ptr::NonNull;

use super::block::{Block, StreamKey};
use super::classes::{class_bytes, class_of, settings, Fault, MAX_DEVICES};
use super::deferred::{self, capturing, flush};
use super::device::{no_memory, on_device, synchronise_context, synchronise_device};
use super::driver::{self, Wait, STREAM_LEGACY, STREAM_PER_THREAD};
use super::events::{enqueue_wait, record_event};
use super::pool::{self, driver_free};
use super::thread_cache::{self, Put};
use super::uses::{Fence, Uses};
use super::{accounting, idle, release};
use crate::error::{Error, Result};

/// Device memory handed to a tensor: the address, the block it is (0: memory straight from the
/// driver) and the word its free presents (the block's state; the size for driver memory).
#[derive(Clone, Copy, Debug)]
pub struct Grant {
    pub ptr: *mut c_void,
    pub block: usize,
    pub word: u64,
}

/// `nbytes` (> 0) of device memory on `device_id`, ordered on `stream`: a block of its size
/// class from this thread's bins (no driver call, no lock another thread takes on its own hot
/// path), else the rest of the ladder ([`climb`]). Memory larger than the largest class, memory
/// on a stream being captured into a CUDA graph, and memory of a device without a cache climb
/// straight to the driver.
#[inline]
pub fn alloc_device(device_id: i32, nbytes: usize, stream: *mut c_void) -> Result<Grant> {
    let class = match class_of(nbytes) {
        Some(class) if cached_device(device_id) => class,
        _ => return climb(device_id, nbytes, None, stream),
    };
    // The legacy stream cannot be captured into a graph; any other may be.
    if !matches!(stream as usize, 0 | STREAM_LEGACY) && captured(device_id, stream)? {
        return climb(device_id, nbytes, None, stream);
    }
    let bytes = class_bytes(class);
    match thread_cache::take(device_id, stream as usize, class, bytes) {
        // Counted as a hit inside the bins' section.
        Ok(block) => Ok(hand_out(block)),
        Err(key) => climb(device_id, bytes, Some((key, class)), stream),
    }
}

/// The ladder below the thread's bins, as torch's `malloc` states it: for a size class, a block
/// of the device's idle lists (`class`: its stream key and class); else `nbytes` from the
/// driver; when the driver is out of memory, again after the cache's idle blocks and the pool's
/// free memory went back to it (others may hold the rest); once more, when blocks went back,
/// after the device finished their frees (they are stream-ordered); then MemoryError, naming
/// the size.
#[cold]
fn climb(device_id: i32, nbytes: usize, class: Option<(StreamKey, usize)>, stream: *mut c_void) -> Result<Grant> {
    if let Some((key, class)) = class {
        let driver = driver::get()?;
        // No event is queried while a capture dlpx knows of may be underway (a query breaks it).
        let quiet = !deferred::any();
        if let Some(block) = idle::take(driver, device_id, key, class, quiet) {
            return Ok(hand_out_missed(block));
        }
        if let Some(block) = quiet.then(|| from_the_legacy_stream(driver, device_id, key, class)).flatten() {
            return Ok(hand_out_missed(block));
        }
    }
    let from_driver = on_device(device_id, |driver, state| {
        // An allocation on `stream`: its owner vouches for it.
        flush(driver, state, device_id, deferred::Vouched::Stream(stream as usize));
        if let Some(ptr) = pool::allocate(driver, state, device_id, nbytes, stream)? {
            return Ok(ptr);
        }
        accounting::retried(device_id);
        if capture_underway(driver, stream) {
            // Nothing may wait for the device or work on the legacy stream while a capture runs
            // (either breaks it; torch releases no cached block then either): only the pool's
            // memory no block holds goes back, and then the request is refused.
            pool::trim(driver, state);
            if let Some(ptr) = pool::allocate(driver, state, device_id, nbytes, stream)? {
                return Ok(ptr);
            }
            accounting::ran_out(device_id);
            return Err(no_memory(nbytes, device_id));
        }
        let released = release::release_device(driver, state, device_id, Wait::Hooked).unwrap_or(0);
        pool::trim(driver, state);
        if let Some(ptr) = pool::allocate(driver, state, device_id, nbytes, stream)? {
            return Ok(ptr);
        }
        if released > 0 {
            accounting::synchronised(device_id);
            synchronise_context(driver);
            pool::trim(driver, state);
            if let Some(ptr) = pool::allocate(driver, state, device_id, nbytes, stream)? {
                return Ok(ptr);
            }
        }
        accounting::ran_out(device_id);
        Err(no_memory(nbytes, device_id))
    });
    let ptr = match from_driver {
        Ok(ptr) => ptr,
        Err(err) => {
            if class.is_some() {
                thread_cache::count(device_id, accounting::refused);
            }
            return Err(err);
        }
    };
    let Some((key, class)) = class else {
        thread_cache::count(device_id, |c| accounting::handed_out_uncached(c, device_id, nbytes));
        return Ok(Grant { ptr, block: 0, word: nbytes as u64 });
    };
    release::register_exit_hook();
    let block = Box::new(Block::new(ptr as usize, device_id, class, key));
    Ok(hand_out_missed(NonNull::from(Box::leak(block))))
}

/// Whether a capture into a CUDA graph may be underway, as `climb` asks it after the driver ran
/// out: `stream`'s own (the context current), or one dlpx knows of (a free it put off).
fn capture_underway(driver: &driver::Driver, stream: *mut c_void) -> bool {
    captured_in_context(driver, stream) || deferred::any()
}

/// For an allocation on a thread's default stream (`key`), an idle block kept for the legacy
/// stream, the thread's stream made to wait first for the legacy stream's work so far (an event
/// recorded there, waited for). The uses of such a block not recorded were on built-in streams,
/// every one of which the legacy stream waits for: an event recorded on it completes after them.
/// Blocks of exited threads are kept for the legacy stream (`idle::retire_thread`): without this,
/// a pool of short-lived threads each allocating on its own default stream grew the cache by
/// what each allocated. Not while a capture dlpx knows of may be underway (nothing may wait on
/// the legacy stream then); the block stays where it was when the wait cannot be enqueued.
fn from_the_legacy_stream(
    driver: &driver::Driver,
    device_id: i32,
    key: StreamKey,
    class: usize,
) -> Option<NonNull<Block>> {
    if key.stream != STREAM_PER_THREAD {
        return None;
    }
    let block = idle::take(driver, device_id, StreamKey::LEGACY, class, true)?;
    let waited = on_device(device_id, |driver, state| enqueue_wait(driver, state, STREAM_LEGACY, STREAM_PER_THREAD));
    if waited.is_err() {
        idle::keep(block);
        return None;
    }
    // SAFETY: an idle block taken from the list: nobody else holds it.
    unsafe { block.as_ref() }.set_key(key);
    Some(block)
}

/// Whether `device_id` has a cache now.
#[inline]
fn cached_device(device_id: i32) -> bool {
    settings().cap > 0 && usize::try_from(device_id).is_ok_and(|d| d < MAX_DEVICES) && !release::exited()
}

/// Whether `stream` is being captured into a CUDA graph: memory allocated there belongs to the
/// graph (the driver makes it a graph allocation) and never mixes with the cache's.
fn captured(device_id: i32, stream: *mut c_void) -> Result<bool> {
    match stream as usize {
        // The per-thread default stream is the current context's: ask with the device's current.
        STREAM_PER_THREAD => on_device(device_id, |driver, _| Ok(captured_in_context(driver, stream))),
        _ => Ok(captured_in_context(driver::get()?, stream)),
    }
}

/// [`captured`], the stream's context current (or `stream` a created one); never the legacy
/// stream, which cannot be captured.
fn captured_in_context(driver: &driver::Driver, stream: *mut c_void) -> bool {
    !matches!(stream as usize, 0 | STREAM_LEGACY)
        && settings().fault != Fault::IgnoreCapture
        && capturing(driver, stream as usize)
}

/// Hands an idle block the caller took from the cache to a tensor (counted by the caller).
#[inline]
fn hand_out(block: NonNull<Block>) -> Grant {
    // SAFETY: an idle block the caller took from the cache: nobody else holds it.
    let b = unsafe { block.as_ref() };
    let word = b.hand_out();
    Grant { ptr: b.ptr as *mut c_void, block: block.as_ptr() as usize, word }
}

/// Hands out a block for a miss of the thread's bins (from the device's shared lists or the
/// driver), counted as one.
fn hand_out_missed(block: NonNull<Block>) -> Grant {
    // SAFETY: as for `hand_out`.
    let b = unsafe { block.as_ref() };
    thread_cache::count(b.device_id, |c| accounting::missed(c, b.device_id, b.bytes()));
    hand_out(block)
}

/// Frees memory from [`alloc_device`], the one choice: memory straight from the driver back to
/// it; a block used on other streams kept until events recorded there complete; else the
/// thread's bin for its stream, the device's shared list when the bin is full, or — beyond the
/// cap, after the exit hook, or during a capture of its stream — the driver, on `stream`, its
/// allocation stream (as recorded), after the streams in `uses`.
///
/// # Safety
/// `grant` came from `alloc_device(device_id, …)`, `stream` is its recorded allocation stream,
/// and the memory is not used afterwards.
#[inline]
pub unsafe fn free_device(device_id: i32, grant: Grant, stream: *mut c_void, uses: Uses) -> Result<()> {
    let Some(block) = NonNull::new(grant.block as *mut Block) else {
        // SAFETY: per the contract.
        return unsafe { free_uncached(device_id, grant, stream, uses) };
    };
    // SAFETY: a block record lives until the driver gets its memory back, which only happens
    // while the cache holds it; the state check below refuses a block this tensor gave back.
    let b = unsafe { block.as_ref() };
    if b.ptr != grant.ptr as usize || b.device_id != device_id || !b.take_back(grant.word) {
        return Err(freed_twice(device_id, grant.ptr));
    }
    // The idle bytes the cache may keep: none after the exit hook, nor during a capture of the
    // block's stream: such a free is put off until the capture ends (the driver's path does
    // that, as before the cache), so a release meanwhile knows of the capture and leaves it
    // alone. Asking names the stream, which the tensor's owner keeps alive until this free;
    // nothing names it after.
    let cap = match release::exited() || freed_while_captured(device_id, b.key()) {
        true => None,
        false => Some(settings().cap),
    };
    let used_elsewhere = !(uses.streams.is_empty() && uses.fences.is_empty()) && settings().fault != Fault::IgnoreUses;
    if let Some(cap) = cap.filter(|_| used_elsewhere) {
        return free_used_elsewhere(device_id, block, cap, stream, uses);
    }
    match thread_cache::put(device_id, block, cap) {
        Put::Kept => Ok(()),
        Put::Full(block) => {
            // A full bin, or a thread that is exiting: the device's shared list keeps it.
            b.set_key(b.key().seen_from(thread_cache::thread_id()));
            idle::keep(block);
            Ok(())
        }
        // Beyond the cap, after the exit hook, or during a capture of its stream: back to the
        // driver, after the streams that used it.
        // SAFETY: per the contract.
        Put::Unfit(block) => unsafe { give_to_driver(device_id, block, stream, uses) },
    }
}

/// Whether work this thread enqueued on `stream` is done, in the device's order, before a reuse
/// of the memory `block` (a grant's) gave: [`StreamKey::comes_after`] of its block's key, or,
/// for memory outside the cache, whether `stream` is the one it was allocated on (`allocated`,
/// as recorded: its free is ordered there).
pub fn reuse_comes_after(block: usize, allocated: usize, stream: usize) -> bool {
    match NonNull::new(block as *mut Block) {
        // SAFETY: a block record lives while a tensor holds its memory (the caller's does).
        Some(block) => unsafe { block.as_ref() }.key().comes_after(stream, thread_cache::thread_id()),
        None => driver::same_stream(allocated, driver::as_recordable(stream as *mut c_void) as usize),
    }
}

/// Gives a block the cache does not keep back to the driver, on `stream` after the streams in
/// `uses`.
///
/// # Safety
/// As for [`free_device`]; `block` is the caller's alone now.
#[cold]
unsafe fn give_to_driver(device_id: i32, block: NonNull<Block>, stream: *mut c_void, uses: Uses) -> Result<()> {
    // SAFETY: the block is the caller's alone; made by `Box::leak`.
    let block = unsafe { Box::from_raw(block.as_ptr()) };
    // SAFETY: per the contract, the memory is the block's and nobody uses it.
    unsafe { driver_free(device_id, block.ptr as *mut c_void, block.bytes(), stream, uses) }
}

/// Whether the stream of `key` is being captured into a graph now (the legacy stream cannot
/// be; another thread's default stream is the legacy stream here).
#[inline]
fn freed_while_captured(device_id: i32, key: StreamKey) -> bool {
    let key = key.seen_from(thread_cache::thread_id());
    key.stream != STREAM_LEGACY && captured(device_id, key.stream as *mut c_void).unwrap_or(false)
}

#[cold]
fn freed_twice(device_id: i32, ptr: *mut c_void) -> Error {
    Error::runtime(format!("CUDA memory at {ptr:p} on device {device_id} was freed twice (the second free is ignored)"))
}

/// # Safety
/// As for [`free_device`], for memory straight from the driver.
#[cold]
unsafe fn free_uncached(device_id: i32, grant: Grant, stream: *mut c_void, uses: Uses) -> Result<()> {
    let nbytes = grant.word as usize;
    thread_cache::count(device_id, |c| accounting::taken_back_uncached(c, device_id, nbytes));
    // SAFETY: per the contract.
    unsafe { driver_free(device_id, grant.ptr, nbytes, stream, uses) }
}

/// Frees a block used on other streams: kept until events recorded there now have completed
/// when the idle bytes then are within `cap` (a fenced free), else back to the driver after
/// those streams.
///
/// # Safety
/// As for [`free_device`]; the caller took the block back.
#[cold]
unsafe fn free_used_elsewhere(
    device_id: i32,
    block: NonNull<Block>,
    cap: u64,
    stream: *mut c_void,
    uses: Uses,
) -> Result<()> {
    // SAFETY: the caller took the block back: it is this thread's alone.
    let bytes = unsafe { block.as_ref() }.bytes();
    match thread_cache::count(device_id, |c| accounting::fenced(c, device_id, bytes, cap)) {
        true => keep_fenced(block, uses),
        // SAFETY: per the contract.
        false => unsafe { give_to_driver(device_id, block, stream, uses) },
    }
}

/// Keeps a block used on other streams until events recorded there now have completed (those
/// of fences recorded earlier too). A stream that is gone (its event cannot be recorded) is
/// waited for by synchronising its device, rather than the block reused under a reader.
fn keep_fenced(block: NonNull<Block>, uses: Uses) -> Result<()> {
    // SAFETY: the caller took the block back: it is this thread's alone.
    let b = unsafe { block.as_ref() };
    b.set_key(b.key().seen_from(thread_cache::thread_id()));
    let mut fences = uses.fences;
    let mut first_error = Ok(());
    for &(used_device, used_on) in &uses.streams {
        match on_device(used_device, |driver, state| record_event(driver, state, used_on)) {
            Ok(event) => fences.push(Fence { device_id: used_device, stream: used_on, event }),
            Err(err) => {
                synchronise_device(used_device);
                first_error = first_error.and(Err(err));
            }
        }
    }
    match fences.is_empty() {
        true => idle::keep(block),
        false => idle::keep_fenced(block, fences),
    }
    first_error
}
