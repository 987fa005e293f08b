// The grep floor: how error-like a line is that no signature of the catalogue knows. A verdict must
// never be worse than `grep` for the first error line, so every logger's way of saying "error" is read
// here by one general rule - a level word in any common format ([E], [ERROR], [TensorRT-LLM][ERROR],
// ERROR:, | ERROR |, level=error, "level":"error"), an exception name anywhere in the line, a failure
// phrase at the start of the message ("Failed to ...", "Unable to ...", a HIP guarantee(), a tool's
// "requirement error:") - not by an entry per product.
#pragma once

#include <cstddef>
#include <string_view>

namespace arfuse {
namespace triage {

struct ErrorLine {
  // 0: not an error line; 1: a failure phrase; 2: an exception name or a tool's "error:"; 3: an explicit
  // error / fatal level.
  int strength = 0;
  bool warning = false;   // said at warning level (weaker than any error-level line)
  bool echoLike = false;  // refers to a failure reported elsewhere ("see above", "died", "root cause")
  size_t exceptionAt = std::string_view::npos;  // offset of an exception name ("RuntimeError: ...") in body
};

// `level` is the level the line's prefix stated ('E', 'W', 'I', 'D', 'F' or 0). Lines at info or debug
// level are never error lines, whatever words they contain.
ErrorLine classifyErrorLine(std::string_view body, char level);

// Offset of an exception name followed by ": " or the end ("torch.OutOfMemoryError: ...",
// "hipErrorNoBinaryForGpu: ...", "tensorrt_llm::common::TllmException: ...") at a word start, or npos.
size_t findExceptionName(std::string_view body);

}  // namespace triage
}  // namespace arfuse
