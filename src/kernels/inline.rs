//! A short list in place: a call's arguments, the views it releases, its outputs and results,
//! with no heap allocation for the usual few (a `Vec` per call costs a nop kernel a third of its
//! time; the two an `add` grew from empty cost it 410 instructions).

use std::mem::MaybeUninit;

/// `len` of a list whose items moved to the heap.
const SPILLED: usize = usize::MAX;

/// A list of at most N items in place, all of them on the heap past that. Made with one store
/// (`len`), checked on drop with one compare: a call makes four of them.
pub struct Inline<T: Copy, const N: usize> {
    items: [MaybeUninit<T>; N],
    /// How many items are in `items`; [`SPILLED`] once a push found no room, from then on.
    len: usize,
    /// Every item, once spilled (uninitialised before: `len` says which); freed by `Drop`,
    /// whose check is inline: the call's drops stay among its own lines, docs/cuda.md. Each
    /// slot is written as it is pushed (`push_uninit`'s contract), as the inline ones are.
    spilled: MaybeUninit<Vec<MaybeUninit<T>>>,
}

impl<T: Copy, const N: usize> Drop for Inline<T, N> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.len == SPILLED {
            self.free_spilled();
        }
    }
}

impl<T: Copy, const N: usize> Default for Inline<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy, const N: usize> Inline<T, N> {
    #[inline(always)]
    pub fn new() -> Self {
        Inline { items: [const { MaybeUninit::uninit() }; N], len: 0, spilled: MaybeUninit::uninit() }
    }

    /// The heap's items, once spilled.
    ///
    /// # Safety
    /// `self.len == SPILLED`.
    #[inline(always)]
    unsafe fn heap(&mut self) -> &mut Vec<MaybeUninit<T>> {
        // SAFETY: initialised when the list spilled (the caller's contract).
        unsafe { self.spilled.assume_init_mut() }
    }

    #[inline(always)]
    pub fn push(&mut self, value: T) {
        // SAFETY: written at once.
        unsafe { self.push_uninit() }.write(value);
    }

    /// The slot of a new last item, for the caller to write in place (a large value built
    /// first and moved in goes through the stack: `Value::empty_tensor_in`).
    ///
    /// # Safety
    /// The caller writes the slot whole before the list is used again.
    #[inline(always)]
    pub unsafe fn push_uninit(&mut self) -> &mut MaybeUninit<T> {
        match self.len < N {
            true => {
                self.len += 1;
                &mut self.items[self.len - 1]
            }
            false => self.spilled_slot(),
        }
    }

    /// The slot past the inline room (its push writes it): everything moves to the heap, the
    /// first time. The value is not passed here, or it is built on the stack for every push.
    #[cold]
    #[inline(never)]
    fn spilled_slot(&mut self) -> &mut MaybeUninit<T> {
        if self.len != SPILLED {
            let mut spilled = Vec::with_capacity(2 * N);
            spilled.extend_from_slice(&self.items[..self.len]);
            self.spilled.write(spilled);
            self.len = SPILLED;
        }
        // SAFETY: spilled, just above or before.
        let heap = unsafe { self.heap() };
        heap.push(MaybeUninit::uninit());
        heap.last_mut().expect("pushed")
    }

    #[cold]
    #[inline(never)]
    fn free_spilled(&mut self) {
        // SAFETY: spilled (`Drop` checks), dropped once, here, as the list goes.
        unsafe { self.spilled.assume_init_drop() };
    }

    /// Forgets the last item pushed.
    #[inline]
    pub fn pop(&mut self) {
        match self.len {
            // SAFETY: spilled.
            SPILLED => drop(unsafe { self.heap() }.pop()),
            // Never wraps to SPILLED: an empty list's pop is refused.
            len => self.len = len.checked_sub(1).expect("a pop of an empty list"),
        }
    }

    /// How many items.
    #[inline]
    pub fn len(&self) -> usize {
        match self.len {
            // SAFETY: spilled.
            SPILLED => unsafe { self.spilled.assume_init_ref() }.len(),
            len => len,
        }
    }

