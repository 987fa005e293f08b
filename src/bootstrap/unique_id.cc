// The unique id: its byte layout, its validation, and the registry of listeners it refers to.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "bootstrap/bootstrap.h"
#include "bootstrap/crypto.h"
#include "bootstrap/socket.h"
#include "bootstrap/wire.h"

namespace arfuse {
namespace bootstrap {

using detail::getU16;
using detail::getU32;
using detail::getU64;
using detail::putU16;
using detail::putU32;
using detail::putU64;

namespace {

// Listeners opened by makeUniqueId, by nonce. A registry rather than a handle in UniqueId because the
// id is plain bytes that get copied around; the fd must stay with the process, not with the copy.
// Each listener expires: a process that makes ids and never uses them (a retry loop, a launcher that
// gave up) must not collect listening sockets.
struct Listener {
  int fd = -1;
  detail::Clock::time_point expires;
  int timeoutMs = 0;
};
struct Registry {
  std::mutex mu;
  std::map<uint64_t, Listener> listeners;
  std::map<uint64_t, int> expired;  // nonce -> its timeout, so that a late rank 0 hears why (bounded)
};

// Pending ids (listeners made and not yet taken by rank 0's allGather) one process may hold: each is
// a listening socket for up to Options::timeoutMs (30 s by default), so a loop that makes ids and
// never uses them used to exhaust the process's descriptors (under `ulimit -n 1024` the 1019th id
// failed, and then every other open() of the process). At most 64, and never more than a sixteenth
// of the descriptor limit.
size_t maxPendingIds() {
  rlimit lim{};
  size_t cap = 64;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    cap = std::min<size_t>(cap, std::max<size_t>(1, static_cast<size_t>(lim.rlim_cur) / 16));
  return cap;
}

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: usable from atexit handlers of other code
  return *r;
}

// Closes the listeners whose time is up. Caller holds r.mu.
void expireLocked(Registry& r) {
  const auto now = detail::Clock::now();
  for (auto it = r.listeners.begin(); it != r.listeners.end();) {
    if (now < it->second.expires) {
      ++it;
      continue;
    }
    detail::closeFd(it->second.fd);
    if (r.expired.size() >= 1024) r.expired.erase(r.expired.begin());
    r.expired[it->first] = it->second.timeoutMs;
    it = r.listeners.erase(it);
  }
}

// A failure when the process holds as many pending ids as it may. Caller holds r.mu.
Status tooManyPendingLocked(const Registry& r) {
  const size_t cap = maxPendingIds();
  if (r.listeners.size() < cap) return Status();
  return ARFUSE_FAIL_TEXT(arfuseSystemError,
                          "this process already holds " + std::to_string(r.listeners.size()) +
                              " unique ids that no rank 0 has used yet (the limit is " + std::to_string(cap) +
                              ", from 64 and the descriptor limit): each keeps a listening socket until rank 0's "
                              "arfuseCommInitRank takes it or its timeout passes; use the ids made, or let them "
                              "expire");
}

std::string hexOf(const uint8_t* p, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

}  // namespace

Status detail::takeListener(uint64_t nonce, int* fd) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  expireLocked(r);
  *fd = -1;
  auto it = r.listeners.find(nonce);
  if (it == r.listeners.end()) {
    auto ex = r.expired.find(nonce);
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument,
                            ex != r.expired.end()
                                ? "its listener expired " + detail::formatSeconds(ex->second / 1000.0) +
                                      " after arfuseGetUniqueId (the init timeout): call arfuseCommInitRank on rank 0 "
                                      "sooner, or raise ARFUSE_TIMEOUT_MS"
                                : std::string("rank 0 must run in the process that called arfuseGetUniqueId (or a "
                                              "child forked after it), once per id"));
  }
  *fd = it->second.fd;
  r.listeners.erase(it);
  return Status();
}

namespace detail {
SockAddr sockAddrOf(const IdInfo& info) {
  SockAddr a;
  if (info.family == AF_UNIX) return unixAbstractAddress(info.address);
  if (info.family == AF_INET) {
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(info.port);
    std::memcpy(&in.sin_addr, info.address, 4);
    std::memcpy(&a.storage, &in, sizeof(in));
    a.length = sizeof(in);
  } else {
    sockaddr_in6 in6{};
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(info.port);
    in6.sin6_scope_id = info.scopeId;
    std::memcpy(&in6.sin6_addr, info.address, 16);
    std::memcpy(&a.storage, &in6, sizeof(in6));
    a.length = sizeof(in6);
  }
  return a;
}
}  // namespace detail

std::string idAddress(const IdInfo& info) { return detail::formatAddress(detail::sockAddrOf(info)); }

