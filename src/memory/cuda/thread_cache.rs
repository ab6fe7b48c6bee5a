//! Per-thread bins of idle device blocks, by device, stream and size class: the steady state of
//! allocate + free on one thread touches only its own bins (as the CPU allocator's per-thread
//! cache does), with no driver call and no lock another thread takes on its own hot path.
//!
//! Each thread's cache is registered, so that a release (empty_cache, out of memory, exit) can
//! empty every thread's bins and a statistics call can sum every thread's counts: the cache is
//! behind an [`OwnerLock`], which its owner enters without an atomic read-modify-write. A
//! thread that exits gives its blocks to the device's shared idle list (`idle`).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::block::{Block, StreamKey};
use super::classes::{CLASSES, MAX_DEVICES};
use super::idle;
use super::owner_lock::{self, OwnerLock};

/// Blocks kept per thread, stream and class before the rest go to the shared list.
const KEEP: usize = 16;

/// What one thread did with one device's blocks (summed over threads for statistics).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Counts {
    pub allocs: u64,
    pub alloc_bytes: u64,
    pub frees: u64,
    pub free_bytes: u64,
    /// Allocations served from a cached block without the driver, and those that were not.
    pub hits: u64,
    pub misses: u64,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.allocs += other.allocs;
        self.alloc_bytes += other.alloc_bytes;
        self.frees += other.frees;
        self.free_bytes += other.free_bytes;
        self.hits += other.hits;
        self.misses += other.misses;
    }
}

struct Stack {
    len: usize,
    blocks: [*const Block; KEEP],
}

struct Bin {
    device_id: i32,
    key: StreamKey,
    stacks: Box<[Stack]>,
}

struct Inner {
    bins: Vec<Bin>,
    /// The bin used last: a thread mostly works on one device and stream.
    last: usize,
    counts: Box<[Counts]>,
}

pub struct ThreadCache {
    /// Never reused (a per-thread stream key names it, and another thread's default stream is
    /// not this one's even if its cache lands at the same address).
    id: u64,
    inner: OwnerLock<Inner>,
}

// SAFETY: the block pointers in `Inner` are owned by the cache; any thread may take them over.
unsafe impl Send for Inner {}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static REGISTRY: Mutex<Vec<Arc<ThreadCache>>> = Mutex::new(Vec::new());
/// The counts of threads that exited.
static RETIRED: Mutex<Vec<(i32, Counts)>> = Mutex::new(Vec::new());

/// This thread's cache; registered on first use, emptied into the shared lists at thread exit.
struct Handle(Arc<ThreadCache>);

thread_local! {
    static MINE: Handle = Handle::new();
}

impl Handle {
    fn new() -> Handle {
        owner_lock::prepare();
        let inner = Inner { bins: Vec::new(), last: 0, counts: vec![Counts::default(); MAX_DEVICES].into() };
        let cache = Arc::new(ThreadCache { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), inner: OwnerLock::new(inner) });
        REGISTRY.lock().unwrap_or_else(|p| p.into_inner()).push(cache.clone());
        Handle(cache)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // The counts move to RETIRED under its lock, as `sum` reads both under it: a sum sees
        // them in one place or the other, never both or neither. The blocks move to the shared
        // list inside the owner's section, so a release sees them in the bins or in the list.
        let mut retired = RETIRED.lock().unwrap_or_else(|p| p.into_inner());
        self.0.with(|inner| {
            for (device_id, counts) in inner.counts.iter_mut().enumerate() {
                if *counts == Counts::default() {
                    continue;
                }
                match retired.iter_mut().find(|(d, _)| *d == device_id as i32) {
                    Some((_, total)) => total.add(counts),
                    None => retired.push((device_id as i32, *counts)),
                }
                *counts = Counts::default();
            }
            for block in take_blocks(inner, |_| true) {
                // SAFETY: taken out of the bins: this thread's alone.
                let b = unsafe { block.as_ref() };
                // This thread's default stream has no owner any more: the legacy stream waits for it.
                b.set_key(b.key().seen_from(0));
                idle::keep(block);
            }
        });
        drop(retired);
        REGISTRY.lock().unwrap_or_else(|p| p.into_inner()).retain(|c| !Arc::ptr_eq(c, &self.0));
    }
}

impl ThreadCache {
    /// The owner's access: only through `MINE`, on the thread that owns it.
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        // SAFETY: a thread cache is reached as an owner only through its thread's `MINE`, and
        // no function below calls back into the cache from inside `f`.
        unsafe { self.inner.owner(f) }
    }
}

impl Inner {
    #[inline]
    fn bin(&mut self, device_id: i32, key: StreamKey) -> Option<&mut Bin> {
        let last = self.last;
        if self.bins.get(last).is_some_and(|b| b.device_id == device_id && b.key == key) {
            return self.bins.get_mut(last);
        }
        let index = self.bins.iter().position(|b| b.device_id == device_id && b.key == key)?;
        self.last = index;
        self.bins.get_mut(index)
    }