    /// One compare for a list that never spilled (the common one).
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0 || self.len() == 0
    }

    /// Removes item `index` (in bounds), the last one taking its place.
    pub fn swap_remove(&mut self, index: usize) -> T {
        match self.len {
            // SAFETY: spilled; every spilled slot was written by its push.
            SPILLED => unsafe { self.heap().swap_remove(index).assume_init() },
            len => {
                // Within the written items (an index past them panics, as a slice's would).
                self.items[..len].swap(index, len - 1);
                self.len -= 1;
                // SAFETY: item `len - 1` was written by its push (it is item `index`'s now).
                unsafe { self.items[len - 1].assume_init() }
            }
        }
    }

    /// Takes every item out, leaving the list empty.
    pub fn take(&mut self) -> Self {
        std::mem::take(self)
    }

    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        let len = self.len();
        let items = match self.len {
            // SAFETY: spilled.
            SPILLED => unsafe { self.heap() }.as_mut_ptr(),
            _ => self.items.as_mut_ptr(),
        };
        // SAFETY: as `as_slice`, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(items.cast::<T>(), len) }
    }

    #[inline]
    pub fn as_slice(&self) -> &[T] {
        let (items, len) = match self.len {
            SPILLED => {
                // SAFETY: spilled.
                let heap = unsafe { self.spilled.assume_init_ref() };
                (heap.as_ptr(), heap.len())
            }
            len => (self.items.as_ptr(), len),
        };
        // SAFETY: every slot up to `len` was written by its push (`MaybeUninit<T>` is laid out
        // as `T`).
        unsafe { std::slice::from_raw_parts(items.cast::<T>(), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_in_place_and_pops_inline_and_spilled() {
        let mut list: Inline<u32, 2> = Inline::new();
        for i in 0..5 {
            // SAFETY: written at once.
            unsafe { list.push_uninit() }.write(i * 10);
        }
        assert_eq!(list.as_slice(), [0, 10, 20, 30, 40]);
        list.pop();
        assert_eq!(list.as_slice(), [0, 10, 20, 30]);
        let mut short: Inline<u32, 4> = Inline::new();
        // SAFETY: written at once.
        unsafe { short.push_uninit() }.write(7);
        short.push(8);
        short.pop();
        assert_eq!(short.as_slice(), [7]);
    }

    #[test]
    fn swap_remove_and_take_inline_and_spilled() {
        for n in [3u32, 7] {
            let mut list: Inline<u32, 4> = Inline::new();
            (0..n).for_each(|i| list.push(i));
            assert_eq!(list.swap_remove(0), 0);
            let mut left = list.as_slice().to_vec();
            left.sort();
            assert_eq!(left, (1..n).collect::<Vec<_>>());
            let taken = list.take();
            assert!(list.is_empty());
            assert_eq!(taken.len(), n as usize - 1);
        }
    }

    #[test]
    #[should_panic(expected = "a pop of an empty list")]
    fn an_empty_list_refuses_a_pop() {
        Inline::<u32, 2>::new().pop();
    }

    #[test]
    #[should_panic]
    fn swap_remove_past_the_items_panics() {
        let mut list: Inline<u32, 4> = Inline::new();
        list.push(1);
        list.swap_remove(2);
    }

    #[test]
    fn pops_every_spilled_item() {
        let mut list: Inline<u32, 2> = Inline::new();
        (0..3).for_each(|i| list.push(i));
        (0..3).for_each(|_| list.pop());
        assert!(list.is_empty());
        list.push(9);
        assert_eq!(list.as_slice(), [9]);
    }

    #[test]
    fn keeps_order_past_the_inline_room() {
        let mut list: Inline<u32, 3> = Inline::new();
        assert!(list.as_slice().is_empty());
        for i in 0..10 {
            list.push(i);
            assert_eq!(list.as_slice(), (0..=i).collect::<Vec<_>>());
        }
    }
}
