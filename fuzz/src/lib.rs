//! The checks behind dlpx's fuzz targets, one function per target. Each takes the fuzzer's bytes,
//! builds what a hostile producer or caller could hand dlpx (every field from the bytes, memory
//! owned here), calls the crate's own entry, and asserts what must hold whatever the input:
//! a clean error or a valid result, every deleter called exactly once, copies equal to a
//! reference copy byte for byte. A failed assertion or a sanitizer report is a finding.
//!
//! `fuzz_targets/*.rs` hand these functions to libFuzzer (`cargo +nightly fuzz run <target>`);
//! `tests/corpus.rs` runs the checked-in corpus through them with a plain `cargo test`.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_void, CStr};
use std::ptr::{self, NonNull};

use dlpx::abi::*;
use dlpx::layout::{self, MAX_NDIM};
use dlpx::{chain, copy, device_names, dtype, ErrorKind, Tensor};

/// The fuzzer's bytes read as fields, little-endian; past the end every read is zero.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
    fn u8(&mut self) -> u8 {
        self.bytes::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.bytes())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.bytes())
    }
    fn i32(&mut self) -> i32 {
        i32::from_le_bytes(self.bytes())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes())
    }
    fn i64(&mut self) -> i64 {
        i64::from_le_bytes(self.bytes())
    }
    /// Mostly one of a few small values (what real tensors have), sometimes anything: the
    /// fuzzer reaches both the checks' edges and the paths past them.
    fn small_or_any_i64(&mut self, small: u8) -> i64 {
        match self.u8() % 4 {
            0 => self.i64(),
            _ => (self.u8() % small) as i64,
        }
    }
    fn ndim(&mut self) -> i32 {
        match self.u8() % 4 {
            0 => self.i32(),
            _ => (self.u8() % 6) as i32,
        }
    }
    fn device(&mut self) -> DLDevice {
        let device_type = match self.u8() % 4 {
            0 => DeviceType(self.i32()),
            _ => DeviceType::CPU,
        };
        let device_id = match self.u8() % 4 {
            0 => self.i32(),
            _ => 0,
        };
        DLDevice { device_type, device_id }
    }
    fn dtype(&mut self) -> DLDataType {
        DLDataType { code: self.u8(), bits: self.u8(), lanes: self.u16() }
    }
}

/// Shape (or strides) storage for a fuzzed `ndim`: `ndim` values where dlpx may read them. An
/// `ndim` past [`MAX_NDIM`] must be refused before the array is read, so it gets a few values
/// more than the limit and no more (a read past them is a sanitizer report).
fn dims(input: &mut Input, ndim: i32, small: u8) -> Vec<i64> {
    let len = ndim.clamp(0, MAX_NDIM as i32 + 8) as usize;
    (0..len).map(|_| input.small_or_any_i64(small)).collect()
}

fn ptr_or_null(values: &mut [i64], null: bool) -> *mut i64 {
    if null {
        ptr::null_mut()
    } else {
        values.as_mut_ptr()
    }
}

thread_local! {
    static DELETES: Cell<usize> = const { Cell::new(0) };
}

unsafe extern "C" fn count_versioned(_: *mut DLManagedTensorVersioned) {
    DELETES.with(|d| d.set(d.get() + 1));
}

unsafe extern "C" fn count_legacy(_: *mut DLManagedTensor) {
    DELETES.with(|d| d.set(d.get() + 1));
}

fn deletes() -> usize {
    DELETES.with(Cell::get)
}

fn assert_clean_refusal(err: &dlpx::Error) {
    assert_eq!(err.kind, ErrorKind::BufferError, "{err}");
    assert!(err.message().starts_with("dlpx: "), "{err}");
}

/// What an accepted import must be: everything `from_dlpack` promises its caller.
fn assert_valid(t: &Tensor) {
    let dl = t.dl_tensor();
    assert!((0..=MAX_NDIM as i32).contains(&dl.ndim));
    assert!(device_names::is_known(dl.device.device_type));
    dtype::check(dl.dtype).unwrap();
    let numel = layout::numel(t.shape()).unwrap();
    layout::nbytes(numel, dl.dtype, t.flags()).unwrap();
    assert_eq!(t.strides().len(), t.shape().len(), "strides are always there after an import");
    assert!(numel == 0 || !dl.data.is_null());
    assert_reach_fits(t, numel);
}