    fn new_bin(&mut self, device_id: i32, key: StreamKey) -> &mut Bin {
        let stacks = (0..CLASSES).map(|_| Stack { len: 0, blocks: [std::ptr::null(); KEEP] }).collect();
        self.bins.push(Bin { device_id, key, stacks });
        self.last = self.bins.len() - 1;
        &mut self.bins[self.last]
    }
}

/// Counts an allocation of `bytes` of `class` on `stream` of `device_id` (a device below
/// [`MAX_DEVICES`]) and takes a cached block for it: the block (a hit), or the key a block for it
/// has (a miss).
#[inline]
pub fn take(device_id: i32, stream: usize, class: usize, bytes: usize) -> Result<NonNull<Block>, StreamKey> {
    let taken = MINE.try_with(|mine| {
        let key = StreamKey::of(stream, mine.0.id);
        mine.0.with(|inner| {
            let block = inner.bin(device_id, key).and_then(|bin| {
                let stack = &mut bin.stacks[class];
                stack.len = stack.len.checked_sub(1)?;
                NonNull::new(stack.blocks[stack.len].cast_mut())
            });
            let counts = &mut inner.counts[device_id as usize];
            counts.allocs += 1;
            counts.alloc_bytes += bytes as u64;
            match block {
                Some(_) => counts.hits += 1,
                None => counts.misses += 1,
            }
            block.ok_or(key)
        })
    });
    // A thread that is exiting has no cache: no thread of its own either.
    taken.unwrap_or(Err(StreamKey::of(stream, 0)))
}

/// Counts a free of `bytes` on `device_id` and, when `keep`, keeps `block` in this thread's bin
/// for its stream (another thread's per-thread stream is the legacy stream here). Returns the
/// block when it was not kept (not asked to, the bin is full, or the thread is exiting).
#[inline]
pub fn put(device_id: i32, bytes: usize, block: NonNull<Block>, keep: bool) -> Option<NonNull<Block>> {
    let kept = MINE.try_with(|mine| {
        mine.0.with(|inner| {
            let counts = &mut inner.counts[device_id as usize];
            counts.frees += 1;
            counts.free_bytes += bytes as u64;
            if !keep {
                return false;
            }
            // SAFETY: the caller holds the block: nobody frees it meanwhile.
            let block_ref = unsafe { block.as_ref() };
            let key = block_ref.key().seen_from(mine.0.id);
            block_ref.set_key(key);
            let bin = match inner.bin(device_id, key) {
                Some(bin) => bin,
                None => inner.new_bin(device_id, key),
            };
            let stack = &mut bin.stacks[block_ref.class];
            if stack.len == KEEP {
                return false;
            }
            stack.blocks[stack.len] = block.as_ptr();
            stack.len += 1;
            true
        })
    });
    match kept {
        Ok(true) => None,
        _ => Some(block),
    }
}

/// This thread's cache id; 0 while the thread exits (no per-thread stream is then its own).
pub fn thread_id() -> u64 {
    MINE.try_with(|mine| mine.0.id).unwrap_or(0)
}

/// Counts an allocation or a free that did not go through the bins (memory too large for a
/// class, or allocated while a stream was being captured).
pub fn count(device_id: i32, f: impl FnOnce(&mut Counts)) {
    if usize::try_from(device_id).is_ok_and(|d| d < MAX_DEVICES) {
        let _ = MINE.try_with(|mine| mine.0.with(|inner| f(&mut inner.counts[device_id as usize])));
    }
}

fn take_blocks(inner: &mut Inner, wanted: impl Fn(i32) -> bool) -> Vec<NonNull<Block>> {
    let mut out = Vec::new();
    for bin in inner.bins.iter_mut().filter(|b| wanted(b.device_id)) {
        for stack in bin.stacks.iter_mut() {
            out.extend(stack.blocks[..stack.len].iter().filter_map(|&b| NonNull::new(b.cast_mut())));
            stack.len = 0;
        }
    }
    out
}

/// Takes every idle block of the devices `wanted` out of every thread's bins. At exit (`patient`
/// false) a thread stopped inside its cache keeps its blocks.
pub fn drain_all(wanted: impl Fn(i32) -> bool, patient: bool) -> Vec<NonNull<Block>> {
    let mut out = Vec::new();
    visit(patient, |inner| out.extend(take_blocks(inner, &wanted)));
    out
}

/// Runs `f` on every registered thread's cache (none of them the caller's own from inside it).
fn visit(patient: bool, f: impl FnMut(&mut Inner)) {
    let caches: Vec<Arc<ThreadCache>> = REGISTRY.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let locks: Vec<&OwnerLock<Inner>> = caches.iter().map(|c| &c.inner).collect();
    owner_lock::visit_all(&locks, patient, f);
}

/// Every thread's counts for `device_id`, with those of threads that exited.
pub fn sum(device_id: i32) -> Counts {
    let retired = RETIRED.lock().unwrap_or_else(|p| p.into_inner());
    let mut total = retired.iter().find(|(d, _)| *d == device_id).map_or(Counts::default(), |(_, c)| *c);
    let Some(index) = usize::try_from(device_id).ok().filter(|&d| d < MAX_DEVICES) else { return total };
    visit(true, |inner| total.add(&inner.counts[index]));
    total
}
