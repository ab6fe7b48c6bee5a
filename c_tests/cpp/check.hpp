// A tiny assertion kit for the C++ tests: every CHECK counts, a failure
// prints where and what, and finish() prints the "N passed, M failed" line
// that ctest's logs show, returning non-zero when anything failed.
#ifndef DLPX_C_TESTS_CPP_CHECK_HPP_
#define DLPX_C_TESTS_CPP_CHECK_HPP_

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <type_traits>

namespace check {

inline int& passed() {
  static int n = 0;
  return n;
}
inline int& failed() {
  static int n = 0;
  return n;
}

inline void record(bool ok, const char* file, int line, const char* what, const std::string& detail = {}) {
  if (ok) {
    ++passed();
    return;
  }
  ++failed();
  std::fprintf(stderr, "%s:%d: FAILED: %s%s%s\n", file, line, what, detail.empty() ? "" : " -- ",
               detail.c_str());
}

template <class F>
void run(const char* name, F&& body) {
  const int before = failed();
  try {
    body();
  } catch (const std::exception& e) {
    record(false, __FILE__, __LINE__, name, std::string("unexpected exception: ") + e.what());
  } catch (...) {
    record(false, __FILE__, __LINE__, name, "unexpected non-std exception");
  }
  std::printf("%s %s\n", failed() == before ? "ok  " : "FAIL", name);
}

inline int finish() {
  std::printf("%d passed, %d failed\n", passed(), failed());
  return failed() == 0 ? 0 : 1;
}

inline bool contains(const std::string& haystack, const char* needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace check

#define CHECK(cond) ::check::record(static_cast<bool>(cond), __FILE__, __LINE__, #cond)

#define CHECK_EQ(a, b)                                                                                  \
  do {                                                                                                  \
    const auto& check_a_ = (a);                                                                         \
    const auto& check_b_ = (b);                                                                         \
    const bool check_ok_ = check_a_ == check_b_;                                                        \
    ::check::record(check_ok_, __FILE__, __LINE__, #a " == " #b,                                        \
                    check_ok_ ? std::string() : ::check::show(check_a_) + " vs " + ::check::show(check_b_)); \
  } while (0)

// Runs `expr`, which must throw `Ex` whose what() contains `needle`.
#define CHECK_THROWS(Ex, needle, expr)                                                                \
  do {                                                                                                \
    std::string check_msg_ = "no exception";                                                          \
    bool check_ok_ = false;                                                                           \
    try {                                                                                             \
      (void)(expr);                                                                                   \
    } catch (const Ex& e) {                                                                           \
      check_msg_ = e.what();                                                                          \
      check_ok_ = ::check::contains(check_msg_, needle);                                              \
    } catch (const std::exception& e) {                                                               \
      check_msg_ = std::string("other exception: ") + e.what();                                       \
    }                                                                                                 \
    ::check::record(check_ok_, __FILE__, __LINE__, #expr " throws " #Ex " with \"" needle "\"",       \
                    check_ok_ ? std::string() : check_msg_);                                          \
  } while (0)

namespace check {

inline std::string show(const std::string& s) { return "\"" + s + "\""; }
inline std::string show(const char* s) { return s == nullptr ? "NULL" : "\"" + std::string(s) + "\""; }
inline std::string show(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}
inline std::string show(bool v) { return v ? "true" : "false"; }
template <class T>
std::string show(const T& v) {
  if constexpr (std::is_pointer<T>::value) {
    return show(static_cast<const void*>(v));
  } else if constexpr (std::is_enum<T>::value) {
    return std::to_string(static_cast<long long>(v));
  } else if constexpr (std::is_integral<T>::value) {
    return std::to_string(v);
  } else if constexpr (std::is_floating_point<T>::value) {
    return std::to_string(v);
  } else {
    return "<value>";
  }
}

}  // namespace check

#endif  // DLPX_C_TESTS_CPP_CHECK_HPP_
