// Strict argument values for the `arfuse` subcommands: a number is all digits (with an optional
// sign) and in range, a list is numbers separated by single commas. "8x", "abc", "" and "1,,2" are
// errors that name the option and what it wants, never a silent 8, 0 or a shorter list.
#pragma once

#include <string>
#include <vector>

namespace arfuse {
namespace cli {

// *error: "--ranks wants a whole number from 1 to 16, got '8x'".
bool parseIntArg(const std::string& option, const std::string& text, long long lo, long long hi, int* out,
                 std::string* error);
// *error: "--tokens wants a comma-separated list of whole numbers from 1 to 1048576, got 'abc'".
bool parseIntListArg(const std::string& option, const std::string& text, long long lo, long long hi,
                     std::vector<int>* out, std::string* error);

}  // namespace cli
}  // namespace arfuse
