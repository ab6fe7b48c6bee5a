//! How many calls each direct read served: `dlpx._native._served(row)`, so that a test of a fast
//! path fails unless that path answered the call (docs/design.md, "A guard per direct read").
//! Always on, and free: on a GIL build one add to a counter the GIL guards (no other thread
//! touches it meanwhile; its cache line moves only with the GIL); on a free-threaded interpreter
//! the calling thread's own counter, because one every thread adds to is a cache line that the
//! cores pass back and forth on every call (an atomic add on it, worse). The count is the
//! process's on a GIL build and the thread's on a free-threaded one: a test that counts its own
//! calls, on one thread, reads the same either way.

use std::cell::{Cell, UnsafeCell};

use crate::cpython::{layout, Python};

/// The reads counted, by row name: the rows with a guard, torch's native checks, the views
/// torch's C shim gave and the kernel outputs it made `torch.Tensor`s.
const COUNTED: [&str; 7] = ["numpy", "tvm_ffi", "jax", "array_api_strict", "torch", "torch_shim", "torch_outputs"];

/// The counts on a GIL build.
struct GilCounts([UnsafeCell<u64>; COUNTED.len()]);

// SAFETY: read and written only with a `Python` token on a GIL build: the GIL serialises them.
unsafe impl Sync for GilCounts {}

static GIL_COUNTS: GilCounts = GilCounts([const { UnsafeCell::new(0) }; COUNTED.len()]);

thread_local! {
    /// The counts of this thread, on a free-threaded interpreter.
    static THREAD_COUNTS: [Cell<u64>; COUNTED.len()] = const { [const { Cell::new(0) }; COUNTED.len()] };
}

/// One read's counter.
#[derive(Clone, Copy, Debug)]
pub struct Served(usize);

impl Served {
    /// The counter of the read named `row`: a name outside [`COUNTED`] does not compile (the
    /// guards' and torch's are statics).
    pub const fn of(row: &str) -> Served {
        let mut i = 0;
        while i < COUNTED.len() {
            if same(COUNTED[i], row) {
                return Served(i);
            }
            i += 1;
        }
        panic!("a direct read without a counter")
    }

    /// The read answered a call.
    #[inline(always)]
    pub fn count(self, _py: Python<'_>) {
        if !layout::free_threaded() {
            // SAFETY: a GIL build, and the token proves this thread holds the GIL.
            unsafe { *GIL_COUNTS.0[self.0].get() += 1 };
            return;
        }
        count_on_this_thread(self.0);
    }
}

#[inline(never)]
fn count_on_this_thread(i: usize) {
    // A const-initialised thread-local without a destructor: always accessible.
    THREAD_COUNTS.with(|counts| counts[i].set(counts[i].get() + 1));
}

/// The calls the read named `row` served (on this thread, where there is no GIL); None for a
/// name it does not count.
pub fn served(_py: Python<'_>, row: &str) -> Option<u64> {
    let i = COUNTED.iter().position(|&name| name == row)?;
    Some(match layout::free_threaded() {
        // SAFETY: a GIL build, and the token proves this thread holds the GIL.
        false => unsafe { *GIL_COUNTS.0[i].get() },
        true => THREAD_COUNTS.with(|counts| counts[i].get()),
    })
}

/// The names [`served`] answers for, for an error naming them.
pub fn counted() -> &'static [&'static str] {
    &COUNTED
}

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::{count_on_this_thread, Served, COUNTED, THREAD_COUNTS};

    #[test]
    fn each_read_has_its_own_counter_and_each_thread_its_own() {
        let numpy = Served::of("numpy").0;
        let thread_count = |i: usize| THREAD_COUNTS.with(|counts| counts[i].get());
        let before = (thread_count(numpy), thread_count(Served::of("jax").0));
        count_on_this_thread(numpy);
        count_on_this_thread(numpy);
        assert_eq!((thread_count(numpy), thread_count(Served::of("jax").0)), (before.0 + 2, before.1));
        std::thread::spawn(move || assert_eq!(thread_count(numpy), 0)).join().unwrap();
    }

    #[test]
    fn every_row_with_a_guard_is_counted() {
        for row in super::super::ROWS.iter().filter(|row| row.guard.is_some()) {
            assert!(COUNTED.contains(&row.name), "{}", row.name);
        }
    }
}
