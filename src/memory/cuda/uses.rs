//! What a free of stream-ordered memory waits for, besides its allocation stream's own work:
//! streams recorded as users and fences (events) recorded where a consumer's work ended. The
//! record is the device seam's; a device with streams fills it (`devices::Device`).

/// A stream some work on a tensor's memory was ordered on: the stream's device and the stream.
pub type StreamUse = (i32, usize);

/// Streams recorded as users (an event is recorded on each at the free), and fences.
#[derive(Default)]
pub struct Uses {
    pub streams: Vec<StreamUse>,
    pub fences: Vec<Fence>,
}

/// An event recorded on a consumer's stream when its work on the memory was all enqueued.
#[derive(Clone, Copy)]
pub struct Fence {
    pub device_id: i32,
    pub stream: usize,
    pub event: usize,
}

impl Uses {
    /// Adds `stream` of `device_id` to the users, once.
    pub fn add_stream(&mut self, entry: StreamUse) {
        if !self.streams.contains(&entry) {
            self.streams.push(entry);
        }
    }
}
