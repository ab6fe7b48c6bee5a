// dlpx::TensorView: metadata as the producer left it, numel/nbytes with
// overflow checks, contiguity as torch/numpy define it, and data<T>()'s checks.
#include <dlpx/dlpx.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "check.hpp"
#include "fixture.hpp"

// An fp4 value a byte (as CUDA's __nv_fp4_e2m1 is), without CUDA's headers.
struct ByteFp4 {
  uint8_t bits;
};
template <>
struct dlpx::dtype_traits<ByteFp4> : dlpx::detail::dtype_constant<kDLFloat4_e2m1fn, 4> {};

namespace {


// Row-major strides, computed the plain way to compare with.
std::vector<int64_t> row_major(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;) s[k - 1] = s[k] * shape[k];
  return s;
}

// Whether the view of `f` is contiguous (a TensorView of a temporary's DLTensor does not
// compile: it would outlive it).
bool contiguous(const Fixture& f) { return dlpx::TensorView(f.t).is_contiguous(); }

}  // namespace

int main() {
  alignas(64) float buf[64] = {};
  const DLDataType f32 = dlpx::dtype_of<float>();

  check::run("metadata_is_read_through", [&] {
    Fixture f(buf, f32, {2, 3, 4}, row_major({2, 3, 4}));
    f.t.device = DLDevice{kDLCUDA, 1};
    f.t.byte_offset = 8;
    dlpx::TensorView v(f.t);
    CHECK_EQ(v.ndim(), 3);
    CHECK_EQ(v.shape().size(), size_t(3));
    CHECK_EQ(v.shape().data(), f.shape.data());
    CHECK_EQ(v.strides().data(), f.strides.data());
    for (int i = 0; i < 3; ++i) {
      CHECK_EQ(v.size(i), f.shape[i]);
      CHECK_EQ(v.stride(i), f.strides[i]);
    }
    CHECK(dlpx::same_dtype(v.dtype(), f32));
    CHECK(dlpx::same_device(v.device(), DLDevice{kDLCUDA, 1}));
    CHECK_EQ(v.byte_offset(), uint64_t(8));
    CHECK_EQ(v.data_ptr(), static_cast<void*>(reinterpret_cast<char*>(buf) + 8));
    CHECK_EQ(v.dtype_name(), std::string("float32"));
    CHECK_EQ(v.device_name(), std::string("cuda:1"));
    CHECK_EQ(&v.dltensor(), &f.t);
  });
  check::run("null_pointer_is_rejected", [&] {
    const DLTensor* none = nullptr;
    CHECK_THROWS(dlpx::Error, "tensor is NULL", dlpx::TensorView(none));
  });
  check::run("numel_and_nbytes", [&] {
    const std::vector<std::vector<int64_t>> shapes = {{}, {5}, {2, 3}, {4, 0, 3}, {1, 1, 7}, {2, 3, 4, 5}};
    for (const auto& s : shapes) {
      Fixture f(buf, f32, s, row_major(s));
      int64_t n = 1;
      for (int64_t e : s) n *= e;
      dlpx::TensorView v(f.t);
      CHECK_EQ(v.numel(), n);
      CHECK_EQ(v.nbytes(), n * int64_t(sizeof(float)));
    }
  });
  check::run("nbytes_of_packed_subbyte_and_lanes", [&] {
    Fixture f4(buf, DLDataType{kDLFloat4_e2m1fn, 4, 1}, {3}, {1});
    CHECK_EQ(dlpx::TensorView(f4.t).nbytes(), int64_t((3 * 4 + 7) / 8));
    Fixture f6(buf, DLDataType{kDLFloat6_e2m3fn, 6, 1}, {5}, {1});
    CHECK_EQ(dlpx::TensorView(f6.t).nbytes(), int64_t((5 * 6 + 7) / 8));
    Fixture x4(buf, DLDataType{kDLFloat, 32, 4}, {3}, {1});
    CHECK_EQ(dlpx::TensorView(x4.t).nbytes(), int64_t(3 * 4 * sizeof(float)));
  });
  check::run("numel_overflow_and_negative_extent_throw", [&] {
    const int64_t big = std::numeric_limits<int64_t>::max() / 2 + 1;
    Fixture f(buf, f32, {big, 2}, {2, 1});
    CHECK_THROWS(dlpx::Error, "overflows int64_t", dlpx::TensorView(f.t).numel());
    Fixture g(buf, f32, {big / 2}, {1});
    CHECK_THROWS(dlpx::Error, "overflows int64_t", dlpx::TensorView(g.t).nbytes());
    Fixture h(buf, f32, {2, -3}, {1, 1});
    CHECK_THROWS(dlpx::Error, "shape[1] = -3 is negative", dlpx::TensorView(h.t).numel());
  });
  check::run("numel_of_an_empty_tensor_is_zero_wherever_its_zero_is", [&] {
    // The extents before the 0 multiply past int64_t: the count is 0 all the same.
    const int64_t big = int64_t(1) << 62;
    Fixture first(nullptr, f32, {0, big, 4}, {}, true);
    Fixture last(nullptr, f32, {big, 4, 0}, {}, true);
    CHECK_EQ(dlpx::TensorView(first.t).numel(), int64_t(0));
    CHECK_EQ(dlpx::TensorView(last.t).numel(), int64_t(0));
    CHECK_EQ(dlpx::TensorView(last.t).nbytes(), int64_t(0));
  });
  check::run("nbytes_fits_where_the_bytes_do", [&] {
    // 2^60 float32s (a broadcast: torch.empty(1).expand(2**60)) are 2^62 bytes, though 2^65 bits.
    Fixture f(buf, f32, {int64_t(1) << 60}, {0});
    CHECK_EQ(dlpx::TensorView(f.t).nbytes(), int64_t(1) << 62);
    Fixture f4(buf, DLDataType{kDLFloat4_e2m1fn, 4, 1}, {(int64_t(1) << 62) + 3}, {1});
    CHECK_EQ(dlpx::TensorView(f4.t).nbytes(), (int64_t(1) << 61) + 2);
  });
  check::run("nbytes_of_padded_subbyte_is_a_byte_a_value", [&] {
    // As data<T>() reads the flag: one fp4 value a byte.
    Fixture f4(buf, DLDataType{kDLFloat4_e2m1fn, 4, 1}, {8}, {1});
    CHECK_EQ(dlpx::TensorView(f4.t, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED).nbytes(), int64_t(8));
    CHECK_EQ(dlpx::TensorView(f4.t).nbytes(), int64_t(4));
  });
  check::run("null_strides_mean_row_major", [&] {
    Fixture f(buf, f32, {2, 3, 4}, {}, true);
    dlpx::TensorView v(f.t);
    CHECK(v.strides().empty());
    const auto expect = row_major(f.shape);
    for (int i = 0; i < 3; ++i) CHECK_EQ(v.stride(i), expect[i]);
    CHECK(v.is_contiguous());
  });
  check::run("is_contiguous_like_torch", [&] {
    CHECK(contiguous(Fixture(buf, f32, {2, 3}, {3, 1})));
    // Transposed.
    CHECK(!contiguous(Fixture(buf, f32, {3, 2}, {1, 3})));
    // Sliced every other column.
    CHECK(!contiguous(Fixture(buf, f32, {2, 3}, {6, 2})));
    // Extent-1 dimensions may carry any stride.
    CHECK(contiguous(Fixture(buf, f32, {2, 1, 3}, {3, 99, 1})));
    // ...but do not excuse the dimensions around them.
    CHECK(!contiguous(Fixture(buf, f32, {2, 1, 3}, {7, 99, 1})));
    // Broadcast (stride 0) over a real extent is not contiguous.
    CHECK(!contiguous(Fixture(buf, f32, {2, 3}, {0, 1})));
    // Zero-size tensors are contiguous whatever their strides.
    CHECK(contiguous(Fixture(nullptr, f32, {0, 3}, {7, 5})));
    // Rank 0.
    CHECK(contiguous(Fixture(buf, f32, {}, {})));
  });
  check::run("huge_shapes_are_answered_without_overflow", [&] {
    // A producer's shape whose products pass int64_t (UBSan saw `2 * 2^62`).
    const int64_t big = int64_t(1) << 62;
    CHECK(!contiguous(Fixture(buf, f32, {3, big, 2}, {7, 2, 1})));
    CHECK(!contiguous(Fixture(buf, f32, {3, big, 2}, {std::numeric_limits<int64_t>::max(), 2, 1})));
    CHECK(contiguous(Fixture(buf, f32, {1, big, 2}, {5, 2, 1})));  // past int64_t, only extents of 1
    CHECK(!contiguous(Fixture(buf, f32, {2, -3}, {1, 1})));
    // A negative extent beside an empty one, or without strides, is no layout either.
    CHECK(!contiguous(Fixture(buf, f32, {-3, 0}, {1, 1})));
    CHECK(!contiguous(Fixture(buf, f32, {-3, 0}, {}, true)));
    CHECK(!contiguous(Fixture(buf, f32, {-3}, {}, true)));
    // NULL strides: compact ones; INT64_MAX past int64_t (the empty tensor UBSan saw), 0
    // where an empty extent follows.
    Fixture empty(buf, f32, {0, big, 4}, {}, true);
    CHECK_EQ(dlpx::TensorView(empty.t).numel(), int64_t(0));
    CHECK_EQ(dlpx::TensorView(empty.t).stride(0), std::numeric_limits<int64_t>::max());
    CHECK_EQ(dlpx::TensorView(empty.t).stride(1), int64_t(4));
    Fixture with_zero(buf, f32, {5, big, 4, 0}, {}, true);
    CHECK_EQ(dlpx::TensorView(with_zero.t).stride(0), int64_t(0));
    CHECK_EQ(dlpx::TensorView(with_zero.t).stride(3), int64_t(1));
  });
  check::run("flags_read_only_and_subbyte", [&] {
    Fixture f(buf, f32, {4}, {1});
    const dlpx::TensorView bare(f.t);
    CHECK_EQ(bare.flags(), uint64_t(0));
    CHECK(!bare.read_only());
    const dlpx::TensorView ro(f.t, DLPACK_FLAG_BITMASK_READ_ONLY);
    CHECK(ro.read_only());
    CHECK_THROWS(dlpx::Error, "dlpx: the tensor is read-only; read it as const T", ro.data<float>());
    CHECK_EQ(ro.data<const float>(), static_cast<const float*>(buf));
    // fp4 (8 values in 4 bytes, packed) is no array of one-byte T; padded, it is.
    Fixture fp4(buf, DLDataType{kDLFloat4_e2m1fn, 4, 1}, {8}, {1});
    const dlpx::TensorView packed(fp4.t);
    CHECK_EQ(packed.nbytes(), int64_t(4));
    CHECK_THROWS(dlpx::Error, "float4_e2m1fn tensor occupies 4 bits (packed) but T occupies 8",
                 packed.data<ByteFp4>());
    const dlpx::TensorView padded(fp4.t, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED);
    CHECK_EQ(static_cast<void*>(padded.data<ByteFp4>()), static_cast<void*>(buf));
  });
  check::run("data_checks_dtype", [&] {
    Fixture f(buf, f32, {4}, {1});
    dlpx::TensorView v(f.t);
    CHECK_EQ(v.data<float>(), buf);
    CHECK_EQ(v.data<const float>(), static_cast<const float*>(buf));
    CHECK_THROWS(dlpx::Error, "dlpx: TensorView::data: expected int32, got float32", v.data<int32_t>());
    CHECK_THROWS(dlpx::Error, "expected float64, got float32", v.data<double>());
    Fixture b(buf, DLDataType{kDLBfloat, 16, 1}, {4}, {1});
    CHECK_THROWS(dlpx::Error, "expected uint16, got bfloat16", dlpx::TensorView(b.t).data<uint16_t>());
    Fixture lanes(buf, DLDataType{kDLFloat, 32, 2}, {4}, {1});
    CHECK_THROWS(dlpx::Error, "expected float32, got float32x2", dlpx::TensorView(lanes.t).data<float>());
    try {
      (void)v.data<int32_t>();
    } catch (const dlpx::Error& e) {
      CHECK_EQ(e.kind(), std::string("TypeError"));
    }
  });
  check::run("data_checks_alignment", [&] {
    Fixture f(buf, f32, {4}, {1});
    f.t.byte_offset = 2;
    dlpx::TensorView v(f.t);
    CHECK_THROWS(dlpx::Error, "not aligned to 4 bytes", v.data<float>());
    f.t.byte_offset = 4;
    CHECK_EQ(v.data<float>(), buf + 1);
  });
  check::run("data_of_a_tensor_without_data_is_null", [&] {
    Fixture f(nullptr, f32, {0}, {1});
    CHECK(dlpx::TensorView(f.t).data<float>() == nullptr);
  });
  return check::finish();
}
