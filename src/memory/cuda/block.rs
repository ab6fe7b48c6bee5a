//! A cached device block: one driver allocation of a size class, the stream whose order its last
//! use follows, and a state word that catches a block freed twice.
//!
//! A block moves between threads (allocated on one, freed on another) only through the
//! synchronisation that hands a tensor over, so its fields are relaxed atomics: any thread may
//! read them, the block's current holder writes them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use super::classes::class_bytes;
use super::driver::{STREAM_LEGACY, STREAM_PER_THREAD};

/// The stream a block's reuse is ordered on. A created stream is its handle; NULL and the legacy
/// default stream are [`STREAM_LEGACY`]; the per-thread default stream names a different stream
/// on each thread, so its key also names the thread (a thread cache's id).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct StreamKey {
    pub stream: usize,
    pub thread: u64,
}

impl StreamKey {
    pub const LEGACY: StreamKey = StreamKey { stream: STREAM_LEGACY, thread: 0 };

    /// The key of an allocation on `stream` by the thread whose cache id is `thread`.
    #[inline]
    pub fn of(stream: usize, thread: u64) -> StreamKey {
        match stream {
            0 | STREAM_LEGACY => StreamKey::LEGACY,
            STREAM_PER_THREAD => StreamKey { stream, thread },
            _ => StreamKey { stream, thread: 0 },
        }
    }

    /// The key the same block has on the thread `thread`, where it is freed: another thread's
    /// per-thread stream is not this thread's, but the legacy stream waits for every one of
    /// them (they are blocking streams), so such a block is reused on the legacy stream only.
    #[inline]
    pub fn seen_from(self, thread: u64) -> StreamKey {
        match self.stream == STREAM_PER_THREAD && self.thread != thread {
            true => StreamKey::LEGACY,
            false => self,
        }
    }

    /// Whether work thread `thread` enqueued on `stream` is done, in the device's order, before
    /// the work of a reuse on this key: the same stream; a built-in one before the legacy
    /// stream (which waits for the blocking streams, every thread's default stream among them);
    /// the legacy stream before a thread's default stream (a blocking stream, which waits for
    /// it). Another thread's default stream is not this key's: its work must be recorded.
    #[inline]
    pub fn comes_after(self, stream: usize, thread: u64) -> bool {
        let used = StreamKey::of(stream, thread);
        used == self
            || (self == StreamKey::LEGACY && used.is_built_in())
            || (self.stream == STREAM_PER_THREAD && used == StreamKey::LEGACY)
    }

    /// Whether no one can destroy the stream (so a release may name it at any time).
    pub fn is_built_in(self) -> bool {
        self.stream == STREAM_LEGACY || self.stream == STREAM_PER_THREAD
    }
}

/// A block the cache manages. Created on a driver allocation and dropped when it goes back to
/// the driver; its address is what a tensor's memory words carry.
pub struct Block {
    pub ptr: usize,
    pub device_id: i32,
    pub class: usize,
    stream: AtomicUsize,
    thread: AtomicU64,
    /// Twice the number of times it was handed out, plus one while a tensor holds it: a free
    /// must present the word it was handed out with, so a second free of the same tensor (or a
    /// free of a tensor whose block was since handed to another) is refused.
    state: AtomicU64,
}

impl Block {
    pub fn new(ptr: usize, device_id: i32, class: usize, key: StreamKey) -> Block {
        Block {
            ptr,
            device_id,
            class,
            stream: AtomicUsize::new(key.stream),
            thread: AtomicU64::new(key.thread),
            state: AtomicU64::new(0),
        }
    }

    #[inline]
    pub fn bytes(&self) -> usize {
        class_bytes(self.class)
    }

    #[inline]
    pub fn key(&self) -> StreamKey {
        StreamKey { stream: self.stream.load(Relaxed), thread: self.thread.load(Relaxed) }
    }

    #[inline]
    pub fn set_key(&self, key: StreamKey) {
        self.stream.store(key.stream, Relaxed);
        self.thread.store(key.thread, Relaxed);
    }

    /// Marks the block handed out; returns the state word its free must present.
    #[inline]
    pub fn hand_out(&self) -> u64 {
        let state = (self.state.load(Relaxed) | 1) + 2;
        self.state.store(state, Relaxed);
        state
    }

    /// Takes the block back from the tensor that was handed `state`; false when that tensor no
    /// longer holds it (freed twice). Not a read-modify-write: two threads freeing one tensor at
    /// once is a race in the caller that no check can order, a second free after the first is
    /// what this catches.
    #[inline]
    pub fn take_back(&self, state: u64) -> bool {
        if state & 1 == 0 || self.state.load(Relaxed) != state {
            return false;
        }
        self.state.store(state - 1, Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_taken_back_once_per_hand_out() {
        let block = Block::new(0x1000, 0, 3, StreamKey::LEGACY);
        let first = block.hand_out();
        assert!(block.take_back(first));
        assert!(!block.take_back(first), "a second free of the same tensor");
        let second = block.hand_out();
        assert_ne!(first, second);
        assert!(!block.take_back(first), "a stale free after the block was handed out again");
        assert!(block.take_back(second));
        assert!(!block.take_back(0), "never handed out");
    }

    #[test]
    fn another_thread_s_per_thread_stream_is_reused_on_the_legacy_stream() {
        let mine = StreamKey::of(STREAM_PER_THREAD, 7);
        assert_eq!(mine.seen_from(7), mine);
        assert_eq!(mine.seen_from(8), StreamKey::LEGACY);
        // A reuse on thread 7's default stream waits for the legacy stream, for no other thread's
        // default stream, nor for a created stream.
        assert!(mine.comes_after(STREAM_PER_THREAD, 7) && !mine.comes_after(STREAM_PER_THREAD, 8));
        assert!(mine.comes_after(STREAM_LEGACY, 8) && mine.comes_after(0, 7) && !mine.comes_after(0x5000, 7));
        // A reuse on the legacy stream waits for every built-in stream, not for a created one.
        for (stream, thread) in [(0, 7), (STREAM_LEGACY, 7), (STREAM_PER_THREAD, 8)] {
            assert!(StreamKey::LEGACY.comes_after(stream, thread));
        }
        assert!(!StreamKey::LEGACY.comes_after(0x5000, 7));
        assert!(StreamKey::of(0x5000, 0).comes_after(0x5000, 9) && !StreamKey::of(0x5000, 0).comes_after(0, 9));
        assert_eq!(StreamKey::of(0, 7), StreamKey::LEGACY);
        assert_eq!(StreamKey::of(0x5000, 7), StreamKey { stream: 0x5000, thread: 0 });
        assert!(!StreamKey::of(0x5000, 7).is_built_in() && mine.is_built_in());
    }
}
