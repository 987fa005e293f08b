// Socket plumbing for the rendezvous, internal to arfuse_bootstrap.
//
// Every socket is non-blocking and every wait goes through poll() against one absolute deadline, so no
// call here can outlive Options::timeoutMs however the peer misbehaves (silent, slow, half-open).
// Sends use MSG_NOSIGNAL: a peer that vanishes must become an error code, not a SIGPIPE that kills an
// inference server.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "bootstrap/bootstrap.h"

namespace arfuse {
namespace bootstrap {
namespace detail {

using Clock = std::chrono::steady_clock;

struct Deadline {
  Clock::time_point at;
  static Deadline afterMs(int ms) { return Deadline{Clock::now() + std::chrono::milliseconds(ms < 0 ? 0 : ms)}; }
  // Milliseconds left, rounded up so that poll() never spins on a 0 while time remains.
  int remainingMs() const;
  bool passed() const { return Clock::now() >= at; }
};

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  int family() const { return storage.ss_family; }
};

// "127.0.0.1:41234" / "[::1]:41234" / "unix:@arfuse-<hex>".
std::string formatAddress(const SockAddr& addr);
// "connection refused", from an errno value.
std::string errnoText(int err);
// "10.0 s".
std::string formatSeconds(double seconds);

// Turns Options::address / Options::ifname into a TCP address: a literal, an interface name, or the
// first interface the NCCL_SOCKET_IFNAME-style list selects. Callers handle the AF_UNIX default
// (both empty, or address "unix") themselves: see usesUnixSocket.
Status resolveListenAddress(const std::string& spec, const std::string& ifname, int port, SockAddr* out);
bool usesUnixSocket(const std::string& address, const std::string& ifname);

// Whether interface `name` is selected by an NCCL_SOCKET_IFNAME-style list (see Options::ifname).
bool interfaceSelected(const std::string& list, const std::string& name);

// The abstract AF_UNIX address named by 16 random bytes: "\0arfuse-<32 hex digits>". Abstract names
// live in the network namespace, vanish with the socket, and need no directory.
SockAddr unixAbstractAddress(const uint8_t name[16]);

// Kernel-checked identity of the process at the other end of a connected AF_UNIX socket.
struct PeerCred {
  int64_t pid = -1;
  uint32_t uid = 0;
};
bool peerCredentials(int fd, PeerCred* out);

// Binds and listens into *fd (-1 on failure); *bound receives the actual address (with the ephemeral
// port filled in).
Status openListener(const SockAddr& addr, SockAddr* bound, int* fd);

// One connection attempt bounded by the deadline. Returns the fd, or -1 with *err set (ETIMEDOUT when
// the deadline passed first).
int connectOnce(const SockAddr& addr, const Deadline& deadline, int* err);

// Whether a connect failure may go away by itself (rank 0 not listening yet, a route coming up).
bool isTransientConnectError(int err);

enum class Io { kOk, kTimeout, kClosed, kError };

// Moves exactly `size` bytes. *done reports progress (for "disconnected after 10 of 4096 bytes");
// *err holds errno on kError.
Io sendAll(int fd, const void* data, size_t size, const Deadline& deadline, size_t* done, int* err);
Io recvAll(int fd, void* data, size_t size, const Deadline& deadline, size_t* done, int* err);

// Like sendAll, but gives up (returning kClosed) as soon as the peer has something to say: a client
// streaming a large blob must stop and read rank 0's error frame instead of pushing into a connection
// rank 0 has already rejected.
Io sendUnlessReadable(int fd, const void* data, size_t size, const Deadline& deadline, size_t* done, int* err,
                      bool* peerSpoke);

void closeFd(int fd);
bool setNonBlocking(int fd);

// The socket address a unique id names (rank 0's listener).
SockAddr sockAddrOf(const IdInfo& info);

}  // namespace detail
}  // namespace bootstrap
}  // namespace arfuse