/// What every accepted import's strides promise, recomputed here in i128 apart from
/// `layout::reach` (issue 44): each byte stride fits in i64, every index's byte offset fits in
/// isize, and the addresses around the first element neither go below 0 nor wrap.
fn assert_reach_fits(t: &Tensor, numel: u64) {
    let dl = t.dl_tensor();
    let bits = layout::element_bits(dl.dtype, t.flags()) as i128;
    let (mut below, mut above) = (0i128, 0i128);
    for (&extent, &stride) in t.shape().iter().zip(t.strides()) {
        let step = stride as i128 * bits;
        assert!(step.abs() <= isize::MAX as i128 * 8, "a byte stride that overflows: {stride}");
        if numel > 0 {
            let span = (extent as i128 - 1) * step;
            *(if span < 0 { &mut below } else { &mut above }) += span.abs();
        }
    }
    if numel == 0 {
        return;
    }
    let limit = isize::MAX as i128 * 8;
    assert!(below <= limit && above + bits <= limit, "a reach past isize::MAX: {:?} {:?}", t.shape(), t.strides());
    let first = dl.data as usize as i128 + dl.byte_offset as i128;
    assert!(first - (below + 7) / 8 >= 0, "a reach below address 0");
    assert!(first + (above + bits + 7) / 8 <= u64::MAX as i128, "a reach that wraps the address space");
}

/// Target `import_managed`: an arbitrary `DLManagedTensorVersioned` or legacy `DLManagedTensor`
/// through `Tensor::from_managed` / `from_legacy` and the kernel API's check.
pub fn import_managed(data: &[u8]) {
    let mut input = Input(data);
    let versioned = input.u8() % 2 == 0;
    let major = match input.u8() % 4 {
        0 => input.u32(),
        _ => DLPACK_MAJOR_VERSION,
    };
    let minor = input.u32();
    let flags = input.u64();
    let ndim = input.ndim();
    let device = input.device();
    let dtype = input.dtype();
    let nulls = input.u8();
    let byte_offset = input.u64();
    let mut shape = dims(&mut input, ndim, 5);
    let mut strides = dims(&mut input, ndim, 9);
    let mut buffer = vec![0u8; 64];
    let dl_tensor = DLTensor {
        data: if nulls & 1 != 0 { ptr::null_mut() } else { buffer.as_mut_ptr().cast() },
        device,
        ndim,
        dtype,
        shape: ptr_or_null(&mut shape, nulls & 2 != 0),
        strides: ptr_or_null(&mut strides, nulls & 4 != 0),
        byte_offset,
    };
    let before = deletes();
    if versioned {
        let mut m = DLManagedTensorVersioned {
            version: DLPackVersion { major, minor },
            manager_ctx: ptr::null_mut(),
            deleter: Some(count_versioned),
            flags,
            dl_tensor,
        };
        let managed = NonNull::from(&mut m);
        // The kernel API's check and the importer agree, and the check deletes what it refuses.
        // SAFETY: `m` and every array it points to live to the end of this function.
        match unsafe { dlpx::tensor::check_managed_or_delete(managed) } {
            Err(err) => {
                assert_clean_refusal(&err);
                assert_eq!(deletes() - before, 1, "a refused tensor is deleted once");
                // SAFETY: as above (the counting deleter frees nothing).
                assert!(unsafe { Tensor::from_managed(managed) }.is_err());
            }
            Ok(complete) => {
                assert_eq!(complete, ndim == 0 || nulls & 4 == 0, "only NULL strides need an owner");
                // SAFETY: as above.
                let t = unsafe { Tensor::from_managed_or_delete(managed) }.expect("the check accepted it");
                assert_valid(&t);
                round_trip(&t);
                drop(t);
                assert_eq!(deletes() - before, 1, "the last owner deletes once");
            }
        }
    } else {
        let mut m = DLManagedTensor { dl_tensor, manager_ctx: ptr::null_mut(), deleter: Some(count_legacy) };
        // SAFETY: as above.
        match unsafe { Tensor::from_legacy(NonNull::from(&mut m)) } {
            Err(err) => {
                assert_clean_refusal(&err);
                assert_eq!(deletes(), before, "a refused legacy tensor stays the caller's");
            }
            Ok(t) => {
                assert_valid(&t);
                round_trip(&t);
                drop(t);
                assert_eq!(deletes() - before, 1);
            }
        }
    }
}

