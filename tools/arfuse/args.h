// The arguments of the `arfuse` subcommands. Options: one walk over a subcommand's arguments, each
// option with what it does, so that every subcommand words "needs a value" and "unknown argument"
// alike. Strict values: a number is all digits (with an optional sign) and in range, a list is
// numbers separated by single commas. "8x", "abc", "" and "1,,2" are errors that name the option
// and what it wants, never a silent 8, 0 or a shorter list.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"

namespace arfuse {
namespace cli {

// A subcommand's options. parse() takes the arguments in order, so the first bad one is the one
// reported: an argument that is no option's name is "unknown argument '--x'", a value option
// without a next argument "--x needs a value", and a handler's own error ends the walk as it is.
class Options {
 public:
  // name: as given ("-d" or "--dtype"); false with *error set.
  using Apply = std::function<bool(const std::string& name, const std::string& value, std::string* error)>;
  // value: nullptr when none was given.
  using ApplyOptional = std::function<bool(const std::string* value, std::string* error)>;

  // An option without a value.
  void flag(std::initializer_list<const char*> names, std::function<void()> set);
  // An option with a value: the next argument, whatever it looks like.
  void value(std::initializer_list<const char*> names, Apply apply);
  // The same, stored as it is.
  void text(std::initializer_list<const char*> names, std::string* out);
  // An option whose value may be left out: NAME=VALUE (VALUE may be empty), or NAME VALUE where the
  // next argument is not empty and does not start with '-'; otherwise NAME alone.
  void optionalValue(const char* name, ApplyOptional apply);

  bool parse(const std::vector<std::string>& args, std::string* error) const;

 private:
  enum class Takes { kNothing, kValue, kOptionalValue };
  struct Option {
    std::vector<std::string> names;
    Takes takes;
    std::function<bool(const std::string& name, const std::string* value, std::string* error)> apply;
  };
  void add(std::initializer_list<const char*> names, Takes takes, decltype(Option::apply) apply);
  // The option `arg` names: by one of its names, or as NAME=VALUE of an optional value (the VALUE
  // in *inlineValue); nullptr when none.
  const Option* find(const std::string& arg, std::string* inlineValue) const;
  std::vector<Option> options_;
};

// *error: "--ranks wants a whole number from 1 to 16, got '8x'".
bool parseIntArg(const std::string& option, const std::string& text, long long lo, long long hi, int* out,
                 std::string* error);
// *error: "--tokens wants a comma-separated list of whole numbers from 1 to 1048576, got 'abc'".
bool parseIntListArg(const std::string& option, const std::string& text, long long lo, long long hi,
                     std::vector<int>* out, std::string* error);

// A dtype by arfuse's names (bf16, fp16, fp32) or nccl-tests' (bfloat16, half / float16, float /
// float32). *error: "--dtype wants bf16, fp16 or fp32 (or nccl-tests' bfloat16, half, float), got
// 'int8'".
bool parseDtypeArg(const std::string& option, const std::string& text, arfuseDataType_t* dtype, std::string* error);
// arfuse's name of it: "bf16", "fp16", "fp32".
const char* dtypeArgName(arfuseDataType_t dtype);

}  // namespace cli
}  // namespace arfuse
