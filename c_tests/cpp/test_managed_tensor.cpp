// dlpx::ManagedTensor: the deleter runs exactly once through moves, release,
// reset and exceptions; allocation failures carry SetError's kind and
// message; foreign majors are refused as DLPack requires. Uses a scripted
// exchange table and dlpx's own (dlpx_exchange_api()).
#include <dlpx/dlpx.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "check.hpp"

namespace {

// Every tensor the fake table hands out, and how often each was deleted.
struct Box {
  DLManagedTensorVersioned m{};
  int64_t shape[8]{};
  int64_t strides[8]{};
  float data[64]{};
  int deletions = 0;
};
std::vector<Box*> g_boxes;

void count_delete(DLManagedTensorVersioned* m) { static_cast<Box*>(m->manager_ctx)->deletions++; }

enum class Mode { ok, set_error, silent_failure, error_with_tensor, ok_without_tensor, major_two };
Mode g_mode = Mode::ok;
DLTensor g_last_prototype{};
int64_t g_last_shape[8]{};

Box* new_box(const DLTensor* proto) {
  Box* b = new Box;
  g_boxes.push_back(b);
  b->m.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  b->m.manager_ctx = b;
  b->m.deleter = count_delete;
  b->m.dl_tensor = *proto;
  b->m.dl_tensor.data = b->data;
  b->m.dl_tensor.shape = b->shape;
  b->m.dl_tensor.strides = b->strides;
  int64_t s = 1;
  for (int i = proto->ndim - 1; i >= 0; --i) {
    b->shape[i] = proto->shape[i];
    b->strides[i] = s;
    s *= proto->shape[i];
  }
  return b;
}

int fake_alloc(DLTensor* proto, DLManagedTensorVersioned** out, void* ctx,
               void (*set_error)(void*, const char*, const char*)) {
  g_last_prototype = *proto;
  for (int i = 0; i < proto->ndim && i < 8; ++i) g_last_shape[i] = proto->shape[i];
  switch (g_mode) {
    case Mode::ok:
      *out = &new_box(proto)->m;
      return 0;
    case Mode::set_error:
      set_error(ctx, "MemoryError", "fake: allocator: out of fake memory");
      return -1;
    case Mode::silent_failure:
      return -1;
    case Mode::error_with_tensor:
      *out = &new_box(proto)->m;
      set_error(ctx, "RuntimeError", "fake: allocator: failed late");
      return -1;
    case Mode::ok_without_tensor:
      *out = nullptr;
      return 0;
    case Mode::major_two: {
      Box* b = new_box(proto);
      b->m.version.major = DLPACK_MAJOR_VERSION + 1;
      *out = &b->m;
      return 0;
    }
  }
  return -1;
}

// A producer that fails (-1) yet hands a tensor over: the caller must still free it.
int fake_from_py_failing_with_tensor(void*, DLManagedTensorVersioned** out) {
  DLTensor proto{};
  proto.dtype = dlpx::dtype_of<float>();
  *out = &new_box(&proto)->m;
  return -1;
}

DLPackExchangeAPI make_table() {
  DLPackExchangeAPI api{};
  api.header.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  api.managed_tensor_allocator = fake_alloc;
  return api;
}
const DLPackExchangeAPI g_api = make_table();

const DLDataType f32 = dlpx::dtype_of<float>();

// Each box must have been deleted exactly once by the end of a case.
void expect_all_deleted_once() {
  for (Box* b : g_boxes) {
    CHECK_EQ(b->deletions, 1);
    delete b;
  }
  g_boxes.clear();
  g_mode = Mode::ok;
}

}  // namespace

