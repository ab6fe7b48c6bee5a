//! `Shared<T>`: `Arc`'s reference counting over a block of the per-thread cache
//! (`memory::cpu`) instead of malloc. Every import makes one tensor core and drops it again;
//! malloc and free cost it more than the rest of a buffer's import (docs/design.md, "Memory and
//! ownership"; measured: benches/README.md, "The older array protocols"). The counting and its
//! memory orderings are `Arc`'s.

use std::marker::PhantomData;
use std::mem::{offset_of, size_of};
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicUsize, Ordering};

use crate::memory::cpu::{self, Capacity};

#[repr(C)]
struct Inner<T> {
    count: AtomicUsize,
    /// Whether the block is this one's to free; false when the value lives in room another
    /// owner left for it ([`Shared::new_in`]), whose block the value's own drop frees.
    frees_block: bool,
    value: T,
}

/// A shared, immutable `T`, freed with its last reference on whichever thread drops it.
pub struct Shared<T> {
    inner: NonNull<Inner<T>>,
    _owns: PhantomData<Inner<T>>,
}

// SAFETY: as for `Arc<T>`: the value is shared between threads and dropped on any of them.
unsafe impl<T: Send + Sync> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Shared<T> {}

impl<T> Shared<T> {
    const CAPACITY: Capacity = match cpu::capacity_for(size_of::<Inner<T>>()) {
        Some(capacity) => capacity,
        None => panic!("a shared value fits a block"),
    };
    // Blocks below ALIGN bytes are malloc's (16-aligned); larger ones are ALIGN-aligned.
    const ALIGNED: () = assert!(std::mem::align_of::<Inner<T>>() <= 16);

    /// Moves `value` into a new block with one reference; out of memory aborts, as `Arc::new`.
    pub fn new(value: T) -> Shared<T> {
        #[allow(clippy::let_unit_value)]
        let () = Self::ALIGNED;
        let Some(block) = cpu::alloc(Self::CAPACITY) else {
            std::alloc::handle_alloc_error(std::alloc::Layout::new::<Inner<T>>())
        };
        let inner = block.cast::<Inner<T>>();
        // SAFETY: a fresh block of at least `size_of::<Inner<T>>()` bytes, aligned (above).
        unsafe { inner.as_ptr().write(Inner { count: AtomicUsize::new(1), frees_block: true, value }) };
        Shared { inner, _owns: PhantomData }
    }

    /// Bytes of the room [`Shared::new_in`] takes.
    pub const ROOM: usize = size_of::<Inner<T>>().next_multiple_of(16);

    /// Moves `value` into `room`, with one reference: no block of its own. The value is moved
    /// out of the room before it is dropped, so its drop may free the memory the room is in.
    ///
    /// # Safety
    /// `room` is [`Shared::ROOM`] writable bytes, 16-aligned, that nothing else uses until the
    /// value is dropped, and that stay valid until then (the value keeps them, or frees them).
    pub unsafe fn new_in(room: NonNull<u8>, value: T) -> Shared<T> {
        #[allow(clippy::let_unit_value)]
        let () = Self::ALIGNED;
        let inner = room.cast::<Inner<T>>();
        // SAFETY: per the contract (`ALIGNED`: 16 suffices).
        unsafe { inner.as_ptr().write(Inner { count: AtomicUsize::new(1), frees_block: false, value }) };
        Shared { inner, _owns: PhantomData }
    }

    /// Gives up this reference as a pointer to the value, for [`Shared::from_raw`].
    pub fn into_raw(this: Shared<T>) -> *const T {
        let this = std::mem::ManuallyDrop::new(this);
        // SAFETY: the block is live while this reference is.
        unsafe { std::ptr::addr_of!((*this.inner.as_ptr()).value) }
    }

    /// Takes back a reference [`Shared::into_raw`] gave up.
    ///
    /// # Safety
    /// `value` came from `Shared::<T>::into_raw` and is taken back once.
    pub unsafe fn from_raw(value: *const T) -> Shared<T> {
        // SAFETY: the value lies at its offset inside a live block (per the contract).
        let inner = unsafe { value.cast::<u8>().sub(offset_of!(Inner<T>, value)) }.cast::<Inner<T>>();
        // SAFETY: derived from a non-null block pointer.
        Shared { inner: unsafe { NonNull::new_unchecked(inner.cast_mut()) }, _owns: PhantomData }
    }

