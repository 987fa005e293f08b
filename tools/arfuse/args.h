// The arguments of the `arfuse` subcommands: one grammar and one wording for every subcommand.
//
// Grammar (GNU getopt_long's): a long option's value is `--name=VALUE` or `--name VALUE`; a short
// option's is `-x VALUE` or `-xVALUE`; an option whose value may be left out takes it only as
// `--name=VALUE` or as a next argument that does not start with '-'; `--` ends the options.
//
// Wording: every error is one of these shapes, whichever subcommand reports it, so that a script or
// a person meets one sentence for one mistake:
//   unknown option '--x'                 (an argument that starts with '-' and is no option)
//   unexpected argument 'x'              (a subcommand that takes no operands)
//   --x needs a value
//   --x takes no value, got '--x=1'
//   --x wants <what it wants>, got '<what it got>'        (all the parse*Arg helpers below)
// Strict values: a number is all digits (with an optional sign) and in range, a list is items
// separated by single commas. "8x", "abc", "" and "1,,2" are errors that name the option and what it
// wants, never a silent 8, 0 or a shorter list.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"

namespace arfuse {
namespace cli {

// A subcommand's options. parse() takes the arguments in order, so the first bad one is the one
// reported; a handler's own error ends the walk as it is.
class Options {
 public:
  // name: as given ("-d" or "--dtype"); false with *error set.
  using Apply = std::function<bool(const std::string& name, const std::string& value, std::string* error)>;
  // value: nullptr when none was given.
  using ApplyOptional = std::function<bool(const std::string* value, std::string* error)>;

  // An option without a value.
  void flag(std::initializer_list<const char*> names, std::function<void()> set);
  // An option with a value: inline (--name=V, -xV) or the next argument, whatever it looks like.
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
  const Option* byName(const std::string& name) const;
  std::vector<Option> options_;
};

// "--x wants WHAT, got 'TEXT'": the one wording of a bad value.
std::string wantsError(const std::string& option, const std::string& what, const std::string& text);

// *error: "--ranks wants a whole number from 1 to 16, got '8x'".
bool parseIntArg(const std::string& option, const std::string& text, long long lo, long long hi, int* out,
                 std::string* error);
// *error: "--tokens wants a comma-separated list of whole numbers from 1 to 1048576, got 'abc'".
bool parseIntListArg(const std::string& option, const std::string& text, long long lo, long long hi,
                     std::vector<int>* out, std::string* error);
// A byte count with an optional K, M or G (x1024) suffix, as nccl-tests' -b/-e take it.
// *error: "-b wants a byte count from 1 to 1099511627776 (K, M, G: x1024), got '1Q'".
bool parseBytesArg(const std::string& option, const std::string& text, long long lo, long long hi, long long* out,
                   std::string* error);
// The hidden size: a multiple of 8 (whole 16-byte vectors of bf16 / fp16) from 8 to 2^20.
// *error: "--hidden wants a multiple of 8 from 8 to 1048576, got '12'".
bool parseHiddenArg(const std::string& option, const std::string& text, int* out, std::string* error);
// One of `choices`; *index is its position. *error: "--op wants fused, allreduce or addrmsnorm, got 'x'".
bool parseChoiceArg(const std::string& option, const std::string& text, const std::vector<std::string>& choices,
                    int* index, std::string* error);
// A comma-separated list of `choices`, none twice; *indices are their positions. *error:
// "--epilogue wants a comma-separated list of none, plain or fp8, got 'fp8,x' ('x' is not one)" or
// "--epilogue names 'fp8' twice". `alternative` is what else the option takes, said before the list
// ("all, or " -> "--algo wants all, or a comma-separated list of ...").
bool parseChoiceListArg(const std::string& option, const std::string& text, const std::vector<std::string>& choices,
                        std::vector<int>* indices, std::string* error, const std::string& alternative = "");
// "a", "a or b", "a, b or c".
std::string choiceText(const std::vector<std::string>& choices);

// An algorithm the library can be told to use (arfuseAlgo_t): auto and every path of the registry, in
// plan order. *error: "--algo wants auto, local, lowlatency, ..., got 'fast'".
std::vector<std::string> algoArgNames();
bool parseAlgoArg(const std::string& option, const std::string& text, int* algo, std::string* error);

// A dtype by arfuse's names (bf16, fp16, fp32) or nccl-tests' (bfloat16, half / float16, float /
// float32). *error: "--dtype wants bf16, fp16 or fp32 (or nccl-tests' bfloat16, half, float), got
// 'int8'".
bool parseDtypeArg(const std::string& option, const std::string& text, arfuseDataType_t* dtype, std::string* error);
// arfuse's name of it: "bf16", "fp16", "fp32".
const char* dtypeArgName(arfuseDataType_t dtype);

// "1 GPU", "2 GPUs": a count with its noun.
std::string countOf(long long n, const std::string& noun);

}  // namespace cli
}  // namespace arfuse