int main() {
  check::run("allocate_passes_the_prototype", [] {
    {
      auto t = dlpx::ManagedTensor::allocate(&g_api, {2, 3, 4}, f32, DLDevice{kDLCPU, 0});
      CHECK(static_cast<bool>(t));
      CHECK_EQ(g_last_prototype.ndim, 3);
      CHECK_EQ(g_last_shape[0], int64_t(2));
      CHECK_EQ(g_last_shape[2], int64_t(4));
      CHECK(dlpx::same_dtype(g_last_prototype.dtype, f32));
      dlpx::TensorView v = t.view();
      CHECK_EQ(v.numel(), int64_t(24));
      CHECK(v.is_contiguous());
      CHECK_EQ(v.data<float>(), g_boxes.back()->data);
      std::vector<long> shape{5, 6};
      auto u = dlpx::ManagedTensor::allocate(&g_api, shape, f32);
      CHECK_EQ(u.view().numel(), int64_t(30));
      std::array<int64_t, 1> a1{7};
      auto w = dlpx::ManagedTensor::allocate(&g_api, a1, f32);
      CHECK_EQ(w.view().size(0), int64_t(7));
    }
    expect_all_deleted_once();
  });
  check::run("deleter_once_through_moves", [] {
    {
      auto a = dlpx::ManagedTensor::allocate(&g_api, {2}, f32);
      DLManagedTensorVersioned* raw = a.get();
      dlpx::ManagedTensor b(std::move(a));
      CHECK(!a);
      CHECK_EQ(b.get(), raw);
      dlpx::ManagedTensor c;
      c = std::move(b);
      CHECK_EQ(c.get(), raw);
      c = std::move(c);  // self-move keeps the tensor
      CHECK_EQ(c.get(), raw);
      CHECK_EQ(g_boxes[0]->deletions, 0);
      std::vector<dlpx::ManagedTensor> many;
      for (int i = 0; i < 10; ++i) many.push_back(dlpx::ManagedTensor::allocate(&g_api, {i}, f32));
      CHECK_EQ(g_boxes[5]->deletions, 0);
    }
    expect_all_deleted_once();
  });
  check::run("move_assignment_deletes_the_old_tensor", [] {
    auto a = dlpx::ManagedTensor::allocate(&g_api, {1}, f32);
    auto b = dlpx::ManagedTensor::allocate(&g_api, {1}, f32);
    a = std::move(b);
    CHECK_EQ(g_boxes[0]->deletions, 1);
    CHECK_EQ(g_boxes[1]->deletions, 0);
    a.reset();
    CHECK(!a);
    expect_all_deleted_once();
  });
  check::run("release_hands_ownership_back", [] {
    DLManagedTensorVersioned* raw = nullptr;
    {
      auto a = dlpx::ManagedTensor::allocate(&g_api, {3}, f32);
      raw = a.release();
      CHECK(!a);
      CHECK_EQ(a.get(), static_cast<DLManagedTensorVersioned*>(nullptr));
    }
    CHECK_EQ(g_boxes[0]->deletions, 0);
    dlpx::ManagedTensor again(raw);  // adopt
    CHECK_EQ(again->dl_tensor.shape[0], int64_t(3));
    again.reset();
    expect_all_deleted_once();
  });
  check::run("deleter_once_when_an_exception_unwinds", [] {
    try {
      auto a = dlpx::ManagedTensor::allocate(&g_api, {3}, f32);
      (void)a.view().data<double>();  // throws TypeError
      CHECK(false);
    } catch (const dlpx::Error& e) {
      CHECK_EQ(e.kind(), std::string("TypeError"));
    }
    expect_all_deleted_once();
  });
  check::run("set_error_becomes_dlpx_error", [] {
    g_mode = Mode::set_error;
    try {
      (void)dlpx::ManagedTensor::allocate(&g_api, {3}, f32);
      CHECK(false);
    } catch (const dlpx::Error& e) {
      CHECK_EQ(e.kind(), std::string("MemoryError"));
      CHECK_EQ(std::string(e.what()), std::string("fake: allocator: out of fake memory"));
    }
    expect_all_deleted_once();
  });
  check::run("failure_without_set_error_is_reported", [] {
    g_mode = Mode::silent_failure;
    CHECK_THROWS(dlpx::Error, "did not call SetError", dlpx::ManagedTensor::allocate(&g_api, {3}, f32));
    g_mode = Mode::ok_without_tensor;
    CHECK_THROWS(dlpx::Error, "returned 0 with no tensor", dlpx::ManagedTensor::allocate(&g_api, {3}, f32));
    expect_all_deleted_once();
  });
  check::run("a_tensor_returned_with_an_error_is_freed", [] {
    g_mode = Mode::error_with_tensor;
    CHECK_THROWS(dlpx::Error, "failed late", dlpx::ManagedTensor::allocate(&g_api, {3}, f32));
    CHECK_EQ(g_boxes.size(), size_t(1));
    expect_all_deleted_once();
  });
  check::run("foreign_major_is_deleted_and_refused", [] {
    g_mode = Mode::major_two;
    try {
      (void)dlpx::ManagedTensor::allocate(&g_api, {3}, f32);
      CHECK(false);
    } catch (const dlpx::Error& e) {
      CHECK_EQ(e.kind(), std::string("BufferError"));
      CHECK(check::contains(e.what(), "unsupported DLPack major version 2"));
    }
    expect_all_deleted_once();
  });
  check::run("null_deleter_is_allowed", [] {
    DLManagedTensorVersioned m{};
    m.version = DLPackVersion{DLPACK_MAJOR_VERSION, 0};
    { dlpx::ManagedTensor t(&m); }
    CHECK(true);
  });
  check::run("bad_tables_and_arguments", [] {
    CHECK_THROWS(dlpx::Error, "table is NULL", dlpx::ManagedTensor::allocate(nullptr, {3}, f32));
    DLPackExchangeAPI no_alloc = make_table();
    no_alloc.managed_tensor_allocator = nullptr;
    CHECK_THROWS(dlpx::Error, "no allocator", dlpx::ManagedTensor::allocate(&no_alloc, {3}, f32));
    CHECK_THROWS(dlpx::Error, "ndim = -1 is negative",
                 dlpx::ManagedTensor::allocate(&g_api, nullptr, -1, f32, DLDevice{kDLCPU, 0}));
    CHECK_THROWS(dlpx::Error, "shape is NULL",
                 dlpx::ManagedTensor::allocate(&g_api, nullptr, 2, f32, DLDevice{kDLCPU, 0}));
    const dlpx::ManagedTensor none;
    CHECK_THROWS(dlpx::Error, "no tensor is owned", none.view());
    CHECK_THROWS(dlpx::Error, "no managed_tensor_from_py_object_no_sync",
                 dlpx::ManagedTensor::from_py_object(&g_api, nullptr));
    expect_all_deleted_once();
  });
  check::run("prev_api_chain_reaches_the_v1_table", [] {
    DLPackExchangeAPI newer = make_table();
    newer.header.version.major = DLPACK_MAJOR_VERSION + 1;
    newer.managed_tensor_allocator = nullptr;  // must not be used
    newer.header.prev_api = const_cast<DLPackExchangeAPIHeader*>(&g_api.header);
    { auto t = dlpx::ManagedTensor::allocate(&newer, {2}, f32); CHECK(static_cast<bool>(t)); }
    newer.header.prev_api = &newer.header;  // a cycle must not hang
    CHECK_THROWS(dlpx::Error, "has no v1 table", dlpx::ManagedTensor::allocate(&newer, {2}, f32));
    expect_all_deleted_once();
  });
  check::run("a_failing_producer_s_tensor_is_freed", [] {
    DLPackExchangeAPI api = make_table();
    api.managed_tensor_from_py_object_no_sync = fake_from_py_failing_with_tensor;
    CHECK_THROWS(dlpx::Error, "the producer failed", dlpx::ManagedTensor::from_py_object(&api, nullptr));
    CHECK_EQ(g_boxes.size(), size_t(1));
    expect_all_deleted_once();
  });
  check::run("a_shape_past_int64_is_refused_as_given", [] {
    const std::vector<uint64_t> shape = {2, (uint64_t(1) << 63) + 5};
    CHECK_THROWS(dlpx::Error, "shape[1] = 9223372036854775813 does not fit in int64_t",
                 dlpx::ManagedTensor::allocate(&g_api, shape, f32));
    CHECK(g_boxes.empty());
    const std::vector<uint32_t> small = {2, 3};
    { auto t = dlpx::ManagedTensor::allocate(&g_api, small, f32); CHECK_EQ(t.view().numel(), int64_t(6)); }
    expect_all_deleted_once();
  });
  check::run("flags_and_read_only", [] {
    auto a = dlpx::ManagedTensor::allocate(&g_api, {1}, f32);
    CHECK(!a.read_only());
    CHECK(a.view().data<float>() != nullptr);
    a->flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
    CHECK(a.read_only());
    // Its view and mdspan carry the flag: read as const T only.
    CHECK(a.view().read_only());
    CHECK_THROWS(dlpx::Error, "dlpx: the tensor is read-only; read it as const T", a.view().data<float>());
    CHECK(a.view().data<const float>() != nullptr);
    CHECK_THROWS(dlpx::Error, "dlpx: the tensor is read-only; read it as const T", (dlpx::as_mdspan<float, 1>(*a.get())));
    CHECK_EQ(static_cast<int64_t>(dlpx::as_mdspan<const float, 1>(*a.get()).extent(0)), int64_t(1));
    CHECK_EQ(dlpx::ManagedTensor().flags(), uint64_t(0));
    a.reset();
    expect_all_deleted_once();
  });
  check::run("dlpx_own_allocator", [] {
    auto t = dlpx::ManagedTensor::allocate({2, 3}, dlpx::dtype_of<double>());
    dlpx::TensorView v = t.view();
    CHECK_EQ(v.ndim(), 2);
    CHECK_EQ(v.numel(), int64_t(6));
    CHECK(v.is_contiguous());
    CHECK(dlpx::same_device(v.device(), DLDevice{kDLCPU, 0}));
    CHECK_EQ(t->version.major, uint32_t(DLPACK_MAJOR_VERSION));
    double* d = v.data<double>();
    for (int i = 0; i < 6; ++i) d[i] = i;  // the memory is really there (ASan checks)
    CHECK_EQ(d[5], 5.0);
    auto empty = dlpx::ManagedTensor::allocate(std::vector<int64_t>{0, 4}, dlpx::dtype_of<float>());
    CHECK(empty.view().data<float>() == nullptr);
  });
  check::run("dlpx_own_allocator_failure_carries_kind_and_message", [] {
    try {
      (void)dlpx::ManagedTensor::allocate({2, -3}, dlpx::dtype_of<float>());
      CHECK(false);
    } catch (const dlpx::Error& e) {
      CHECK_EQ(e.kind(), std::string("ValueError"));
      CHECK(std::strncmp(e.what(), "dlpx: ", 6) == 0);
      CHECK(check::contains(e.what(), "-3"));
    }
  });
  return check::finish();
}
