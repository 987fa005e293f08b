// The integer a C caller passed for an enum, read without loading it as the C++ enum type: C lets a
// caller pass any int, and loading an out-of-range value as the enum is undefined behaviour (UBSan:
// "load of value 99, which is not a valid value for type 'arfuseDataType_t'"). The C ABI converts
// every enum argument this way and checks its range first (api/validate.h); checks deeper inside
// that must stay defensive read the raw value the same way.
#pragma once

#include <cstring>

namespace arfuse {

template <typename E>
int rawEnum(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

}  // namespace arfuse
