//! Per-thread bins of idle device blocks, by device, stream and size class: the steady state of
//! allocate + free on one thread touches only its own bins (as the CPU allocator's per-thread
//! cache does), with no driver call and no lock another thread takes on its own hot path.
//!
//! Each thread's cache is registered, so that a release (empty_cache, out of memory, exit) can
//! empty every thread's bins and a statistics call can sum every thread's counts: the cache is
//! behind an [`OwnerLock`], which its owner enters without an atomic read-modify-write. A
//! thread that exits gives its blocks to the device's shared idle list (`idle`).
//!
//! The thread's [`Counts`] live here, beside its bins, but `accounting` writes them: a hit and a
//! free are counted by one call there from inside the section [`take`] and [`put`] hold (the
//! thread's counts and the device's at once), the other paths through [`count`].

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::accounting::{self, Counts};
use super::block::{Block, StreamKey};
use super::classes::{CLASSES, MAX_DEVICES};
use super::idle;
use super::owner_lock::{self, OwnerLock};

/// Blocks kept per thread, stream and class before the rest go to the shared list.
const KEEP: usize = 16;

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
                let counts = std::mem::take(counts);
                if counts == Counts::default() {
                    continue;
                }
                match retired.iter_mut().find(|(d, _)| *d == device_id as i32) {
                    Some((_, total)) => total.add(&counts),
                    None => retired.push((device_id as i32, counts)),
                }
            }
            for block in take_blocks(inner, |_| true) {
                // SAFETY: taken out of the bins: this thread's alone.
                let b = unsafe { block.as_ref() };
                // This thread's default stream has no owner any more: the legacy stream waits for it.
                b.set_key(b.key().seen_from(0));
                idle::keep(block);
            }
            // And those its full bins gave the shared lists.
            idle::retire_thread(self.0.id);
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

/// Takes a cached block of `class` on `stream` of `device_id` (a device below [`MAX_DEVICES`])
/// for an allocation of `bytes`: the block, counted as a hit ([`accounting::hit`]), or the key a
/// block for it has (a miss, counted by the rest of the ladder with what served it).
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
            let block = block.ok_or(key)?;
            accounting::hit(&mut inner.counts[device_id as usize], device_id, bytes);
            Ok(block)
        })
    });
    // A thread that is exiting has no cache: no thread of its own either.
    taken.unwrap_or(Err(StreamKey::of(stream, 0)))
}

/// Where a freed block went.
pub enum Put {
    /// Into this thread's bin for its stream.
    Kept,
    /// Nowhere yet, though it fits the cap: the bin is full, or the thread is exiting.
    Full(NonNull<Block>),
    /// Nowhere: beyond the cap, or not to be kept.
    Unfit(NonNull<Block>),
}

/// Counts the free of `block`, a block of `device_id` (a device below [`MAX_DEVICES`]), with
/// [`accounting::freed`], and keeps it in this thread's bin for its stream (another thread's
/// per-thread stream is the legacy stream here) when the idle bytes then are within `cap`
/// (None: not to be kept).
#[inline]
pub fn put(device_id: i32, block: NonNull<Block>, cap: Option<u64>) -> Put {
    // SAFETY: the caller holds the block: nobody frees it meanwhile.
    let b = unsafe { block.as_ref() };
    let fits = |idle: u64| cap.is_some_and(|cap| idle <= cap);
    let put = MINE.try_with(|mine| {
        mine.0.with(|inner| {
            if !fits(accounting::freed(&mut inner.counts[device_id as usize], device_id, b.bytes())) {
                return Put::Unfit(block);
            }
            let key = b.key().seen_from(mine.0.id);
            b.set_key(key);
            let bin = match inner.bin(device_id, key) {
                Some(bin) => bin,
                None => inner.new_bin(device_id, key),
            };
            let stack = &mut bin.stacks[b.class];
            if stack.len == KEEP {
                return Put::Full(block);
            }
            stack.blocks[stack.len] = block.as_ptr();
            stack.len += 1;
            Put::Kept
        })
    });
    // A thread that is exiting has no bins, nor counts of its own (they went to RETIRED).
    put.unwrap_or_else(|_| match fits(accounting::freed(&mut Counts::default(), device_id, b.bytes())) {
        true => Put::Full(block),
        false => Put::Unfit(block),
    })
}

/// This thread's cache id; 0 while the thread exits (no per-thread stream is then its own).
pub fn thread_id() -> u64 {
    MINE.try_with(|mine| mine.0.id).unwrap_or(0)
}

/// Runs `f` (a function of `accounting`) on this thread's counts for `device_id`, inside its
/// owner's section: for the paths that do not go through the bins (a miss, memory too large for a
/// class or allocated while a stream was being captured, a fenced free). A device beyond
/// [`MAX_DEVICES`], or a thread that is exiting, has no counts of its own: `f` gets counts that
/// are then dropped, so that what it counts on the device still counts.
pub fn count<R>(device_id: i32, f: impl FnOnce(&mut Counts) -> R) -> R {
    let Some(d) = usize::try_from(device_id).ok().filter(|&d| d < MAX_DEVICES) else {
        return f(&mut Counts::default());
    };
    // `f` moves into the section only if the thread still has its cache.
    let mut f = Some(f);
    let counted = MINE.try_with(|mine| mine.0.with(|inner| f.take().map(|f| f(&mut inner.counts[d]))));
    match (counted, f) {
        (Ok(Some(result)), _) => result,
        (_, Some(f)) => f(&mut Counts::default()),
        _ => unreachable!("`f` ran inside the section"),
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
