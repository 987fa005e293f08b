// Helpers shared by the rendezvous tests: deterministic blobs, a stopwatch, and raw loopback sockets
// that play a misbehaving peer or a fake rank 0.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/crypto.h"
#include "bootstrap/socket.h"
#include "bootstrap/wire.h"

namespace arfuse {
namespace bootstrap {
namespace testing {

inline std::vector<uint8_t> blobFor(int rank, size_t bytes, uint32_t salt = 0) {
  std::mt19937 gen(static_cast<uint32_t>(rank) * 7919u + static_cast<uint32_t>(bytes) + salt);
  std::vector<uint8_t> b(bytes);
  for (auto& x : b) x = static_cast<uint8_t>(gen());
  return b;
}

inline std::vector<uint8_t> expectedAll(int nranks, size_t bytes, uint32_t salt = 0) {
  std::vector<uint8_t> all;
  for (int r = 0; r < nranks; ++r) {
    auto b = blobFor(r, bytes, salt);
    all.insert(all.end(), b.begin(), b.end());
  }
  return all;
}

class Stopwatch {
 public:
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

// A 127.0.0.1 port that nothing listens on: bound to learn a free number, then closed.
inline uint16_t deadLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

inline IdInfo loopbackInfo(uint16_t port, uint64_t nonce) {
  IdInfo info;
  info.family = AF_INET;
  uint32_t lo = htonl(INADDR_LOOPBACK);
  std::memcpy(info.address, &lo, 4);
  info.port = port;
  info.nonce = nonce;
  return info;
}

// A plain blocking client socket to 127.0.0.1:port (with a receive timeout so tests cannot hang).
inline int rawConnect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  timeval tv{3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A listening socket on 127.0.0.1 (ephemeral port) for a fake rank 0.
inline int rawListen(uint16_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::listen(fd, 16);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

// Accepts one connection, waiting at most 3 s.
inline int rawAccept(int listenFd) {
  pollfd p{listenFd, POLLIN, 0};
  if (::poll(&p, 1, 3000) != 1) return -1;
  int fd = ::accept(listenFd, nullptr, nullptr);
  timeval tv{3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return fd;
}

inline bool readExactly(int fd, void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t got = 0;
  while (got < n) {
    ssize_t k = ::recv(fd, p + got, n - got, 0);
    if (k <= 0) return false;
    got += static_cast<size_t>(k);
  }
  return true;
}

// A frame header as the protocol in docs/bootstrap.md lays it out (little-endian, 32 bytes).
inline std::vector<uint8_t> helloFrame(int rank, int nranks, uint64_t nonce, uint64_t payload, uint16_t kind = 1,
                                       uint16_t version = detail::kFrameVersion) {
  std::vector<uint8_t> f(32, 0);
  auto put = [&](size_t off, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) f[off + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  put(0, 0x57465241u, 4);
  put(4, version, 2);
  put(6, kind, 2);
  put(8, static_cast<uint32_t>(rank), 4);
  put(12, static_cast<uint32_t>(nranks), 4);
  put(16, nonce, 8);
  put(24, payload, 8);
  return f;
}

inline IdInfo infoOf(const UniqueId& id) {
  IdInfo info;
  std::string err;
  decodeUniqueId(id, &info).into(&err);
  return info;
}

inline std::string whereOf(const UniqueId& id) { return idAddress(infoOf(id)); }

// A blocking client socket to the id's address, AF_UNIX or TCP (with timeouts so tests cannot hang).
inline int rawConnectId(const UniqueId& id) {
  const detail::SockAddr a = detail::sockAddrOf(infoOf(id));
  int fd = ::socket(a.family(), SOCK_STREAM, 0);
  timeval tv{3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(fd, a.get(), a.length) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Rank 0's greeting: 32-byte header (kind 4) + 16 challenge bytes. False if it did not come.
inline bool readChallenge(int fd, uint8_t challenge[16], uint64_t* nonce = nullptr) {
  uint8_t raw[48];
  if (!readExactly(fd, raw, sizeof raw)) return false;
  if (raw[6] != detail::kChallenge) return false;
  if (nonce) *nonce = detail::getU64(raw + 16);
  std::memcpy(challenge, raw + 32, 16);
  return true;
}

inline std::vector<uint8_t> tagOf(const char* domain, const uint8_t* secret, const uint8_t* challenge,
                                  const uint8_t* header, const void* payload, size_t n) {
  std::vector<uint8_t> t(detail::kTagBytes);
  detail::hmacSha256(secret, {{domain, std::strlen(domain)}, {challenge, 16}, {header, 32}, {payload, n}}, t.data());
  return t;
}

// A complete, correctly authenticated hello for `challenge` (what a real rank sends).
inline std::vector<uint8_t> authHello(const IdInfo& info, const uint8_t* challenge, int rank, int nranks,
                                      const std::vector<uint8_t>& blob) {
  std::vector<uint8_t> f = helloFrame(rank, nranks, info.nonce, blob.size());
  std::vector<uint8_t> hdr = f;
  auto t1 = tagOf(detail::kTagHello, info.secret, challenge, hdr.data(), nullptr, 0);
  auto t2 = tagOf(detail::kTagBlob, info.secret, challenge, hdr.data(), blob.data(), blob.size());
  f.insert(f.end(), t1.begin(), t1.end());
  f.insert(f.end(), blob.begin(), blob.end());
  f.insert(f.end(), t2.begin(), t2.end());
  return f;
}

// A fake rank 0's greeting.
inline bool sendChallenge(int fd, uint64_t nonce, const uint8_t* challenge) {
  std::vector<uint8_t> f = helloFrame(0, 0, nonce, 16, detail::kChallenge);
  f.insert(f.end(), challenge, challenge + 16);
  return ::send(fd, f.data(), f.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(f.size());
}

// A fake rank 0's authenticated result frame: header, all, tag.
inline std::vector<uint8_t> resultFrame(const IdInfo& info, const uint8_t* challenge, int nranks,
                                        const std::vector<uint8_t>& all) {
  std::vector<uint8_t> f = helloFrame(0, nranks, info.nonce, all.size(), detail::kResult);
  uint8_t digest[32];
  detail::sha256(all.data(), all.size(), digest);
  auto t = tagOf(detail::kTagResult, info.secret, challenge, f.data(), digest, sizeof digest);
  f.insert(f.end(), all.begin(), all.end());
  f.insert(f.end(), t.begin(), t.end());
  return f;
}

// Reads an error frame (header, code, text, tag); returns its text, "" if none came.
inline std::string readErrorText(int fd) {
  uint8_t head[32];
  if (!readExactly(fd, head, 32) || head[6] != detail::kError) return "";
  const uint64_t len = detail::getU64(head + 24);
  if (len < 4 || len > 4096) return "";
  std::vector<char> body(len + detail::kTagBytes);
  if (!readExactly(fd, body.data(), body.size())) return "";
  return std::string(body.begin() + 4, body.begin() + static_cast<long>(len));
}

inline Options tcpOptions(int ms) {
  Options o;
  o.timeoutMs = ms;
  o.address = "127.0.0.1";
  return o;
}

inline uint64_t nonceOf(const UniqueId& id) {
  IdInfo info;
  std::string err;
  decodeUniqueId(id, &info).into(&err);
  return info.nonce;
}

inline uint16_t portOf(const UniqueId& id) {
  IdInfo info;
  std::string err;
  decodeUniqueId(id, &info).into(&err);
  return info.port;
}

// What one rank's allGather returned.
struct RankOutcome {
  arfuseResult_t result = arfuseSuccess;
  std::string error;
  std::vector<uint8_t> all;
};

inline Options shortOptions(int ms) {
  Options o;
  o.timeoutMs = ms;
  return o;
}

// Runs allGather for `rank` on its own thread with blobFor(rank, bytes), after `delayMs`.
inline std::future<RankOutcome> launch(const UniqueId& id, int rank, int nranks, size_t bytes, Options o,
                                       int delayMs = 0) {
  return std::async(std::launch::async, [=] {
    if (delayMs > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    RankOutcome out;
    auto mine = blobFor(rank, bytes);
    out.result = allGather(id, rank, nranks, mine.data(), bytes, &out.all, o).into(&out.error);
    return out;
  });
}

}  // namespace testing
}  // namespace bootstrap
}  // namespace arfuse
