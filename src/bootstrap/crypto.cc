#include "bootstrap/crypto.h"

#include <dlfcn.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

namespace arfuse {
namespace bootstrap {
namespace detail {

namespace {

// The few libcrypto entry points used, with the signatures OpenSSL 1.1 and 3.x both export. The
// incremental HMAC_CTX functions (deprecated in 3.x, still exported) avoid copying a large result
// into one buffer per connection; the one-shot HMAC() is the fallback should they ever go.
struct Libcrypto {
  void* handle = nullptr;
  std::string error;
  const void* (*sha256)() = nullptr;  // EVP_sha256
  unsigned char* (*hmac)(const void* md, const void* key, int keyLen, const unsigned char* data, size_t n,
                         unsigned char* out, unsigned int* outLen) = nullptr;  // HMAC
  int (*memcmp)(const void* a, const void* b, size_t n) = nullptr;             // CRYPTO_memcmp
  void* (*ctxNew)() = nullptr;                                                 // HMAC_CTX_new
  int (*ctxInit)(void* ctx, const void* key, int keyLen, const void* md, void* engine) = nullptr;
  int (*ctxUpdate)(void* ctx, const unsigned char* data, size_t n) = nullptr;
  int (*ctxFinal)(void* ctx, unsigned char* out, unsigned int* outLen) = nullptr;
  void (*ctxFree)(void* ctx) = nullptr;
  int (*digest)(const void* data, size_t n, unsigned char* md, unsigned int* len, const void* type,
                void* engine) = nullptr;  // EVP_Digest
  bool incremental() const { return ctxNew && ctxInit && ctxUpdate && ctxFinal && ctxFree; }
};

const Libcrypto& libcrypto() {
  static Libcrypto lib;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string tried;
    for (const char* name : {"libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so"}) {
      lib.handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib.handle) break;
      tried += std::string(tried.empty() ? "" : ", ") + name;
    }
    if (!lib.handle) {
      lib.error = "OpenSSL's libcrypto was not found (tried " + tried +
                  "): the rendezvous authenticates ranks with its HMAC; install it (Debian/Ubuntu: libssl3, "
                  "RHEL: openssl-libs) or put its directory on LD_LIBRARY_PATH";
      return;
    }
    lib.sha256 = reinterpret_cast<const void* (*)()>(dlsym(lib.handle, "EVP_sha256"));
    lib.hmac = reinterpret_cast<decltype(lib.hmac)>(dlsym(lib.handle, "HMAC"));
    lib.memcmp = reinterpret_cast<decltype(lib.memcmp)>(dlsym(lib.handle, "CRYPTO_memcmp"));
    lib.ctxNew = reinterpret_cast<decltype(lib.ctxNew)>(dlsym(lib.handle, "HMAC_CTX_new"));
    lib.ctxInit = reinterpret_cast<decltype(lib.ctxInit)>(dlsym(lib.handle, "HMAC_Init_ex"));
    lib.ctxUpdate = reinterpret_cast<decltype(lib.ctxUpdate)>(dlsym(lib.handle, "HMAC_Update"));
    lib.ctxFinal = reinterpret_cast<decltype(lib.ctxFinal)>(dlsym(lib.handle, "HMAC_Final"));
    lib.ctxFree = reinterpret_cast<decltype(lib.ctxFree)>(dlsym(lib.handle, "HMAC_CTX_free"));
    lib.digest = reinterpret_cast<decltype(lib.digest)>(dlsym(lib.handle, "EVP_Digest"));
    if (!lib.sha256 || !lib.hmac || !lib.memcmp || !lib.digest) {
      lib.error = "the libcrypto found lacks EVP_sha256, EVP_Digest, HMAC or CRYPTO_memcmp: install OpenSSL 1.1 or 3";
      lib.sha256 = nullptr;
    }
  });
  return lib;
}

}  // namespace

Status hmacSha256(const uint8_t* key, std::initializer_list<Span> parts, uint8_t out[kTagBytes]) {
  const Libcrypto& c = libcrypto();
  if (!c.sha256) return ARFUSE_FAIL_TEXT(arfuseSystemError, c.error);
  unsigned int len = 0;
  if (c.incremental()) {
    void* ctx = c.ctxNew();
    bool ok = ctx && c.ctxInit(ctx, key, static_cast<int>(kSecretBytes), c.sha256(), nullptr) == 1;
    for (const Span& p : parts)
      ok = ok && (p.size == 0 || c.ctxUpdate(ctx, static_cast<const unsigned char*>(p.data), p.size) == 1);
    ok = ok && c.ctxFinal(ctx, out, &len) == 1 && len == kTagBytes;
    if (ctx) c.ctxFree(ctx);
    if (!ok) return ARFUSE_FAIL(arfuseSystemError, "libcrypto's HMAC-SHA256 failed");
    return Status();
  }
  size_t total = 0;
  for (const Span& p : parts) total += p.size;
  std::vector<unsigned char> data;
  data.reserve(total);
  for (const Span& p : parts)
    if (p.size)
      data.insert(data.end(), static_cast<const unsigned char*>(p.data),
                  static_cast<const unsigned char*>(p.data) + p.size);
  if (!c.hmac(c.sha256(), key, static_cast<int>(kSecretBytes), data.data(), data.size(), out, &len) || len != kTagBytes)
    return ARFUSE_FAIL(arfuseSystemError, "libcrypto's HMAC-SHA256 failed");
  return Status();
}

Status sha256(const void* data, size_t n, uint8_t out[kTagBytes]) {
  const Libcrypto& c = libcrypto();
  if (!c.sha256) return ARFUSE_FAIL_TEXT(arfuseSystemError, c.error);
  unsigned int len = 0;
  if (c.digest(data, n, out, &len, c.sha256(), nullptr) == 1 && len == kTagBytes) return Status();
  return ARFUSE_FAIL(arfuseSystemError, "libcrypto's SHA-256 failed");
}

bool tagsEqual(const uint8_t* a, const uint8_t* b) {
  const Libcrypto& c = libcrypto();
  if (c.memcmp) return c.memcmp(a, b, kTagBytes) == 0;
  return false;  // no libcrypto: no tag was computed either, so nothing can verify
}

Status randomBytes(void* out, size_t n) {
  auto* p = static_cast<unsigned char*>(out);
  size_t got = 0;
  while (got < n) {
    const ssize_t k = getrandom(p + got, n - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return ARFUSE_FAIL(arfuseSystemError, "getrandom: %s", std::strerror(errno));
    got += static_cast<size_t>(k);
  }
  return Status();
}

}  // namespace detail
}  // namespace bootstrap
}  // namespace arfuse