Status encodeUniqueId(const IdInfo& info, UniqueId* id) {
  if (id == nullptr) {
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "unique id pointer is null");
  }
  if (info.family != AF_INET && info.family != AF_INET6 && info.family != AF_UNIX) {
    return ARFUSE_FAIL_TEXT(
        arfuseInvalidArgument,
        "unique id address family must be AF_UNIX, AF_INET or AF_INET6, got " + std::to_string(info.family));
  }
  if ((info.family != AF_UNIX && info.port == 0) || info.nonce == 0) {
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "unique id needs a non-zero port (TCP) and a non-zero nonce");
  }
  uint8_t* b = id->bytes;
  std::memset(b, 0, kUniqueIdBytes);
  putU32(b + detail::kIdOffMagic, detail::kIdMagic);
  putU16(b + detail::kIdOffVersion, detail::kIdVersion);
  putU16(b + detail::kIdOffFamily, info.family == AF_UNIX   ? detail::kIdFamilyUnix
                                   : info.family == AF_INET ? detail::kIdFamilyIpv4
                                                            : detail::kIdFamilyIpv6);
  putU16(b + detail::kIdOffPort, info.family == AF_UNIX ? 0 : info.port);
  std::memcpy(b + detail::kIdOffAddr, info.address, info.family == AF_INET ? 4 : 16);
  putU32(b + detail::kIdOffScope, info.scopeId);
  putU64(b + detail::kIdOffNonce, info.nonce);
  std::memcpy(b + detail::kIdOffSecret, info.secret, detail::kSecretBytes);
  putU32(b + detail::kIdOffChecksum, detail::checksum32(b, detail::kIdOffChecksum));
  return Status();
}

Status decodeUniqueId(const UniqueId& id, IdInfo* info) {
  const uint8_t* b = id.bytes;
  uint32_t magic = getU32(b + detail::kIdOffMagic);
  if (magic != detail::kIdMagic) {
    bool allZero = true;
    for (size_t i = 0; i < kUniqueIdBytes; ++i) allZero = allZero && b[i] == 0;
    return ARFUSE_FAIL_TEXT(
        arfuseInvalidArgument,
        allZero ? "unique id is all zeros: it was never filled in (call arfuseGetUniqueId on rank 0 and "
                  "pass its bytes to every rank)"
                : "unique id is corrupt (bad magic): pass the 128 bytes rank 0's arfuseGetUniqueId produced, "
                  "unchanged");
  }
  uint16_t version = getU16(b + detail::kIdOffVersion);
  if (version != detail::kIdVersion) {
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "unique id has format version " + std::to_string(version) +
                                                       " but this arfuse reads version " +
                                                       std::to_string(detail::kIdVersion) +
                                                       ": every process must run the same arfuse release");
  }
  if (getU32(b + detail::kIdOffChecksum) != detail::checksum32(b, detail::kIdOffChecksum)) {
    return ARFUSE_FAIL_TEXT(
        arfuseInvalidArgument,
        "unique id is corrupt (checksum mismatch): it was altered or truncated on its way to this process");
  }
  IdInfo out;
  uint16_t fam = getU16(b + detail::kIdOffFamily);
  out.family = fam == detail::kIdFamilyUnix   ? AF_UNIX
               : fam == detail::kIdFamilyIpv4 ? AF_INET
               : fam == detail::kIdFamilyIpv6 ? AF_INET6
                                              : 0;
  out.port = getU16(b + detail::kIdOffPort);
  std::memcpy(out.address, b + detail::kIdOffAddr, 16);
  out.scopeId = getU32(b + detail::kIdOffScope);
  out.nonce = getU64(b + detail::kIdOffNonce);
  std::memcpy(out.secret, b + detail::kIdOffSecret, detail::kSecretBytes);
  bool zerosOk = getU16(b + detail::kIdOffReserved) == 0;
  for (size_t i = detail::kIdOffZeros; i < detail::kIdOffChecksum; ++i) zerosOk = zerosOk && b[i] == 0;
  const bool portOk = out.family == AF_UNIX ? out.port == 0 : out.port != 0;
  if (out.family == 0 || !portOk || out.nonce == 0 || !zerosOk) {
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument,
                            "unique id is corrupt (invalid fields under a valid checksum): it was not made by arfuse");
  }
  if (info) *info = out;
  return Status();
}

