//! A short list in place: a call's arguments, the views it releases, its outputs and results,
//! with no heap allocation for the usual few (a `Vec` per call costs a nop kernel a third of its
//! time; the two an `add` grew from empty cost it 410 instructions).

use std::mem::{ManuallyDrop, MaybeUninit};

pub struct Inline<T: Copy, const N: usize> {
    items: [MaybeUninit<T>; N],
    len: usize,
    /// Everything, once there were more than N; freed by `Drop` (whose check is inline: the
    /// call's drops stay among its own lines, docs/cuda.md).
    spilled: ManuallyDrop<Vec<T>>,
}

impl<T: Copy, const N: usize> Drop for Inline<T, N> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.spilled.capacity() != 0 {
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
        Inline { items: [const { MaybeUninit::uninit() }; N], len: 0, spilled: ManuallyDrop::new(Vec::new()) }
    }

    #[inline(always)]
    pub fn push(&mut self, value: T) {
        if self.len < N {
            self.items[self.len].write(value);
            self.len += 1;
        } else {
            self.spill(value);
        }
    }

    /// The push past the inline room: everything moves to the heap.
    #[cold]
    #[inline(never)]
    fn spill(&mut self, value: T) {
        if self.spilled.is_empty() {
            let mut spilled = Vec::with_capacity(2 * N);
            spilled.extend_from_slice(self.as_slice());
            *self.spilled = spilled;
        }
        self.spilled.push(value);
    }

    #[cold]
    #[inline(never)]
    fn free_spilled(&mut self) {
        // SAFETY: dropped once, here, as the list goes.
        unsafe { ManuallyDrop::drop(&mut self.spilled) };
    }

    /// Pushes `value` and gives it back to be written in place.
    #[inline(always)]
    pub fn push_in_place(&mut self, value: T) -> &mut T {
        self.push(value);
        match self.spilled.is_empty() {
            // SAFETY: `push` wrote the item at `len - 1`.
            true => unsafe { self.items[self.len - 1].assume_init_mut() },
            false => self.spilled.last_mut().expect("pushed"),
        }
    }

    /// Forgets the last item pushed.
    #[inline]
    pub fn pop(&mut self) {
        match self.spilled.is_empty() {
            true => self.len -= 1,
            false => {
                self.spilled.pop();
            }
        }
    }

    /// How many items.
    #[inline]
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes item `index` (in bounds), the last one taking its place.
    pub fn swap_remove(&mut self, index: usize) -> T {
        match self.spilled.is_empty() {
            true => {
                let slice = self.as_mut_slice();
                let last = slice.len() - 1;
                slice.swap(index, last);
                let item = slice[last];
                self.len -= 1;
                item
            }
            false => self.spilled.swap_remove(index),
        }
    }

    /// Takes every item out, leaving the list empty.
    pub fn take(&mut self) -> Self {
        std::mem::take(self)
    }

    fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: the first `len` items were written by `push`.
        unsafe { std::slice::from_raw_parts_mut(self.items.as_mut_ptr().cast::<T>(), self.len) }
    }

    #[inline]
    pub fn as_slice(&self) -> &[T] {
        match self.spilled.is_empty() {
            // SAFETY: the first `len` items were written by `push`.
            true => unsafe { std::slice::from_raw_parts(self.items.as_ptr().cast::<T>(), self.len) },
            false => &self.spilled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_in_place_and_pops_inline_and_spilled() {
        let mut list: Inline<u32, 2> = Inline::new();
        for i in 0..5 {
            *list.push_in_place(0) = i * 10;
        }
        assert_eq!(list.as_slice(), [0, 10, 20, 30, 40]);
        list.pop();
        assert_eq!(list.as_slice(), [0, 10, 20, 30]);
        let mut short: Inline<u32, 4> = Inline::new();
        *short.push_in_place(1) = 7;
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
    fn keeps_order_past_the_inline_room() {
        let mut list: Inline<u32, 3> = Inline::new();
        assert!(list.as_slice().is_empty());
        for i in 0..10 {
            list.push(i);
            assert_eq!(list.as_slice(), (0..=i).collect::<Vec<_>>());
        }
    }
}
