// dlpx C++ layer: the exception type every dlpx C++ function throws for a
// failure reported by a DLPack producer or found in a tensor's metadata.
#ifndef DLPX_CPP_ERROR_HPP_
#define DLPX_CPP_ERROR_HPP_

#include <stdexcept>
#include <string>
#include <utility>

namespace dlpx {

/// A dlpx failure: `what()` is the message ("dlpx: ...") and `kind()` the
/// Python exception name a C caller would have received ("ValueError",
/// "TypeError", "MemoryError", "BufferError", ...), so code that forwards the
/// error to Python can raise the matching exception.
class Error : public std::runtime_error {
 public:
  /// Makes an error of the given kind; `message` becomes `what()`.
  Error(std::string kind, const std::string& message)
      : std::runtime_error(message), kind_(std::move(kind)) {}

  /// The Python exception name of this error ("ValueError", ...).
  const std::string& kind() const noexcept { return kind_; }

 private:
  std::string kind_;
};

}  // namespace dlpx

#endif  // DLPX_CPP_ERROR_HPP_
