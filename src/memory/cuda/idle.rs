//! Idle blocks outside any thread's bins, per device: those a full bin or an exiting thread gave
//! up (reusable on their stream at once), and those used on other streams, held back until the
//! events recorded after those uses have completed (checked with cuEventQuery, never waited for).
//! Reached only on a thread's miss, a release and statistics: a mutex per device.

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::Mutex;

use super::block::{Block, StreamKey};
use super::classes::MAX_DEVICES;
use super::driver::{Driver, STREAM_PER_THREAD};
use super::events::{fences_done, release_fences};
use super::uses::Fence;

/// A block used on other streams, and the events that mark the end of those uses.
pub struct Fenced {
    pub block: NonNull<Block>,
    pub fences: Vec<Fence>,
}

#[derive(Default)]
struct IdleLists {
    /// By (stream, thread, class): reusable on that stream now.
    ready: HashMap<(usize, u64, usize), Vec<NonNull<Block>>>,
    fenced: Vec<Fenced>,
}

// SAFETY: the blocks are owned by the list (heap records any thread may free); the mutex orders
// every access.
unsafe impl Send for IdleLists {}

static SHARED: [Mutex<Option<IdleLists>>; MAX_DEVICES] = [const { Mutex::new(None) }; MAX_DEVICES];

fn with<R>(device_id: i32, f: impl FnOnce(&mut IdleLists) -> R) -> R {
    let mut shared = SHARED[device_id as usize].lock().unwrap_or_else(|p| p.into_inner());
    f(shared.get_or_insert_with(IdleLists::default))
}

/// Keeps an idle block, reusable at once on its stream.
pub fn keep(block: NonNull<Block>) {
    // SAFETY: the caller gives the block up to the list.
    let b = unsafe { block.as_ref() };
    let key = b.key();
    with(b.device_id, |s| s.ready.entry((key.stream, key.thread, b.class)).or_default().push(block));
}

/// Gives the idle blocks kept for the default stream of `thread` (a thread cache's id), ready or
/// fenced, to the legacy stream, which waits for it: the thread exits, and no other thread's
/// default stream is its (they were stranded: no allocation could take them).
pub fn retire_thread(thread: u64) {
    let theirs = StreamKey { stream: STREAM_PER_THREAD, thread };
    for shared in &SHARED {
        let mut shared = shared.lock().unwrap_or_else(|p| p.into_inner());
        let Some(s) = shared.as_mut() else { continue };
        let keys: Vec<_> =
            s.ready.keys().filter(|&&(stream, t, _)| (stream, t) == (theirs.stream, thread)).copied().collect();
        for key in keys {
            let blocks = s.ready.remove(&key).unwrap_or_default();
            for &block in &blocks {
                // SAFETY: listed blocks are alive; the list's lock is held.
                unsafe { block.as_ref() }.set_key(StreamKey::LEGACY);
            }
            s.ready.entry((StreamKey::LEGACY.stream, StreamKey::LEGACY.thread, key.2)).or_default().extend(blocks);
        }
        for f in &s.fenced {
            // SAFETY: as above.
            let b = unsafe { f.block.as_ref() };
            if b.key() == theirs {
                b.set_key(StreamKey::LEGACY);
            }
        }
    }
}

/// Keeps a block used on other streams until `fences` have completed.
pub fn keep_fenced(block: NonNull<Block>, fences: Vec<Fence>) {
    // SAFETY: as in `keep`.
    let device_id = unsafe { block.as_ref() }.device_id;
    with(device_id, |s| s.fenced.push(Fenced { block, fences }));
}

/// An idle block of `class` for `key` on `device_id`: one ready, else (when `query`) one whose
/// fences have all completed (their events go back to the event pools).
pub fn take(driver: &Driver, device_id: i32, key: StreamKey, class: usize, query: bool) -> Option<NonNull<Block>> {
    let (block, fences) = with(device_id, |s| {
        if let Some(block) = s.ready.get_mut(&(key.stream, key.thread, class)).and_then(Vec::pop) {
            return Some((block, Vec::new()));
        }
        if !query {
            return None;
        }
        let index = s.fenced.iter().position(|f| {
            // SAFETY: listed blocks are alive.
            let b = unsafe { f.block.as_ref() };
            b.class == class && b.key() == key && fences_done(driver, &f.fences)
        })?;
        let Fenced { block, fences } = s.fenced.swap_remove(index);
        Some((block, fences))
    })?;
    release_fences(driver, &fences);
    Some(block)
}

/// Takes every idle block of `device_id` out: the ready ones, and the fenced ones with their
/// fences.
pub fn drain(device_id: i32) -> (Vec<NonNull<Block>>, Vec<Fenced>) {
    with(device_id, |s| (s.ready.drain().flat_map(|(_, blocks)| blocks).collect(), std::mem::take(&mut s.fenced)))
}

/// Idle blocks kept for `device_id`: (ready, fenced).
pub fn count(device_id: i32) -> (usize, usize) {
    with(device_id, |s| (s.ready.values().map(Vec::len).sum(), s.fenced.len()))
}
