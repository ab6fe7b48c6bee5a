//! The block cache's size classes and settings (docs/cuda.md, "The CUDA block cache").
//!
//! Classes: 512 bytes, then four per power of two (640, 768, 896, 1024, 1280, …), so a block is
//! at most 25 % larger than the request, up to [`LARGEST`] (64 MiB); larger requests go straight
//! to the driver's pool, which keeps them itself.

use std::sync::OnceLock;

/// The smallest class (torch rounds to 512 bytes as well).
const SMALLEST_SHIFT: u32 = 9;
/// The largest class's size: 64 MiB. Above it a block is not cached.
pub const LARGEST: usize = 64 << 20;
/// How many classes there are, 0 ..= class_of(LARGEST).
pub const CLASSES: usize = class_of_unchecked(LARGEST) + 1;
/// Devices with a cache (ids at or above it allocate through the driver alone).
pub const MAX_DEVICES: usize = 64;

/// The cap's default, per device: 1 GiB of idle cached blocks.
pub const DEFAULT_CACHE_BYTES: u64 = 1 << 30;

/// The class a request of `nbytes` (> 0) falls in; None above [`LARGEST`].
#[inline]
pub fn class_of(nbytes: usize) -> Option<usize> {
    (nbytes <= LARGEST).then(|| class_of_unchecked(nbytes))
}

#[inline]
const fn class_of_unchecked(nbytes: usize) -> usize {
    if nbytes <= 1 << SMALLEST_SHIFT {
        return 0;
    }
    // 2^k < nbytes <= 2^(k+1), in quarter steps of 2^(k-2): step 1 ..= 4.
    let k = usize::BITS - 1 - (nbytes - 1).leading_zeros();
    let step = ((nbytes - 1) >> (k - 2)) - 3;
    ((k - SMALLEST_SHIFT) * 4) as usize + step
}

/// The bytes a block of `class` holds.
#[inline]
pub const fn class_bytes(class: usize) -> usize {
    if class == 0 {
        return 1 << SMALLEST_SHIFT;
    }
    let k = SMALLEST_SHIFT as usize + (class - 1) / 4;
    let step = (class - 1) % 4 + 1;
    (1 << k) + step * (1 << (k - 2))
}

/// What the environment asks of the cache, read once.
pub struct Settings {
    /// Most idle bytes cached per device (`DLPX_CUDA_CACHE_BYTES`; 0 turns the cache off).
    pub cap: u64,
    /// `DLPX_CUDA_CACHE_BYTES`'s value when it is no byte count: setting a device up refuses it
    /// (as torch refuses a `PYTORCH_CUDA_ALLOC_CONF` it cannot read), rather than the default
    /// silently standing for what was asked.
    pub unreadable: Option<String>,
    /// A deliberately wrong cache, for the tests that show the simulator catches one
    /// (`DLPX_CUDA_CACHE_FAULT`, never set in use).
    pub fault: Fault,
}

/// A fault the tests inject to prove that the simulator's ordering check can fail.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Fault {
    None,
    /// Blocks used on other streams are cached as if they had not been (no events).
    IgnoreUses,
    /// Allocations on a stream being captured take cached blocks.
    IgnoreCapture,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// The settings, read from the environment on first use.
pub fn settings() -> &'static Settings {
    SETTINGS.get_or_init(|| {
        // Set to nothing is unset, as for most variables.
        let asked = std::env::var_os("DLPX_CUDA_CACHE_BYTES")
            .map(|v| v.to_string_lossy().into_owned()) // not UTF-8: no byte count, refused as one
            .filter(|v| !v.trim().is_empty());
        let read = asked.as_deref().map(parse_bytes);
        Settings {
            cap: read.flatten().unwrap_or(DEFAULT_CACHE_BYTES),
            unreadable: asked.filter(|_| read == Some(None)),
            fault: match std::env::var("DLPX_CUDA_CACHE_FAULT").as_deref() {
                Ok("ignore_uses") => Fault::IgnoreUses,
                Ok("ignore_capture") => Fault::IgnoreCapture,
                _ => Fault::None,
            },
        }
    })
}

/// Bytes as `1073741824`, `512M`, `4G` (K, M, G: powers of 1024); None for anything else.
fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, shift) = match text.as_bytes().last()? {
        b'K' | b'k' => (&text[..text.len() - 1], 10),
        b'M' | b'm' => (&text[..text.len() - 1], 20),
        b'G' | b'g' => (&text[..text.len() - 1], 30),
        _ => (text, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_size_with_at_most_a_quarter_to_spare() {
        assert_eq!((class_bytes(0), class_bytes(1), class_bytes(4), class_bytes(5)), (512, 640, 1024, 1280));
        assert_eq!(class_bytes(CLASSES - 1), LARGEST);
        assert_eq!(class_of(LARGEST + 1), None);
        let mut previous = 0;
        for class in 0..CLASSES {
            let bytes = class_bytes(class);
            assert!(bytes > previous, "classes grow");
            for n in [previous + 1, (previous + bytes) / 2, bytes] {
                assert_eq!(class_of(n), Some(class), "{n} bytes");
            }
            assert!(class == 0 || (bytes - previous) * 4 <= previous + 1, "class {class} wastes at most 25 %");
            previous = bytes;
        }
    }

    #[test]
    fn byte_counts_parse_with_suffixes() {
        assert_eq!(parse_bytes("0"), Some(0));
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("512M"), Some(512 << 20));
        assert_eq!(parse_bytes(" 2g "), Some(2 << 30));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_bytes("-1"), None);
    }
}
