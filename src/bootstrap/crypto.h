// Authentication primitives of the rendezvous, from OpenSSL's libcrypto (internal to arfuse_bootstrap).
//
// Why a library and not a few lines of our own: an HMAC and a random source are exactly the kind of
// code where a small mistake (a non-constant-time compare, a predictable seed) is invisible in tests
// and fatal in use. libcrypto is on every Linux machine that runs an inference server.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace arfuse {
namespace bootstrap {
namespace detail {

constexpr size_t kSecretBytes = 32;     // in the unique id
constexpr size_t kTagBytes = 32;        // HMAC-SHA256
constexpr size_t kChallengeBytes = 16;  // rank 0's per-connection challenge

struct Span {
  const void* data;
  size_t size;
};

// HMAC-SHA256 of the concatenation of `parts` under `key` (kSecretBytes). False only when libcrypto
// itself fails (then *error says how).
bool hmacSha256(const uint8_t* key, std::initializer_list<Span> parts, uint8_t out[kTagBytes], std::string* error);

// Constant-time equality of two tags.
bool tagsEqual(const uint8_t* a, const uint8_t* b);

// Cryptographically random bytes (RAND_bytes). False when the generator is not seeded or fails.
bool randomBytes(void* out, size_t n, std::string* error);

}  // namespace detail
}  // namespace bootstrap
}  // namespace arfuse
