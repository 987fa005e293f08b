#include "args.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>

#include "algos/registry.h"

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

// The items of a comma list, empty ones included ("a,,b" -> a, "", b).
std::vector<std::string> commaItems(const std::string& v) {
  std::vector<std::string> items;
  size_t p = 0;
  while (true) {
    const size_t c = v.find(',', p);
    items.push_back(v.substr(p, c == std::string::npos ? std::string::npos : c - p));
    if (c == std::string::npos) return items;
    p = c + 1;
  }
}

// " ('x' is not one)" when the list has more than the one bad item.
std::string whichItem(const std::string& text, const std::string& item) {
  return text.empty() || item == text ? "" : " ('" + item + "' is not one)";
}

bool isLongOption(const std::string& s) { return s.size() > 2 && s[0] == '-' && s[1] == '-'; }
bool isShortOption(const std::string& s) { return s.size() >= 2 && s[0] == '-' && s[1] != '-'; }

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

const Options::Option* Options::byName(const std::string& name) const {
  for (const Option& o : options_)
    for (const std::string& n : o.names)
      if (n == name) return &o;
  return nullptr;
}

bool Options::parse(const std::vector<std::string>& args, std::string* error) const {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& k = args[i];
    if (k == "--") {  // the end of the options; no subcommand of this parser takes operands
      if (i + 1 < args.size()) return *error = "unexpected argument '" + args[i + 1] + "'", false;
      return true;
    }
    // The option's name and, when the argument holds it, its value: --name=VALUE, -xVALUE.
    std::string name = k;
    bool hasInline = false;
    std::string inlineValue;
    const Option* o = byName(k);
    if (!o && isLongOption(k) && k.find('=') != std::string::npos) {
      name = k.substr(0, k.find('='));
      inlineValue = k.substr(name.size() + 1);
      hasInline = true;
      o = byName(name);
    } else if (!o && isShortOption(k) && k.size() > 2) {
      const Option* s = byName(k.substr(0, 2));
      if (s && s->takes == Takes::kValue) {
        o = s;
        name = k.substr(0, 2);
        inlineValue = k.substr(2);
        hasInline = true;
      }
    }
    if (!o) {
      *error = (k.size() > 1 && k[0] == '-' ? "unknown option '" : "unexpected argument '") + k + "'";
      return false;
    }
    const std::string* value = nullptr;
    switch (o->takes) {
      case Takes::kNothing:
        if (hasInline) return *error = name + " takes no value, got '" + k + "'", false;
        break;
      case Takes::kValue:
        if (hasInline) {
          value = &inlineValue;
        } else {
          if (i + 1 >= args.size()) return *error = name + " needs a value", false;
          value = &args[++i];
        }
        break;
      case Takes::kOptionalValue:
        if (hasInline)
          value = &inlineValue;
        else if (i + 1 < args.size() && !args[i + 1].empty() && args[i + 1][0] != '-')
          value = &args[++i];
        break;
    }
    if (!o->apply(name, value, error)) return false;
  }
  return true;
}

std::string wantsError(const std::string& option, const std::string& what, const std::string& text) {
  return option + " wants " + what + ", got '" + text + "'";
}

bool parseIntArg(const std::string& option, const std::string& text, long long lo, long long hi, int* out,
                 std::string* error) {
  long long v = 0;
  if (!toInt(text, lo, hi, &v)) return *error = wantsError(option, "a whole number " + range(lo, hi), text), false;
  *out = static_cast<int>(v);
  return true;
}

bool parseIntListArg(const std::string& option, const std::string& text, long long lo, long long hi,
                     std::vector<int>* out, std::string* error) {
  std::vector<int> values;
  for (const std::string& item : commaItems(text)) {
    long long v = 0;
    if (!toInt(item, lo, hi, &v)) {
      *error =
          wantsError(option, "a comma-separated list of whole numbers " + range(lo, hi), text) + whichItem(text, item);
      return false;
    }
    values.push_back(static_cast<int>(v));
  }
  *out = values;
  return true;
}

bool parseBytesArg(const std::string& option, const std::string& text, long long lo, long long hi, long long* out,
                   std::string* error) {
  std::string digits = text;
  long long mult = 1;
  if (!digits.empty()) {
    const char s = digits.back();
    mult = s == 'K' || s == 'k' ? 1ll << 10 : s == 'M' || s == 'm' ? 1ll << 20 : s == 'G' || s == 'g' ? 1ll << 30 : 1;
    if (mult > 1) digits.pop_back();
  }
  long long v = 0;
  const bool ok =
      !digits.empty() && digits[0] != '-' && digits[0] != '+' && toInt(digits, 0, hi / mult, &v) && v * mult >= lo;
  if (!ok) return *error = wantsError(option, "a byte count " + range(lo, hi) + " (K, M, G: x1024)", text), false;
  *out = v * mult;
  return true;
}

bool parseHiddenArg(const std::string& option, const std::string& text, int* out, std::string* error) {
  long long v = 0;
  if (!toInt(text, 8, 1 << 20, &v) || v % 8 != 0)
    return *error = wantsError(option, "a multiple of 8 " + range(8, 1 << 20), text), false;
  *out = static_cast<int>(v);
  return true;
}

std::string choiceText(const std::vector<std::string>& choices) {
  std::string s;
  for (size_t i = 0; i < choices.size(); ++i) s += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  return s;
}

bool parseChoiceArg(const std::string& option, const std::string& text, const std::vector<std::string>& choices,
                    int* index, std::string* error) {
  const auto it = std::find(choices.begin(), choices.end(), text);
  if (it == choices.end()) return *error = wantsError(option, choiceText(choices), text), false;
  *index = static_cast<int>(it - choices.begin());
  return true;
}

bool parseChoiceListArg(const std::string& option, const std::string& text, const std::vector<std::string>& choices,
                        std::vector<int>* indices, std::string* error, const std::string& alternative) {
  std::vector<int> out;
  for (const std::string& item : commaItems(text)) {
    const auto it = std::find(choices.begin(), choices.end(), item);
    if (it == choices.end()) {
      *error = wantsError(option, alternative + "a comma-separated list of " + choiceText(choices), text) +
               whichItem(text, item);
      return false;
    }
    const int k = static_cast<int>(it - choices.begin());
    if (std::find(out.begin(), out.end(), k) != out.end())
      return *error = option + " names '" + item + "' twice", false;
    out.push_back(k);
  }
  *indices = out;
  return true;
}

// The names come from the one list of paths (algos/registry.h), in plan order: a new path is a name
// here without an edit (the dummy-path test proves it).
std::vector<std::string> algoArgNames() {
  std::vector<std::string> n{"auto"};
  for (const AlgoEntry& e : algoRegistry()) n.push_back(e.name);
  return n;
}

bool parseAlgoArg(const std::string& option, const std::string& text, int* algo, std::string* error) {
  const std::vector<std::string> names = algoArgNames();
  int k = 0;
  if (!parseChoiceArg(option, text, names, &k, error)) return false;
  *algo = parseAlgoName(names[k]);
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
  *error = wantsError(option, "bf16, fp16 or fp32 (or nccl-tests' bfloat16, half, float)", text);
  return false;
}

const char* dtypeArgName(arfuseDataType_t dtype) {
  return dtype == arfuseFloat32 ? "fp32" : dtype == arfuseFloat16 ? "fp16" : "bf16";
}

std::string countOf(long long n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

}  // namespace cli
}  // namespace arfuse