/// Exports of an import (versioned coming home, legacy deleted) keep one owner.
fn round_trip(t: &Tensor) {
    let export = t.export_versioned(0).unwrap();
    // SAFETY: our own export, owned here.
    let back = unsafe { Tensor::from_managed(export) }.unwrap();
    assert!(back.same_owner(t));
    let legacy = t.export_legacy().unwrap();
    // SAFETY: our own export; its deleter is called once.
    unsafe { (legacy.as_ref().deleter.unwrap())(legacy.as_ptr()) };
}

/// Larger allocations are skipped: libFuzzer counts a single malloc over its limit as a crash.
const MAX_ALLOCATION: u64 = 1 << 20;

thread_local! {
    static SET_ERRORS: RefCell<Vec<(String, String)>> = const { RefCell::new(Vec::new()) };
}

unsafe extern "C" fn record_error(_ctx: *mut c_void, kind: *const c_char, message: *const c_char) {
    // SAFETY: dlpx passes NUL-terminated strings.
    let text = |p: *const c_char| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    SET_ERRORS.with(|e| e.borrow_mut().push((text(kind), text(message))));
}

/// Target `allocator`: an arbitrary prototype through the exchange table's allocator.
pub fn allocator(data: &[u8]) {
    let mut input = Input(data);
    let ndim = input.ndim();
    let device = input.device();
    let dtype = input.dtype();
    let null_shape = input.u8() % 8 == 0;
    let mut shape = dims(&mut input, ndim, 5);
    let fits = (0..=MAX_NDIM as i32).contains(&ndim);
    if fits && !null_shape && dtype::check(dtype).is_ok() {
        let size = layout::numel(&shape[..ndim as usize]).and_then(|n| layout::nbytes(n, dtype, 0));
        if size.is_ok_and(|bytes| bytes > MAX_ALLOCATION) {
            return;
        }
    }
    let prototype = DLTensor {
        data: ptr::null_mut(),
        device,
        ndim,
        dtype,
        shape: ptr_or_null(&mut shape, null_shape),
        strides: ptr::null_mut(),
        byte_offset: 0,
    };
    SET_ERRORS.with(|e| e.borrow_mut().clear());
    let allocate = dlpx::EXCHANGE_API.managed_tensor_allocator.unwrap();
    let mut out: *mut DLManagedTensorVersioned = ptr::null_mut();
    // SAFETY: the prototype's shape holds `ndim` values wherever the allocator may read them.
    let rc = unsafe {
        allocate(&prototype as *const DLTensor as *mut DLTensor, &mut out, ptr::null_mut(), Some(record_error))
    };
    let errors = SET_ERRORS.with(|e| e.borrow_mut().split_off(0));
    if rc != 0 {
        assert_eq!(errors.len(), 1, "SetError exactly once on failure");
        assert!(errors[0].1.starts_with("dlpx: allocator: "), "{:?}", errors[0]);
        assert!(ErrorKind::from_name(&errors[0].0).is_some(), "{:?}", errors[0]);
        return;
    }
    assert!(errors.is_empty(), "no SetError on success: {errors:?}");
    let managed = NonNull::new(out).expect("success with a tensor");
    // SAFETY: a fresh tensor from the allocator, ours until its deleter runs.
    let m = unsafe { managed.as_ref() };
    let dl = &m.dl_tensor;
    assert_eq!((dl.ndim, dl.dtype, dl.device, dl.byte_offset), (ndim, dtype, device, 0));
    let n = ndim as usize;
    // SAFETY: an allocator tensor has `ndim` shape and stride values.
    let (got_shape, got_strides) = unsafe {
        if n == 0 {
            (&[][..], &[][..])
        } else {
            (std::slice::from_raw_parts(dl.shape, n), std::slice::from_raw_parts(dl.strides, n))
        }
    };
    assert_eq!(got_shape, &shape[..n]);
    assert!(layout::is_contiguous(got_shape, got_strides));
    let nbytes = layout::nbytes(layout::numel(got_shape).unwrap(), dtype, m.flags).unwrap() as usize;
    if nbytes == 0 {
        assert!(dl.data.is_null(), "zero-size tensors get data = NULL");
    } else if device.device_type == DeviceType::CPU {
        assert_eq!(dl.data as usize % 256, 0, "256-byte aligned");
        // SAFETY: the block holds `nbytes` writable bytes (a sanitizer sees any shortfall).
        unsafe { ptr::write_bytes(dl.data.cast::<u8>(), 0xA5, nbytes) };
    }
    // SAFETY: the allocator's deleter, once.
    unsafe { (m.deleter.unwrap())(managed.as_ptr()) };
}

