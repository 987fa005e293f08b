// The rendezvous behind arfuseGetUniqueId / arfuseCommInitRank / arfuseCommInitRankWithAllGather.
//
// Multi-process communicators need one thing before any CUDA work: every rank must learn every other
// rank's handle bytes (IPC handles, host names, device facts). This is that exchange and nothing
// else, pure C++17 over POSIX sockets (plus libcrypto for its HMAC), so it is testable on a laptop and
// holds no CUDA state.
//
// Two ways to run it:
//   - arfuse's own rendezvous: rank 0 calls makeUniqueId, which opens a listening socket and packs its
//     address, a random session nonce and a random 256-bit secret into a 128-byte UniqueId. The caller
//     ships that blob to the other processes by any means (environment, file, its launcher): holding
//     it is what makes a process a member. Every rank then calls allGather; rank 0 collects one framed,
//     authenticated blob per rank, checks that they agree, and sends the concatenation back, so every
//     rank ends up with the same bytes in rank order or with the same error.
//   - a framework's own all-gather (torch.distributed, MPI): allGatherViaCallback frames each blob so
//     that what the callback returns can be checked (slot order, nranks, sizes) before it is trusted.
//
// Transports: by default a Linux abstract AF_UNIX socket, where the kernel tells rank 0 the uid of
// every process that connects (SO_PEERCRED), so another user is refused even if the id leaked; TCP
// when an address or interface is given (groups that span hosts), where the id's secret is what keeps
// strangers out: every hello carries an HMAC-SHA256 over rank 0's per-connection challenge, and
// rank 0's answers carry one too. docs/bootstrap.md has the trust model.
//
// Every wait is bounded by Options::timeoutMs; every failure is a Status (base/status.h) whose code is
// its class (arfuseInvalidArgument: this rank's own arguments are wrong, a null pointer, a rank out of
// range, a corrupt id; arfuseMismatch: the ranks disagree, nranks, sizes, a duplicate rank, a wrong
// session; arfusePeerTimeout: someone did not show up, or stopped talking, before the deadline;
// arfuseSystemError: the OS refused, a socket, bind, listen, a peer reset) and whose message is one
// line that names the address, the rank(s) involved and what to check. Nothing here throws, prints
// or reads the environment: the caller (the C ABI) owns configuration and logging (a failure's
// frames reach the DEBUG trail only where the caller's log installed its sink). The wire format and
// the errors are in docs/bootstrap.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace arfuse {
namespace bootstrap {

constexpr size_t kUniqueIdBytes = 128;

// Opaque to users; a plain byte array so that the C ABI can expose it as `struct { char internal[128]; }`
// and callers can copy it through files, environment variables or a framework's broadcast.
struct UniqueId {
  uint8_t bytes[kUniqueIdBytes];
};

struct Options {
  // Where rank 0 listens. Empty (or "unix") means an abstract AF_UNIX socket: one host, peers
  // identified by the kernel. Otherwise TCP at an IPv4 or IPv6 literal ("10.1.2.3", "fd00::2",
  // "fe80::1%eth0") or at an interface name ("eth0", "ib0"), whose first IPv4 address is used, else its
  // first IPv6 address. Wildcards (0.0.0.0, ::) are refused: the address is what the other ranks will
  // dial, so it must be one they can reach.
  std::string address;
  // When address is empty: TCP on the first interface this list selects, with NCCL_SOCKET_IFNAME's
  // syntax: comma-separated name prefixes ("eth,ib"), "=" in front for exact names ("=eth0"), "^" in
  // front to exclude instead ("^docker,lo"). Loopback is only chosen when the list names it.
  std::string ifname;
  int port = 0;                       // TCP: 0 for an ephemeral port chosen by the OS
  int timeoutMs = 30000;              // bound on the whole rendezvous, per rank, connect retries included;
                                      // makeUniqueId: how long an unused listener lives
  int helloTimeoutMs = 5000;          // rank 0: how long a connection may take to authenticate
  int errorGraceMs = 500;             // rank 0, after a failure: how long a late member still hears why
  uint64_t maxBlobBytes = 1u << 30;   // largest per-rank blob accepted; guards against a garbled length
  std::vector<uint32_t> allowedUids;  // AF_UNIX: uids admitted besides this process's own
};

// What a UniqueId says, once validated.
struct IdInfo {
  int family = 0;            // AF_UNIX, AF_INET or AF_INET6
  uint8_t address[16] = {};  // TCP: network byte order, IPv4 in the first 4 bytes; AF_UNIX: the socket's name
  uint32_t scopeId = 0;      // IPv6 link-local scope (interface index); AF_UNIX: the uid of rank 0
  uint16_t port = 0;         // host byte order (TCP)
  uint64_t nonce = 0;        // random per session, never 0; not a secret (rank 0 tells it to anyone)
  uint8_t secret[32] = {};   // random per session: the HMAC key that proves a rank holds the id
};

// Rank 0 only: starts listening (see Options::address) and fills *id. The listener is owned by a
// process-wide registry keyed by the nonce; it survives this call and is closed when this process's
// rank 0 allGather with this id takes it (and finishes), by closeListener(id), by shutdown(), or once
// Options::timeoutMs has passed without rank 0 taking it (checked whenever the registry is used). A
// process created by fork() after this call inherits the listener, so the forked child may be the one
// that acts as rank 0.
Status makeUniqueId(const Options& options, UniqueId* id);

// Encodes an id by hand (no listener is started). For tests, and for callers that run rank 0's
// listener elsewhere.
Status encodeUniqueId(const IdInfo& info, UniqueId* id);

// Checks magic, version, checksum and fields; a corrupted or truncated id gets an error that says so.
Status decodeUniqueId(const UniqueId& id, IdInfo* info);

// Serialised forms. The raw form is the 128 bytes themselves (size checked); the hex form is 256
// lower-case hex digits, convenient for environment variables and command lines.
Status uniqueIdFromBytes(const void* data, size_t size, UniqueId* id);
std::string uniqueIdToHex(const UniqueId& id);
Status uniqueIdFromHex(const std::string& hex, UniqueId* id);

// "127.0.0.1:41234", "[::1]:41234" or "unix:@arfuse-<32 hex digits>", as it appears in error messages.
std::string idAddress(const IdInfo& info);

// Every rank, rank 0 included, calls this once with the same id and nranks, its own rank and a blob of
// `bytes` bytes (the same size on every rank; 0 is allowed). On success *all holds nranks * bytes
// bytes, rank r's blob at offset r * bytes, identical on every rank.
Status allGather(const UniqueId& id, int rank, int nranks, const void* mine, size_t bytes, std::vector<uint8_t>* all,
                 const Options& options);

// Closes this process's listener for id, if any (rank 0 gave up before calling allGather).
void closeListener(const UniqueId& id);
// Closes every listener this process owns; later rank-0 allGather calls on those ids fail cleanly.
void shutdown();
// Listeners currently owned by this process, expired ones closed first (for tests and `arfuse doctor`).
size_t listenerCount();

// ---- The framework path ------------------------------------------------------------------------------

// A framework's all-gather: gather `bytes` bytes from every rank into `all` (nranks * bytes bytes), rank
// r's contribution at offset r * bytes. Returns 0 on success, anything else on failure.
using AllGatherFn = int (*)(void* ctx, const void* mine, void* all, size_t bytes);

// Size of the header allGatherViaCallback puts in front of each blob (the callback sees bytes + this).
constexpr size_t kSlotHeaderBytes = 24;

// Runs fn over framed blobs, then checks every slot before trusting it: slot r must say rank r, every
// rank must agree on nranks and size, and our slot must hold exactly our bytes. The header is what
// lets a swapped rank order or a short copy in the framework's glue be reported instead of silently
// producing a communicator wired to the wrong peers. On success *all is as for allGather.
Status allGatherViaCallback(AllGatherFn fn, void* ctx, int rank, int nranks, const void* mine, size_t bytes,
                            std::vector<uint8_t>* all);

// The minimal check for unframed results: sizes are sane and slot `rank` of `all` equals `mine`.
Status validateGathered(const void* all, int rank, int nranks, const void* mine, size_t bytes);

}  // namespace bootstrap
}  // namespace arfuse
