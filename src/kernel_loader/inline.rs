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

    #[inline]
    pub fn push(&mut self, value: T) {
        if self.len < N {
            self.items[self.len].write(value);
            self.len += 1;
        } else {
            if self.spilled.is_empty() {
                let mut spilled = Vec::with_capacity(2 * N);
                spilled.extend_from_slice(self.as_slice());
                self.spilled = spilled;
            }
            self.spilled.push(value);
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
    fn keeps_order_past_the_inline_room() {
        let mut list: Inline<u32, 3> = Inline::new();
        assert!(list.as_slice().is_empty());
        for i in 0..10 {
            list.push(i);
            assert_eq!(list.as_slice(), (0..=i).collect::<Vec<_>>());
        }
    }
}