/// Target `chain_walk`: `prev_api` chains of arbitrary shape (NULLs, cycles, any majors, too
/// long) against a walk by index.
pub fn chain_walk(data: &[u8]) {
    let mut input = Input(data);
    let n = (input.u8() % 24) as usize;
    let mut tables: Vec<DLPackExchangeAPI> = (0..n)
        .map(|_| DLPackExchangeAPI {
            header: DLPackExchangeAPIHeader {
                version: DLPackVersion { major: (input.u8() % 4) as u32, minor: input.u8() as u32 },
                prev_api: ptr::null_mut(),
            },
            managed_tensor_allocator: None,
            managed_tensor_from_py_object_no_sync: None,
            managed_tensor_to_py_object_no_sync: None,
            dltensor_from_py_object_no_sync: None,
            current_work_stream: None,
        })
        .collect();
    // A link index of `n` (or more) is NULL.
    let next: Vec<usize> = (0..n).map(|_| input.u8() as usize % (n + 1)).collect();
    let head = input.u8() as usize % (n + 1);
    let base = tables.as_mut_ptr();
    let at = |i: usize| if i < n { base.wrapping_add(i).cast::<DLPackExchangeAPIHeader>() } else { ptr::null_mut() };
    for (i, table) in tables.iter_mut().enumerate() {
        table.header.prev_api = at(next[i]);
    }
    let mut expected = Vec::new();
    let mut i = head;
    let ending = loop {
        if i >= n {
            break chain::Ending::End;
        }
        if expected.contains(&i) {
            break chain::Ending::Cycle;
        }
        if expected.len() == chain::MAX_CHAIN {
            break chain::Ending::TooLong;
        }
        expected.push(i);
        i = next[i];
    };
    // SAFETY: every link is NULL or one of `tables`, alive to the end of this function.
    let walk = unsafe { chain::walk(at(head)) };
    assert_eq!(walk.ending, ending);
    assert_eq!(walk.links, expected.iter().map(|&i| at(i).cast_const()).collect::<Vec<_>>());
    let first_v1 = expected.iter().find(|&&i| tables[i].header.version.major == DLPACK_MAJOR_VERSION);
    // SAFETY: as above; the `'static` the selection returns is not kept past the tables.
    match (unsafe { chain::select_supported(at(head)) }, first_v1) {
        (Ok(table), Some(&i)) => assert!(ptr::eq(table, &tables[i])),
        (Err(err), None) => assert_clean_refusal(&err),
        (got, want) => panic!("selection {:?} for first major-1 link {want:?}", got.map(|t| t as *const _)),
    }
}

