#include "bootstrap/crypto.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <mutex>

namespace arfuse {
namespace bootstrap {
namespace detail {

namespace {

std::string lastOpensslError(const char* what) {
  const unsigned long e = ERR_get_error();
  char buf[256] = "unknown error";
  if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return std::string("libcrypto ") + what + ": " + buf;
}

// Fetched once: the fetch walks the provider tables, the context is per call.
EVP_MAC* hmacAlgorithm() {
  static EVP_MAC* mac = nullptr;
  static std::once_flag once;
  std::call_once(once, [] { mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr); });
  return mac;
}

}  // namespace

bool hmacSha256(const uint8_t* key, std::initializer_list<Span> parts, uint8_t out[kTagBytes], std::string* error) {
  EVP_MAC* mac = hmacAlgorithm();
  if (mac == nullptr) {
    *error = lastOpensslError("has no HMAC (EVP_MAC_fetch)");
    return false;
  }
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  if (ctx == nullptr) {
    *error = lastOpensslError("EVP_MAC_CTX_new");
    return false;
  }
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  bool ok = EVP_MAC_init(ctx, key, kSecretBytes, params) == 1;
  for (const Span& p : parts)
    ok = ok && (p.size == 0 || EVP_MAC_update(ctx, static_cast<const uint8_t*>(p.data), p.size) == 1);
  size_t len = 0;
  ok = ok && EVP_MAC_final(ctx, out, &len, kTagBytes) == 1 && len == kTagBytes;
  if (!ok) *error = lastOpensslError("HMAC-SHA256");
  EVP_MAC_CTX_free(ctx);
  return ok;
}

bool tagsEqual(const uint8_t* a, const uint8_t* b) { return CRYPTO_memcmp(a, b, kTagBytes) == 0; }

bool randomBytes(void* out, size_t n, std::string* error) {
  if (RAND_bytes(static_cast<unsigned char*>(out), static_cast<int>(n)) == 1) return true;
  *error = lastOpensslError("RAND_bytes");
  return false;
}

}  // namespace detail
}  // namespace bootstrap
}  // namespace arfuse
