#include "args.h"

#include <cerrno>
#include <cstdlib>
#include <utility>

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

void Options::add(std::initializer_list<const char*> names, Takes takes, decltype(Option::apply) apply) {
  options_.push_back(Option{std::vector<std::string>(names.begin(), names.end()), takes, std::move(apply)});
}

void Options::flag(std::initializer_list<const char*> names, std::function<void()> set) {
  add(names, Takes::kNothing, [set](const std::string&, const std::string*, std::string*) {
    set();
    return true;
  });
}

void Options::value(std::initializer_list<const char*> names, Apply apply) {
  add(names, Takes::kValue, [apply](const std::string& name, const std::string* value, std::string* error) {
    return apply(name, *value, error);
  });
}

void Options::text(std::initializer_list<const char*> names, std::string* out) {
  add(names, Takes::kValue, [out](const std::string&, const std::string* value, std::string*) {
    *out = *value;
    return true;
  });
}

void Options::optionalValue(const char* name, ApplyOptional apply) {
  add({name}, Takes::kOptionalValue,
      [apply](const std::string&, const std::string* value, std::string* error) { return apply(value, error); });
}

const Options::Option* Options::find(const std::string& arg, std::string* inlineValue) const {
  for (const Option& o : options_)
    for (const std::string& name : o.names)
      if (arg == name) return &o;
  for (const Option& o : options_) {
    const std::string prefix = o.names[0] + "=";
    if (o.takes == Takes::kOptionalValue && arg.compare(0, prefix.size(), prefix) == 0) {
      *inlineValue = arg.substr(prefix.size());
      return &o;
    }
  }
  return nullptr;
}

bool Options::parse(const std::vector<std::string>& args, std::string* error) const {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& k = args[i];
    std::string inlineValue;
    const Option* o = find(k, &inlineValue);
    if (!o) {
      *error = "unknown argument '" + k + "'";
      return false;
    }
    const std::string* value = nullptr;
    if (o->takes == Takes::kValue) {
      if (i + 1 >= args.size()) {
        *error = k + " needs a value";
        return false;
      }
      value = &args[++i];
    } else if (o->takes == Takes::kOptionalValue) {
      if (k != o->names[0])
        value = &inlineValue;
      else if (i + 1 < args.size() && !args[i + 1].empty() && args[i + 1][0] != '-')
        value = &args[++i];
    }
    if (!o->apply(k, value, error)) return false;
  }
  return true;
}

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

bool parseDtypeArg(const std::string& option, const std::string& text, arfuseDataType_t* dtype, std::string* error) {
  static const std::pair<const char*, arfuseDataType_t> kNames[] = {
      {"bf16", arfuseBfloat16},   {"bfloat16", arfuseBfloat16}, {"fp16", arfuseFloat16},  {"half", arfuseFloat16},
      {"float16", arfuseFloat16}, {"fp32", arfuseFloat32},      {"float", arfuseFloat32}, {"float32", arfuseFloat32}};
  for (const auto& n : kNames)
    if (text == n.first) {
      *dtype = n.second;
      return true;
    }
  *error = option + " wants bf16, fp16 or fp32 (or nccl-tests' bfloat16, half, float), got '" + text + "'";
  return false;
}

const char* dtypeArgName(arfuseDataType_t dtype) {
  return dtype == arfuseFloat32 ? "fp32" : dtype == arfuseFloat16 ? "fp16" : "bf16";
}

}  // namespace cli
}  // namespace arfuse
