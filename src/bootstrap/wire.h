// Byte layouts of the rendezvous, internal to arfuse_bootstrap. docs/bootstrap.md is their reference.
//
// Everything is little-endian and written byte by byte, never by memcpy of a struct, so that the
// layout does not depend on the compiler's padding or on the host's endianness.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.h"

namespace arfuse {
namespace bootstrap {
namespace detail {

inline void putU16(uint8_t* p, uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void putU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void putU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t getU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t getU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t getU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// FNV-1a, 32 bits: not for security (the secret and the HMACs are), only so that a truncated or
// bit-flipped id is reported as corrupt instead of dialling a half-right address.
inline uint32_t checksum32(const uint8_t* p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

// ---- UniqueId layout (128 bytes) ----
constexpr uint32_t kIdMagic = 0x44495241u;  // "ARID" read as little-endian bytes
constexpr uint16_t kIdVersion = 2;          // 2: AF_UNIX, the secret
constexpr size_t kIdOffMagic = 0, kIdOffVersion = 4, kIdOffFamily = 6, kIdOffPort = 8, kIdOffReserved = 10,
                 kIdOffAddr = 12, kIdOffScope = 28, kIdOffNonce = 32, kIdOffSecret = 40, kIdOffZeros = 72,
                 kIdOffChecksum = 124;
constexpr uint16_t kIdFamilyUnix = 1, kIdFamilyIpv4 = 4, kIdFamilyIpv6 = 6;

// ---- Frame header (32 bytes), in front of every message on the wire ----
constexpr uint32_t kFrameMagic = 0x57465241u;  // "ARFW"
constexpr uint16_t kFrameVersion = 2;          // 2: challenge + HMAC tags
constexpr size_t kFrameHeaderBytes = 32;
enum FrameKind : uint16_t { kHello = 1, kResult = 2, kError = 3, kChallenge = 4 };

// The class of failure an error frame carries (4 bytes): the wire keeps the values of the first
// release (1 invalid argument, 2 mismatch, 3 timeout, 4 system error) whatever the library's codes.
inline uint32_t wireCode(arfuseResult_t code) {
  switch (code) {
    case arfuseInvalidArgument:
      return 1;
    case arfuseMismatch:
      return 2;
    case arfusePeerTimeout:
      return 3;
    default:
      return 4;
  }
}
inline arfuseResult_t fromWireCode(uint32_t code) {
  static const arfuseResult_t kCodes[] = {arfuseSystemError, arfuseInvalidArgument, arfuseMismatch, arfusePeerTimeout,
                                          arfuseSystemError};
  return code < 5 ? kCodes[code] : arfuseSystemError;
}
// An error frame's text is a single line; longer is a garbled length, not a message.
constexpr uint64_t kMaxErrorText = 4096;

// Domain separation: each tag says what it authenticates, so no tag can be replayed as another kind.
constexpr char kTagHello[] = "arfuse-rendezvous-2 hello";
constexpr char kTagBlob[] = "arfuse-rendezvous-2 blob";
constexpr char kTagResult[] = "arfuse-rendezvous-2 result";
constexpr char kTagError[] = "arfuse-rendezvous-2 error";

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t version = kFrameVersion;
  uint16_t kind = kHello;
  int32_t rank = 0;
  int32_t nranks = 0;
  uint64_t nonce = 0;
  uint64_t payloadBytes = 0;
};

inline void encodeFrame(const FrameHeader& h, uint8_t* out) {
  putU32(out + 0, h.magic);
  putU16(out + 4, h.version);
  putU16(out + 6, h.kind);
  putU32(out + 8, static_cast<uint32_t>(h.rank));
  putU32(out + 12, static_cast<uint32_t>(h.nranks));
  putU64(out + 16, h.nonce);
  putU64(out + 24, h.payloadBytes);
}

inline FrameHeader decodeFrame(const uint8_t* in) {
  FrameHeader h;
  h.magic = getU32(in + 0);
  h.version = getU16(in + 4);
  h.kind = getU16(in + 6);
  h.rank = static_cast<int32_t>(getU32(in + 8));
  h.nranks = static_cast<int32_t>(getU32(in + 12));
  h.nonce = getU64(in + 16);
  h.payloadBytes = getU64(in + 24);
  return h;
}

// Largest nranks accepted anywhere: far above any tensor-parallel group, low enough that
// nranks * maxBlobBytes arithmetic cannot overflow 64 bits.
constexpr int kMaxRanks = 1 << 16;

// The listener makeUniqueId registered under this nonce, removed from the registry into *fd: the
// caller (rank 0's allGather) now owns and closes it. When this process holds none, *fd is -1 and
// the failure says whether it expired (Options::timeoutMs of makeUniqueId) or was never here.
Status takeListener(uint64_t nonce, int* fd);

// Rank 0's side of allGather (server.cc): serves the rendezvous on listenFd (closed on return).
Status serveRendezvous(int listenFd, const IdInfo& info, int nranks, size_t bytes, std::vector<uint8_t>* all,
                       const Options& options);

// The error text rank 0 sent, as this rank returns it to its caller (who prints it): escaped by the
// project's one helper (base/printable.h), so that it cannot forge log lines or terminal escapes.
std::string sanitizeText(const std::string& text);

}  // namespace detail
}  // namespace bootstrap
}  // namespace arfuse