    /// Whether this is the only reference (as `Arc::get_mut` asks): no other can be cloned from
    /// meanwhile, so the answer stays true while this one is held alone.
    pub fn is_unique(this: &Shared<T>) -> bool {
        this.inner().count.load(Ordering::Acquire) == 1
    }

    pub fn ptr_eq(a: &Shared<T>, b: &Shared<T>) -> bool {
        a.inner == b.inner
    }

    fn inner(&self) -> &Inner<T> {
        // SAFETY: live while any reference is.
        unsafe { self.inner.as_ref() }
    }
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Shared<T> {
        // Relaxed, as `Arc`: a new reference is made from an existing one, which orders it.
        if self.inner().count.fetch_add(1, Ordering::Relaxed) > isize::MAX as usize {
            std::process::abort();
        }
        Shared { inner: self.inner, _owns: PhantomData }
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner().value
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // The only reference (the common case: a tensor dropped where it was made) needs no
        // locked instruction: nobody else can clone it meanwhile, and the Acquire load orders
        // every earlier reference's uses before the drop, as the fence below does.
        if self.inner().count.load(Ordering::Acquire) != 1 {
            if self.inner().count.fetch_sub(1, Ordering::Release) != 1 {
                return;
            }
            // Every other reference's uses happen before the value is dropped (as `Arc`).
            fence(Ordering::Acquire);
        }
        // SAFETY: the last reference: the value is dropped once, then its block returned; a
        // value in another owner's room is moved out first, and its drop frees that memory.
        unsafe {
            let inner = self.inner.as_ptr();
            if !(*inner).frees_block {
                drop(std::ptr::read(std::ptr::addr_of!((*inner).value)));
                return;
            }
            std::ptr::drop_in_place(std::ptr::addr_of_mut!((*inner).value));
            cpu::free(self.inner.cast(), Self::CAPACITY);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    struct Counted<'a>(&'a AtomicU32);
    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn the_value_is_dropped_once_with_the_last_reference_on_any_thread() {
        static DROPS: AtomicU32 = AtomicU32::new(0);
        let a = Shared::new(Counted(&DROPS));
        let raw = Shared::into_raw(a.clone());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let b = a.clone();
                std::thread::spawn(move || (0..1000).for_each(|_| drop(b.clone())))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        drop(a);
        assert_eq!(DROPS.load(Ordering::Relaxed), 0);
        // SAFETY: from `into_raw` above, taken back once.
        let back = unsafe { Shared::from_raw(raw) };
        assert!(std::ptr::eq(&*back, raw));
        drop(back);
        assert_eq!(DROPS.load(Ordering::Relaxed), 1);
    }

    /// A value in room it frees itself: dropped once, after it was moved out of the room.
    #[test]
    fn a_value_in_room_is_moved_out_before_it_frees_the_room() {
        struct FreesRoom(*mut u8, &'static AtomicU32);
        impl Drop for FreesRoom {
            fn drop(&mut self) {
                // SAFETY: the room's block, allocated below; the value was moved out of it.
                unsafe { cpu::free(NonNull::new(self.0).unwrap(), cpu::capacity_for(256).unwrap()) };
                self.1.fetch_add(1, Ordering::Relaxed);
            }
        }
        static DROPS: AtomicU32 = AtomicU32::new(0);
        let block = cpu::alloc(cpu::capacity_for(256).unwrap()).unwrap();
        const { assert!(Shared::<FreesRoom>::ROOM <= 256) };
        // SAFETY: 256 fresh bytes, aligned, freed by the value only.
        let a = unsafe { Shared::new_in(block, FreesRoom(block.as_ptr(), &DROPS)) };
        let b = a.clone();
        drop(a);
        assert_eq!(DROPS.load(Ordering::Relaxed), 0);
        drop(b);
        assert_eq!(DROPS.load(Ordering::Relaxed), 1);
    }
}
