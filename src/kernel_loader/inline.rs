//! A short list on the stack: a call's arguments and the views it releases, with no heap
//! allocation for the usual few (a `Vec` per call costs a nop kernel a third of its time).

use std::mem::MaybeUninit;

pub struct Inline<T: Copy, const N: usize> {
    items: [MaybeUninit<T>; N],
    len: usize,
    /// Everything, once there were more than N.
    spilled: Vec<T>,
}

impl<T: Copy, const N: usize> Inline<T, N> {
    #[inline(always)]
    pub fn new() -> Self {
        Inline { items: [const { MaybeUninit::uninit() }; N], len: 0, spilled: Vec::new() }
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
            self.spilled = spilled;
        }
        self.spilled.push(value);
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
    fn keeps_order_past_the_inline_room() {
        let mut list: Inline<u32, 3> = Inline::new();
        assert!(list.as_slice().is_empty());
        for i in 0..10 {
            list.push(i);
            assert_eq!(list.as_slice(), (0..=i).collect::<Vec<_>>());
        }
    }
}
