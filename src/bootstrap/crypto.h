// Authentication primitives of the rendezvous (internal to arfuse_bootstrap): HMAC-SHA256 from
// OpenSSL's libcrypto, random bytes from the kernel.
//
// Why a library and not a few lines of our own: an HMAC is exactly the kind of code where a small
// mistake is invisible in tests and fatal in use. libcrypto is on every Linux machine that runs an
// inference server (Python's ssl module links it); it is opened at first use with dlopen, as NVML
// is, so building arfuse needs no OpenSSL headers and a process that never forms a multi-process
// group never loads it. Random bytes come from getrandom(2), the kernel's CSPRNG.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "base/status.h"

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

// HMAC-SHA256 of the concatenation of `parts` under `key` (kSecretBytes). Fails (arfuseSystemError)
// when libcrypto cannot be loaded or fails, saying which library was looked for and what to install.
Status hmacSha256(const uint8_t* key, std::initializer_list<Span> parts, uint8_t out[kTagBytes]);

// SHA-256 of data (libcrypto's EVP_Digest). The gathered result is hashed once and each connection's
// tag covers the digest, so rank 0 does not hash nranks * bytes once per peer.
Status sha256(const void* data, size_t n, uint8_t out[kTagBytes]);

// Constant-time equality of two tags (libcrypto's CRYPTO_memcmp).
bool tagsEqual(const uint8_t* a, const uint8_t* b);

// Cryptographically random bytes (getrandom). Fails when the kernel refuses.
Status randomBytes(void* out, size_t n);

}  // namespace detail
}  // namespace bootstrap
}  // namespace arfuse
