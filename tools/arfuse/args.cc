#include "args.h"

#include <cerrno>
#include <cstdlib>

namespace arfuse {
namespace cli {
namespace {

bool toInt(const std::string& s, long long lo, long long hi, long long* v) {
  if (s.empty() || s.size() > 20) return false;
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t k = i; k < s.size(); ++k)
    if (s[k] < '0' || s[k] > '9') return false;
  errno = 0;
  const long long x = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE || x < lo || x > hi) return false;
  *v = x;
  return true;
}

std::string range(long long lo, long long hi) { return "from " + std::to_string(lo) + " to " + std::to_string(hi); }

}  // namespace

bool parseIntArg(const std::string& option, const std::string& text, long long lo, long long hi, int* out,
                 std::string* error) {
  long long v = 0;
  if (!toInt(text, lo, hi, &v)) {
    *error = option + " wants a whole number " + range(lo, hi) + ", got '" + text + "'";
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

bool parseIntListArg(const std::string& option, const std::string& text, long long lo, long long hi,
                     std::vector<int>* out, std::string* error) {
  std::vector<int> values;
  size_t p = 0;
  while (true) {
    const size_t c = text.find(',', p);
    const std::string item = text.substr(p, c == std::string::npos ? std::string::npos : c - p);
    long long v = 0;
    if (!toInt(item, lo, hi, &v)) {
      *error = option + " wants a comma-separated list of whole numbers " + range(lo, hi) + ", got '" + text + "'" +
               (text.empty() || item == text ? "" : " ('" + item + "' is not one)");
      return false;
    }
    values.push_back(static_cast<int>(v));
    if (c == std::string::npos) break;
    p = c + 1;
  }
  *out = values;
  return true;
}

}  // namespace cli
}  // namespace arfuse