Status uniqueIdFromBytes(const void* data, size_t size, UniqueId* id) {
  if (data == nullptr || id == nullptr) {
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "unique id bytes or output pointer is null");
  }
  if (size != kUniqueIdBytes) {
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "unique id must be exactly " + std::to_string(kUniqueIdBytes) +
                                                       " bytes, got " + std::to_string(size) +
                                                       " (truncated or padded on its way here?)");
  }
  UniqueId tmp;
  std::memcpy(tmp.bytes, data, kUniqueIdBytes);
  ARFUSE_CHECK(decodeUniqueId(tmp, nullptr));
  *id = tmp;
  return Status();
}

std::string uniqueIdToHex(const UniqueId& id) { return hexOf(id.bytes, kUniqueIdBytes); }

Status uniqueIdFromHex(const std::string& hex, UniqueId* id) {
  if (hex.size() != 2 * kUniqueIdBytes) {
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "unique id text must be " + std::to_string(2 * kUniqueIdBytes) +
                                                       " hex digits, got " + std::to_string(hex.size()) +
                                                       " characters");
  }
  uint8_t raw[kUniqueIdBytes];
  for (size_t i = 0; i < kUniqueIdBytes; ++i) {
    int v = 0;
    for (int k = 0; k < 2; ++k) {
      char c = hex[2 * i + k];
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) {
        return ARFUSE_FAIL_TEXT(arfuseInvalidArgument,
                                "unique id text has a non-hex character at position " + std::to_string(2 * i + k));
      }
      v = v * 16 + d;
    }
    raw[i] = static_cast<uint8_t>(v);
  }
  return uniqueIdFromBytes(raw, kUniqueIdBytes, id);
}

Status makeUniqueId(const Options& options, UniqueId* id) {
  if (id == nullptr) {
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "unique id pointer is null");
  }
  if (options.timeoutMs <= 0) {
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument,
                            "bootstrap timeout must be positive, got " + std::to_string(options.timeoutMs) + " ms");
  }
  if (!options.address.empty() && !options.ifname.empty() && options.address != "unix") {
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "give the bootstrap either an address ('" + options.address +
                                                       "') or an interface list ('" + options.ifname + "'), not both");
  }
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    expireLocked(r);
    ARFUSE_CHECK(tooManyPendingLocked(r));  // before a socket is opened
  }
  IdInfo info;
  ARFUSE_CHECK(detail::randomBytes(info.secret, detail::kSecretBytes));
  detail::SockAddr want, bound;
  const bool local = detail::usesUnixSocket(options.address, options.ifname);
  if (local) {
    ARFUSE_CHECK(detail::randomBytes(info.address, sizeof info.address));
    want = detail::unixAbstractAddress(info.address);
  } else {
    ARFUSE_CHECK(detail::resolveListenAddress(options.address, options.ifname, options.port, &want));
  }
  int fd = -1;
  ARFUSE_CHECK(detail::openListener(want, &bound, &fd));

  info.family = want.family();
  if (info.family == AF_UNIX) {
    info.scopeId = static_cast<uint32_t>(geteuid());
  } else if (info.family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&bound.storage);
    std::memcpy(info.address, &in->sin_addr, 4);
    info.port = ntohs(in->sin_port);
  } else {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&bound.storage);
    std::memcpy(info.address, &in6->sin6_addr, 16);
    info.port = ntohs(in6->sin6_port);
    info.scopeId = in6->sin6_scope_id;
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  expireLocked(r);
  if (Status full = tooManyPendingLocked(r); !full.ok()) {  // another thread made ids meanwhile
    detail::closeFd(fd);
    return full.through(__FILE__, __LINE__);
  }
  do {
    if (Status drawn = detail::randomBytes(&info.nonce, sizeof info.nonce); !drawn.ok()) {
      detail::closeFd(fd);
      return drawn.through(__FILE__, __LINE__);
    }
  } while (info.nonce == 0 || r.listeners.count(info.nonce) != 0);
  if (Status bad = encodeUniqueId(info, id); !bad.ok()) {
    detail::closeFd(fd);
    return bad.through(__FILE__, __LINE__);
  }
  Listener l;
  l.fd = fd;
  l.timeoutMs = options.timeoutMs;
  l.expires = detail::Clock::now() + std::chrono::milliseconds(options.timeoutMs);
  r.listeners[info.nonce] = l;
  return Status();
}

void closeListener(const UniqueId& id) {
  IdInfo info;
  int fd = -1;
  if (decodeUniqueId(id, &info).ok() && detail::takeListener(info.nonce, &fd).ok()) detail::closeFd(fd);
}

void shutdown() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& kv : r.listeners) detail::closeFd(kv.second.fd);
  r.listeners.clear();
}

size_t listenerCount() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  expireLocked(r);
  return r.listeners.size();
}

}  // namespace bootstrap
}  // namespace arfuse
