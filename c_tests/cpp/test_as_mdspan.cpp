// dlpx::as_mdspan<T, Rank>: every bad input is refused with a message naming
// the failed check, and good inputs give a view whose elements are the
// tensor's. Built twice: with dlpx::StridedView, and (DLPX_MDSPAN_NAMESPACE =
// cuda::std) with a real layout_stride mdspan where CCCL is available.
#if defined(DLPX_MDSPAN_NAMESPACE)
#include <cuda/std/mdspan>
#endif
#include <dlpx/dlpx.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "check.hpp"
#include "fp4_stand_ins.hpp"
#include "fixture.hpp"

namespace {

// Element access that works for std::mdspan (no operator()) as well.
template <class M, class... I>
auto& elem(const M& md, I... idx) {
  const std::array<int64_t, sizeof...(I)> ix{static_cast<int64_t>(idx)...};
  int64_t off = 0;
  for (std::size_t k = 0; k < ix.size(); ++k) off += ix[k] * static_cast<int64_t>(md.stride(k));
  return md.data_handle()[off];
}

}  // namespace

int main() {
  alignas(64) float buf[64];
  for (int i = 0; i < 64; ++i) buf[i] = static_cast<float>(i);
  const DLDataType f32 = dlpx::dtype_of<float>();

  check::run("row_major_view_reads_the_tensor", [&] {
    Fixture f(buf, f32, {3, 4}, {4, 1});
    auto md = dlpx::as_mdspan<float, 2>(f.t);
    CHECK_EQ(md.rank(), std::size_t(2));
    CHECK_EQ(int64_t(md.extent(0)), int64_t(3));
    CHECK_EQ(int64_t(md.extent(1)), int64_t(4));
    CHECK_EQ(md.data_handle(), buf);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) CHECK_EQ(elem(md, i, j), buf[i * 4 + j]);
#if !defined(DLPX_MDSPAN_NAMESPACE) && !defined(__cpp_lib_mdspan)
    CHECK_EQ(md(2, 3), 11.0f);  // StridedView's own element access
    CHECK_EQ(md.size(), uint64_t(12));
#endif
  });
  check::run("strided_views_and_byte_offset", [&] {
    // Column 1 of a 4x4 matrix, seen as a transposed 2x2 block.
    Fixture f(buf, f32, {2, 2}, {1, 8});
    f.t.byte_offset = sizeof(float) * 1;
    auto md = dlpx::as_mdspan<const float, 2>(f.t);
    CHECK_EQ(md.data_handle(), static_cast<const float*>(buf + 1));
    CHECK_EQ(int64_t(md.stride(0)), int64_t(1));
    CHECK_EQ(int64_t(md.stride(1)), int64_t(8));
    CHECK_EQ(elem(md, 1, 1), buf[1 + 1 + 8]);
  });
  check::run("null_strides_mean_row_major", [&] {
    Fixture f(buf, f32, {2, 3, 4}, {});
    auto md = dlpx::as_mdspan<float, 3>(f.t);
    CHECK_EQ(int64_t(md.stride(0)), int64_t(12));
    CHECK_EQ(int64_t(md.stride(1)), int64_t(4));
    CHECK_EQ(int64_t(md.stride(2)), int64_t(1));
    CHECK_EQ(elem(md, 1, 2, 3), buf[23]);
  });
  check::run("rank_zero", [&] {
    Fixture f(buf + 5, f32, {}, {});
    auto md = dlpx::as_mdspan<float, 0>(f.t);
    CHECK_EQ(md.data_handle(), buf + 5);
    CHECK_EQ(md.rank(), std::size_t(0));
  });
  check::run("zero_size_with_null_data", [&] {
    Fixture f(nullptr, f32, {0, 3}, {3, 1});
    auto md = dlpx::as_mdspan<float, 2>(f.t);
    CHECK(md.data_handle() == nullptr);
    CHECK_EQ(int64_t(md.extent(0)), int64_t(0));
    // Broadcast strides of an empty tensor reach no element: accepted.
    Fixture g(nullptr, f32, {0, 3}, {0, 0});
    auto mg = dlpx::as_mdspan<float, 2>(g.t);
    CHECK(int64_t(mg.stride(0)) > 0 && int64_t(mg.stride(1)) > 0);
  });
  check::run("a_shape_whose_count_passes_int64_is_refused_as_such", [&] {
    float one = 0;
    Fixture f(&one, f32, {int64_t(1) << 62, 4}, {}, true);
    CHECK_THROWS(dlpx::Error, "the shape overflows int64_t", (dlpx::as_mdspan<float, 2>(f.t)));
  });
  check::run("empty_with_extents_whose_product_passes_int64", [&] {
    // No element, so no span: the product of the other extents (2^64) is no stride either.
    const int64_t big = int64_t(1) << 62;
    for (bool null_strides : {true, false}) {
      Fixture f(nullptr, f32, {big, 4, 0}, {4, 1, 1}, null_strides);
      auto md = dlpx::as_mdspan<float, 3>(f.t);
      CHECK_EQ(int64_t(md.extent(0)), big);
      CHECK_EQ(int64_t(md.extent(2)), int64_t(0));
      CHECK(int64_t(md.stride(0)) > 0 && int64_t(md.stride(1)) > 0 && int64_t(md.stride(2)) > 0);
    }
  });
  check::run("extent_one_strides_are_normalised", [&] {
    // torch: x.expand(1, 3) or x[:, None] leave odd strides on extent-1 dims.
    Fixture f(buf, f32, {3, 1, 4}, {4, 0, 1});
    auto md = dlpx::as_mdspan<float, 3>(f.t);
    CHECK_EQ(elem(md, 2, 0, 3), buf[11]);
    CHECK_EQ(int64_t(md.stride(0)), int64_t(4));
    CHECK_EQ(int64_t(md.stride(2)), int64_t(1));
    Fixture g(buf, f32, {3, 1, 4}, {4, 2, 1});  // no valid order with stride 2 kept
    auto mg = dlpx::as_mdspan<float, 3>(g.t);
    CHECK_EQ(elem(mg, 1, 0, 2), buf[6]);
    // Strides that are already a valid layout_stride are kept as they are.
    Fixture h(buf, f32, {2, 1, 3}, {3, 3, 1});
    auto mh = dlpx::as_mdspan<float, 3>(h.t);
    CHECK_EQ(int64_t(mh.stride(1)), int64_t(3));
  });
  check::run("wrong_ndim", [&] {
    Fixture f(buf, f32, {2, 3, 4}, {12, 4, 1});
    CHECK_THROWS(dlpx::Error, "dlpx: as_mdspan: expected ndim 2, got 3", (dlpx::as_mdspan<float, 2>(f.t)));
  });
  check::run("wrong_dtype", [&] {
    Fixture f(buf, DLDataType{kDLBfloat, 16, 1}, {4}, {1});
    CHECK_THROWS(dlpx::Error, "dlpx: as_mdspan: expected float32, got bfloat16", (dlpx::as_mdspan<float, 1>(f.t)));
    Fixture g(buf, f32, {4}, {1});
    CHECK_THROWS(dlpx::Error, "expected int32, got float32", (dlpx::as_mdspan<int32_t, 1>(g.t)));
    try {
      (void)dlpx::as_mdspan<int32_t, 1>(g.t);
    } catch (const dlpx::Error& e) {
      CHECK_EQ(e.kind(), std::string("TypeError"));
    }
  });
  check::run("wrong_device", [&] {
    Fixture f(buf, f32, {4}, {1});
    f.t.device = DLDevice{kDLCUDA, 1};
    CHECK_THROWS(dlpx::Error, "dlpx: as_mdspan: expected a cpu tensor, got cuda:1", (dlpx::as_mdspan<float, 1>(f.t)));
    auto md = dlpx::as_mdspan<float, 1>(f.t, kDLCUDA);  // a kernel that wants device memory
    CHECK_EQ(md.data_handle(), buf);
    f.t.device = DLDevice{kDLCPU, 0};
    CHECK_THROWS(dlpx::Error, "expected a cuda tensor, got cpu:0", (dlpx::as_mdspan<float, 1>(f.t, kDLCUDA)));
  });
  check::run("misaligned_data", [&] {
    Fixture f(buf, f32, {4}, {1});
    f.t.byte_offset = 2;
    CHECK_THROWS(dlpx::Error, "not aligned to 4 bytes for float32", (dlpx::as_mdspan<float, 1>(f.t)));
    Fixture g(reinterpret_cast<char*>(buf) + 1, f32, {4}, {1});
    CHECK_THROWS(dlpx::Error, "not aligned", (dlpx::as_mdspan<float, 1>(g.t)));
  });
  check::run("null_shape_and_data", [&] {
    Fixture f(buf, f32, {4}, {1});
    f.t.shape = nullptr;
    CHECK_THROWS(dlpx::Error, "shape is NULL", (dlpx::as_mdspan<float, 1>(f.t)));
    Fixture g(nullptr, f32, {4}, {1});
    CHECK_THROWS(dlpx::Error, "data is NULL", (dlpx::as_mdspan<float, 1>(g.t)));
    Fixture h(nullptr, f32, {}, {});
    CHECK_THROWS(dlpx::Error, "data is NULL", (dlpx::as_mdspan<float, 0>(h.t)));
  });
  check::run("negative_extent", [&] {
    Fixture f(buf, f32, {2, -1}, {1, 1});
    CHECK_THROWS(dlpx::Error, "shape[1] = -1 is negative", (dlpx::as_mdspan<float, 2>(f.t)));
  });
  check::run("broadcast_reversed_and_overlapping_strides", [&] {
    Fixture f(buf, f32, {2, 3}, {0, 1});
    CHECK_THROWS(dlpx::Error, "strides[0] = 0 is not positive", (dlpx::as_mdspan<float, 2>(f.t)));
    Fixture g(buf + 8, f32, {3}, {-1});
    CHECK_THROWS(dlpx::Error, "strides[0] = -1 is not positive", (dlpx::as_mdspan<float, 1>(g.t)));
    Fixture h(buf, f32, {3, 3}, {1, 1});  // sliding windows: elements overlap
    CHECK_THROWS(dlpx::Error, "overlap", (dlpx::as_mdspan<float, 2>(h.t)));
    Fixture o(buf, f32, {4, 4}, {int64_t(1) << 62, 1});
    CHECK_THROWS(dlpx::Error, "overflow", (dlpx::as_mdspan<float, 2>(o.t)));
  });
  check::run("subbyte_packing_must_match_T", [&] {
    uint8_t bytes[8] = {};
    // One fp4 per byte only fits a tensor flagged as padded.
    Fixture f(bytes, DLDataType{kDLFloat4_e2m1fn, 4, 1}, {8}, {1});
    CHECK_THROWS(dlpx::Error, "occupies 4 bits (packed) but T occupies 8", (dlpx::as_mdspan<Fp4, 1>(f.t)));
    DLManagedTensorVersioned m{};
    m.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    m.dl_tensor = f.t;
    m.flags = DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
    auto md = dlpx::as_mdspan<Fp4, 1>(m);
    CHECK_EQ(int64_t(md.extent(0)), int64_t(8));
    // A packed pair type matches the packed tensor and not the padded one.
    Fixture p(bytes, DLDataType{kDLFloat4_e2m1fn, 4, 2}, {8}, {1});
    auto mp = dlpx::as_mdspan<Fp4x2, 1>(p.t);
    CHECK_EQ(static_cast<void*>(mp.data_handle()), static_cast<void*>(bytes));
    m.dl_tensor = p.t;
    CHECK_THROWS(dlpx::Error, "occupies 16 bits (padded)", (dlpx::as_mdspan<Fp4x2, 1>(m)));
  });
  check::run("read_only_views_give_const_mdspans_only", [&] {
    // A read-only TensorView and a kernel's DlpxTensorView say so; their bare DLTensor cannot.
    Fixture f(buf, f32, {2, 3}, {3, 1});
    const dlpx::TensorView ro(f.t, DLPACK_FLAG_BITMASK_READ_ONLY);
    CHECK_THROWS(dlpx::Error, "read-only", (dlpx::as_mdspan<float, 2>(ro)));
    const auto of_ro = dlpx::as_mdspan<const float, 2>(ro);  // data_handle() is a reference into it
    CHECK_EQ(of_ro.data_handle(), static_cast<const float*>(buf));
    DlpxTensorView view{};
    view.tensor = f.t;
    view.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    CHECK_THROWS(dlpx::Error, "read-only", (dlpx::as_mdspan<float, 2>(view)));
    CHECK_EQ(int64_t((dlpx::as_mdspan<const float, 2>(view).extent(1))), int64_t(3));
    // Writable, each is an mdspan of float; a padded fp4 view is read as padded.
    view.flags = 0;
    const auto of_view = dlpx::as_mdspan<float, 2>(view);
    const auto of_tensor_view = dlpx::as_mdspan<float, 2>(dlpx::TensorView(f.t, 0));
    CHECK_EQ(of_view.data_handle(), buf);
    CHECK_EQ(of_tensor_view.data_handle(), buf);
    uint8_t bytes[8] = {};
    Fixture fp4(bytes, DLDataType{kDLFloat4_e2m1fn, 4, 1}, {8}, {1});
    view.tensor = fp4.t;
    view.flags = DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
    CHECK_EQ(int64_t((dlpx::as_mdspan<Fp4, 1>(view).extent(0))), int64_t(8));
    CHECK_EQ(int64_t((dlpx::as_mdspan<Fp4, 1>(dlpx::TensorView(fp4.t, view.flags)).extent(0))), int64_t(8));
  });
  check::run("round_trip_with_to_dltensor", [&] {
    auto h = dlpx::to_dltensor(buf, {2, 3, 4}, {1, 2, 6});
    DLTensor t = h.get();
    auto md = dlpx::as_mdspan<float, 3>(t);
    auto back = dlpx::to_dltensor(md);
    DLTensor u = back.get();
    CHECK_EQ(u.data, t.data);
    for (int i = 0; i < 3; ++i) {
      CHECK_EQ(u.shape[i], t.shape[i]);
      CHECK_EQ(u.strides[i], t.strides[i]);
    }
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) CHECK_EQ(elem(md, i, j, k), buf[i + 2 * j + 6 * k]);
  });
  return check::finish();
}