/// Target `dtype_device`: dtype and device names parsed from arbitrary text, and arbitrary
/// dtypes and devices named, each round trip stable.
pub fn dtype_device(data: &[u8]) {
    let mut input = Input(data);
    let (d, dev) = (input.dtype(), input.device());
    if dtype::check(d).is_ok() {
        // A dtype DLPack allows at a width no peer names ("float147") is printed so but is no
        // name: parsing is exact (issue 44), so its name reads back as itself or not at all.
        let name = dtype::dtype_name(d);
        let back = dtype::parse_dtype(&name);
        assert!(back.is_none() || back == Some(d), "{name} read back as {back:?}");
    }
    let name = device_names::name(dev);
    if device_names::is_known(dev.device_type) && dev.device_id >= 0 {
        assert_eq!(device_names::parse(&name), Some(dev), "{name}");
    } else {
        assert_eq!(device_names::parse(&name), None, "{name}");
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Some(parsed) = dtype::parse_dtype(text) {
        // A name may be spelled more than one way ("float32x04"); its canonical name parses back.
        assert_eq!(dtype::parse_dtype(&dtype::dtype_name(parsed)), Some(parsed), "{text:?}");
    }
    if let Some(parsed) = device_names::parse(text) {
        assert!(device_names::is_known(parsed.device_type) && parsed.device_id >= 0, "{text:?}");
        assert_eq!(device_names::parse(&device_names::name(parsed)), Some(parsed), "{text:?}");
    }
}

/// Target `copy`: `copy=True`'s routine (and `device="cpu"`'s) on small strided CPU tensors of
/// any dtype, lanes, padding, offset and strides (zero and negative too), against a reference
/// copy element by element.
pub fn copy(data: &[u8]) {
    let mut input = Input(data);
    let ndim = (input.u8() % 5) as usize;
    let mut shape: Vec<i64> = (0..ndim).map(|_| (input.u8() % 5) as i64).collect();
    let mut strides: Vec<i64> = (0..ndim).map(|_| (input.u8() as i8 % 9) as i64).collect();
    const BITS: [u8; 9] = [1, 2, 4, 6, 8, 16, 32, 64, 128];
    let code = input.u8() % DataTypeCode::TABLE.len() as u8;
    let fixed = DataTypeCode(code).row().map_or(0, |row| row.bits);
    let bits = if fixed != 0 { fixed } else { BITS[input.u8() as usize % BITS.len()] };
    let dtype = DLDataType { code, bits, lanes: (input.u8() % 3) as u16 + 1 };
    if dtype::check(dtype).is_err() {
        return;
    }
    let flags = if input.u8() % 2 == 0 { 0 } else { DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED };
    let byte_offset = (input.u8() % 16) as u64;
    let numel: usize = shape.iter().product::<i64>() as usize;
    let nbytes = layout::nbytes(numel as u64, dtype, flags).unwrap() as usize;
    let element_bits = layout::element_bits(dtype, flags) as usize;
    let contiguous = layout::is_contiguous(&shape, &strides);

    // Element offsets of every index, row-major, and the buffer that holds them all.
    let mut offsets = vec![0i64];
    for (&extent, &stride) in shape.iter().zip(&strides) {
        offsets = offsets.iter().flat_map(|&o| (0..extent).map(move |i| o + i * stride)).collect();
    }
    let element_bytes = element_bits.div_ceil(8);
    let low = offsets.iter().copied().min().unwrap_or(0).min(0);
    let high = offsets.iter().copied().max().unwrap_or(0).max(0);
    let shift = (-low) as usize * element_bytes;
    let len = shift + byte_offset as usize + ((high + 1) as usize * element_bytes).max(nbytes) + 8;
    let mut buffer: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
    let first = shift + byte_offset as usize;
    let expected: Option<Vec<u8>> = if numel == 0 {
        Some(Vec::new())
    } else if element_bits % 8 == 0 {
        Some(
            offsets
                .iter()
                .flat_map(|&o| {
                    let at = (first as i64 + o * element_bytes as i64) as usize;
                    buffer[at..at + element_bytes].to_vec()
                })
                .collect(),
        )
    } else if contiguous {
        Some(buffer[first..first + nbytes].to_vec())
    } else {
        None // a packed sub-byte tensor with strides: refused
    };

    let mut m = DLManagedTensorVersioned {
        version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
        manager_ctx: ptr::null_mut(),
        deleter: Some(count_versioned),
        flags,
        dl_tensor: DLTensor {
            data: buffer.as_mut_ptr().wrapping_add(shift).cast(),
            device: DLDevice::CPU,
            ndim: ndim as i32,
            dtype,
            shape: ptr_or_null(&mut shape, ndim == 0),
            strides: ptr_or_null(&mut strides, ndim == 0),
            byte_offset,
        },
    };
    let before = deletes();
    // SAFETY: `m`, its arrays and the buffer live to the end of this function.
    let src = unsafe { Tensor::from_managed(NonNull::from(&mut m)) }.expect("a valid small tensor");
    for result in [copy::duplicate(&src), copy::to_new_cpu_tensor(&src)] {
        match (&expected, result) {
            (Some(want), Ok(dst)) => {
                assert!(dst.is_contiguous() && !dst.same_owner(&src));
                assert_eq!(dst.shape(), src.shape());
                assert_eq!(dst.nbytes() as usize, want.len());
                let got = if want.is_empty() {
                    &[][..]
                } else {
                    // SAFETY: a compact CPU tensor of `nbytes` bytes.
                    unsafe { std::slice::from_raw_parts(dst.dl_tensor().data.cast::<u8>(), want.len()) }
                };
                assert_eq!(
                    got,
                    &want[..],
                    "shape {:?} strides {:?} {dtype:?} flags {flags}",
                    src.shape(),
                    src.strides()
                );
            }
            (None, Err(err)) => assert_clean_refusal(&err),
            (want, got) => panic!("expected {want:?}, got {:?}", got.map(|t| t.nbytes())),
        }
    }
    drop(src);
    assert_eq!(deletes() - before, 1);
}
