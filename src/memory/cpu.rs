//! Host memory: 256-byte aligned blocks (DLPack's data alignment), with a per-thread cache of
//! freed blocks by power-of-two size class so that allocate + free of small tensors costs a
//! pointer push and pop instead of two trips through malloc.
//!
//! A block freed on another thread than the one that allocated it goes to the freeing thread's
//! cache: blocks are plain aligned heap memory, so any thread may reuse or release them.

use std::cell::UnsafeCell;
use std::ptr::NonNull;

/// DLPack asks for 256-byte aligned data (as CUDA gives).
pub const ALIGN: usize = 256;

const MIN_CLASS_SHIFT: u32 = 7; // 128 bytes: exports and data-less tensors
const MAX_CLASS_SHIFT: u32 = 16; // 64 KiB: larger blocks go straight to the system allocator
const CLASSES: usize = (MAX_CLASS_SHIFT - MIN_CLASS_SHIFT + 1) as usize;
/// Blocks kept per class and thread: bounds what an idle thread holds to about 2 MiB.
const KEEP_PER_CLASS: usize = 16;

/// A block's capacity, rounded up to its class; what `free` needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity(usize);

impl Capacity {
    pub const fn bytes(self) -> usize {
        self.0
    }

    fn class(self) -> Option<usize> {
        let shift = self.0.trailing_zeros();
        (self.0.is_power_of_two() && (MIN_CLASS_SHIFT..=MAX_CLASS_SHIFT).contains(&shift))
            .then(|| (shift - MIN_CLASS_SHIFT) as usize)
    }
}

/// The capacity a request of `size` bytes gets.
pub const fn capacity_for(size: usize) -> Option<Capacity> {
    if size <= 1 << MIN_CLASS_SHIFT {
        Some(Capacity(1 << MIN_CLASS_SHIFT))
    } else if size <= 1 << MAX_CLASS_SHIFT {
        Some(Capacity(size.next_power_of_two()))
    } else {
        match size.checked_add(ALIGN - 1) {
            Some(s) => Some(Capacity(s & !(ALIGN - 1))),
            None => None,
        }
    }
}

struct Stack {
    len: usize,
    blocks: [*mut u8; KEEP_PER_CLASS],
}

struct Cache {
    stacks: UnsafeCell<[Stack; CLASSES]>,
}

impl Drop for Cache {
    fn drop(&mut self) {
        for stack in self.stacks.get_mut().iter_mut() {
            for &block in &stack.blocks[..stack.len] {
                // SAFETY: every cached pointer came from `system_alloc` and is owned by the cache.
                unsafe { libc::free(block.cast()) };
            }
            stack.len = 0;
        }
    }
}

thread_local! {
    static CACHE: Cache = const {
        Cache { stacks: UnsafeCell::new([const { Stack { len: 0, blocks: [std::ptr::null_mut(); KEEP_PER_CLASS] } }; CLASSES]) }
    };
}

/// Allocates a block of at least `capacity` bytes, 256-byte aligned when the capacity is at least
/// 256 (16-byte aligned below); None when the system is out of memory.
#[inline]
pub fn alloc(capacity: Capacity) -> Option<NonNull<u8>> {
    if let Some(class) = capacity.class() {
        let cached = CACHE
            .try_with(|cache| {
                // SAFETY: the cache is thread-local and no function reenters it while borrowed.
                let stack = unsafe { &mut (*cache.stacks.get())[class] };
                if stack.len == 0 {
                    return None;
                }
                stack.len -= 1;
                NonNull::new(stack.blocks[stack.len])
            })
            .ok()
            .flatten();
        if cached.is_some() {
            return cached;
        }
    }
    system_alloc(capacity.0)
}

/// Returns a block from [`alloc`] with the same capacity.
///
/// # Safety
/// `block` came from `alloc(capacity)` and is not used afterwards.
#[inline]
pub unsafe fn free(block: NonNull<u8>, capacity: Capacity) {
    if let Some(class) = capacity.class() {
        let kept = CACHE
            .try_with(|cache| {
                // SAFETY: as in `alloc`.
                let stack = unsafe { &mut (*cache.stacks.get())[class] };
                if stack.len == KEEP_PER_CLASS {
                    return false;
                }
                stack.blocks[stack.len] = block.as_ptr();
                stack.len += 1;
                true
            })
            .unwrap_or(false);
        if kept {
            return;
        }
    }
    // SAFETY: the caller gives up `block`, which came from `system_alloc`.
    unsafe { libc::free(block.as_ptr().cast()) }
}

/// Blocks smaller than ALIGN cannot hold data (whose first byte needs ALIGN), so malloc's own
/// 16-byte alignment serves them without posix_memalign's padding.
#[cold]
fn system_alloc(size: usize) -> Option<NonNull<u8>> {
    if size < ALIGN {
        // SAFETY: plain malloc of a non-zero size.
        return NonNull::new(unsafe { libc::malloc(size) }.cast());
    }
    let mut out: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: ALIGN is a power of two and a multiple of the pointer size, as posix_memalign asks.
    let rc = unsafe { libc::posix_memalign(&mut out, ALIGN, size) };
    if rc != 0 {
        return None;
    }
    NonNull::new(out.cast())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_and_reused() {
        let cap = capacity_for(300).unwrap();
        assert_eq!(cap.bytes(), 512);
        assert_eq!(capacity_for(80).unwrap().bytes(), 128);
        let a = alloc(cap).unwrap();
        assert_eq!(a.as_ptr() as usize % ALIGN, 0);
        // SAFETY: `a` came from `alloc(cap)` and is not used afterwards.
        unsafe { free(a, cap) };
        let b = alloc(cap).unwrap();
        assert_eq!(a, b, "a freed block of the same class is reused");
        // SAFETY: as above.
        unsafe { free(b, cap) };
    }

    #[test]
    fn large_blocks_bypass_the_cache() {
        let cap = capacity_for((1 << 16) + 1).unwrap();
        assert_eq!(cap.bytes(), (1 << 16) + 256);
        assert_eq!(cap.class(), None);
        let a = alloc(cap).unwrap();
        assert_eq!(a.as_ptr() as usize % ALIGN, 0);
        // SAFETY: `a` came from `alloc(cap)` and is not used afterwards.
        unsafe { free(a, cap) };
        assert!(capacity_for(usize::MAX).is_none());
    }
}
