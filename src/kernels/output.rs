//! The outputs a call allocated, each with a copy of its header as the framework made it. The
//! header (`ndim` to `byte_offset`, and the shape and strides it points to) is the framework's:
//! it reads it when it takes the tensor back (numpy builds its array from it) and its deleter
//! may too. A kernel that changed it is an error, found when the kernel returns, and the header
//! is written back before anything reads it; a kernel's own bug cannot become the caller's crash.

use std::ptr::NonNull;

use super::inline::Inline;
use crate::abi::*;

/// One allocated output.
#[derive(Clone, Copy)]
struct Output {
    managed: NonNull<DLManagedTensorVersioned>,
    /// The header as the allocator gave it.
    header: DLTensor,
    /// Where its shape, then its strides (if any), start in [`Outputs::dims`], and how many of
    /// each there are.
    dims_at: usize,
    lengths: [usize; 2],
    /// Handed to the call's results (which own it from then on).
    returned: bool,
}

/// A call's outputs, in the order they were allocated.
pub struct Outputs {
    list: Inline<Output, 2>,
    /// How many are not returned (the call deletes them).
    unreturned: usize,
    /// Every output's shape, then its strides, in allocation order.
    dims: Inline<i64, 16>,
}

impl Outputs {
    #[inline(always)]
    pub fn new() -> Self {
        Outputs { list: Inline::new(), unreturned: 0, dims: Inline::new() }
    }

    /// Whether no output was allocated.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Keeps `managed`, just allocated (a header of `ndim` at most `MAX_NDIM`, whose shape and
    /// strides, if any, are `ndim` long, as the allocator's contract says), and a copy of its header.
    pub fn keep(&mut self, managed: NonNull<DLManagedTensorVersioned>) {
        // SAFETY: a live managed tensor the allocator just gave.
        let header = unsafe { managed.as_ref() }.dl_tensor;
        let dims_at = self.dims.len();
        // SAFETY: the allocator's contract, as above.
        let arrays = unsafe { dims(&header) };
        arrays.into_iter().flatten().for_each(|&d| self.dims.push(d));
        let lengths = arrays.map(<[i64]>::len);
        self.list.push(Output { managed, header, dims_at, lengths, returned: false });
        self.unreturned += 1;
    }

    /// The managed tensor of the unreturned output whose tensor is `tensor`, marked returned;
    /// None where no output is it, or it was returned already.
    pub fn take(&mut self, tensor: *const DLTensor) -> Option<NonNull<DLManagedTensorVersioned>> {
        let list = self.list.as_mut_slice();
        // SAFETY: only the address is compared.
        let is = |o: &Output| unsafe { std::ptr::addr_of!((*o.managed.as_ptr()).dl_tensor) } == tensor;
        let output = list.iter_mut().find(|o| !o.returned && is(o))?;
        output.returned = true;
        self.unreturned -= 1;
        Some(output.managed)
    }

    /// Whether every output's header is as the allocator gave it (the common call: one compare
    /// of the header's words, then of its shape and strides, per output).
    #[inline]
    pub fn unchanged(&self) -> bool {
        self.list.as_slice().iter().all(|output| {
            let was = &output.header;
            // SAFETY: a live managed tensor the call allocated (returned ones live in its results).
            let now = &unsafe { output.managed.as_ref() }.dl_tensor;
            let [shape, strides] = self.kept(output);
            // The same header, so the same arrays, as long as when they were kept.
            // SAFETY: the allocator's arrays, alive with the tensor.
            now.same_header(was) && unsafe { holds(was.shape, shape) && holds(was.strides, strides) }
        })
    }

    /// The first output whose header the kernel changed, and what of it: `(1, "shape")`.
    #[cold]
    pub fn changed(&self) -> Option<(usize, &'static str)> {
        self.list.as_slice().iter().enumerate().find_map(|(i, output)| self.what_changed(output).map(|what| (i, what)))
    }

    fn what_changed(&self, output: &Output) -> Option<&'static str> {
        let was = &output.header;
        // SAFETY: a live managed tensor the call allocated (returned ones live in its results).
        let now = &unsafe { output.managed.as_ref() }.dl_tensor;
        let device = |d: DLDevice| (d.device_type.0, d.device_id);
        let dtype = |t: DLDataType| (t.code, t.bits, t.lanes);
        let fields = [
            ("data", was.data == now.data),
            ("device", device(was.device) == device(now.device)),
            ("ndim", was.ndim == now.ndim),
            ("dtype", dtype(was.dtype) == dtype(now.dtype)),
            ("shape pointer", was.shape == now.shape),
            ("strides pointer", was.strides == now.strides),
            ("byte_offset", was.byte_offset == now.byte_offset),
        ];
        if let Some(&(field, _)) = fields.iter().find(|(_, same)| !same) {
            return Some(field);
        }
        // SAFETY: as above; the same pointers and ndim as the allocator gave.
        let now = unsafe { dims(now) };
        let kept = self.kept(output);
        ["shape", "strides"]
            .into_iter()
            .zip(now.into_iter().zip(kept))
            .find(|(_, (now, kept))| now != kept)
            .map(|(f, _)| f)
    }

    /// The shape and strides `output` had when it was allocated.
    fn kept(&self, output: &Output) -> [&[i64]; 2] {
        let [shape, strides] = output.lengths;
        let (shape_values, rest) = self.dims.as_slice()[output.dims_at..].split_at(shape);
        [shape_values, &rest[..strides]]
    }

    /// Writes every output's header back as the allocator gave it.
    pub fn restore(&self) {
        for output in self.list.as_slice() {
            let was = output.header;
            // SAFETY: a live managed tensor the call allocated, whose header is written whole;
            // then its shape and strides arrays (the framework's) get back the values they had,
            // as many as they had.
            unsafe {
                (*output.managed.as_ptr()).dl_tensor = was;
                for (array, kept) in [was.shape, was.strides].into_iter().zip(self.kept(output)) {
                    if !kept.is_empty() {
                        std::ptr::copy_nonoverlapping(kept.as_ptr(), array, kept.len());
                    }
                }
            }
        }
    }

    /// Whether every output was returned (none is left for the call to delete).
    #[inline(always)]
    pub fn all_returned(&self) -> bool {
        self.unreturned == 0
    }

    /// The outputs never returned (the call deletes them).
    pub fn unreturned(&self) -> impl Iterator<Item = NonNull<DLManagedTensorVersioned>> + '_ {
        self.list.as_slice().iter().filter(|o| !o.returned).map(|o| o.managed)
    }
}

/// Whether `array` holds `values` (a loop: shapes are a few values, shorter than a `memcmp` call).
///
/// # Safety
/// `array` points to `values.len()` readable values (or `values` is empty).
#[inline(always)]
unsafe fn holds(array: *const i64, values: &[i64]) -> bool {
    // SAFETY: the caller's contract.
    values.iter().enumerate().all(|(i, &value)| unsafe { *array.add(i) } == value)
}

/// A header's shape and strides (each empty where its pointer is NULL or `ndim` is 0).
///
/// # Safety
/// Non-NULL `shape` and `strides` point to `ndim` values (`ndim` in `0..=MAX_NDIM`, else both
/// are taken as empty).
unsafe fn dims(header: &DLTensor) -> [&[i64]; 2] {
    let n = crate::layout::checked_ndim(header.ndim).unwrap_or_default();
    // SAFETY: the caller's contract.
    let of = |p: *mut i64| if p.is_null() || n == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(p, n) } };
    [of(header.shape), of(header.strides)]
}
