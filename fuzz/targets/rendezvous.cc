// Fuzz target: the rendezvous decoders, fed what an attacker on the network (or a broken framework)
// controls. The first byte picks the decoder:
//   0  a unique id from bytes and from hex text (environment variables, files, a launcher);
//   1  the framework path: allGatherViaCallback's checks of what an all-gather callback returned;
//   2  a rank's reading of rank 0's answer: a fake rank 0 (this harness, on an abstract AF_UNIX
//      socket) greets a real rank 1, reads its hello and answers with the input;
//   3  rank 0's reading of a peer: a real rank 0 serves nranks = 2; this harness connects as a
//      peer, sends the input, then joins as a correct rank 1 so the rendezvous ends.
// In 2 and 3 the byte after the mode asks the harness to make the input authentic (fix the header's
// session fields and append the right HMAC), so the fuzzer gets past authentication into the parts
// behind it. Checked beyond "no crash": the real side returns within its timeout.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/crypto.h"
#include "bootstrap/socket.h"
#include "bootstrap/wire.h"

namespace {

using namespace arfuse::bootstrap;  // NOLINT: a harness of this layer

int gatherFromInput(void* ctx, const void*, void* all, size_t bytes) {
  const auto* in = static_cast<const std::vector<uint8_t>*>(ctx);
  // The callback fills nranks x (header + blob) bytes; the input provides them (short: zeros).
  std::memset(all, 0, bytes);
  if (!in->empty()) std::memcpy(all, in->data(), std::min(bytes, in->size()));  // (found by this fuzzer: empty input)
  return 0;
}

bool readAll(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n) {
    const ssize_t k = ::recv(fd, b, n, 0);
    if (k <= 0) return false;
    b += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

void sendAllBytes(int fd, const std::vector<uint8_t>& v) {
  size_t off = 0;
  while (off < v.size()) {
    const ssize_t k = ::send(fd, v.data() + off, v.size() - off, MSG_NOSIGNAL);
    if (k <= 0) return;
    off += static_cast<size_t>(k);
  }
}

void tagInto(const char* domain, const IdInfo& info, const uint8_t* challenge, const uint8_t* header,
             const void* payload, size_t n, uint8_t* out) {
  detail::hmacSha256(info.secret,
                     {{domain, std::strlen(domain)},
                      {challenge, detail::kChallengeBytes},
                      {header, detail::kFrameHeaderBytes},
                      {payload, n}},
                     out);
}

// Makes `f` (header + payload) an authentic frame of `kind` for this session and challenge.
void authenticate(std::vector<uint8_t>* f, const IdInfo& info, const uint8_t* challenge, uint16_t kind) {
  if (f->size() < detail::kFrameHeaderBytes) f->resize(detail::kFrameHeaderBytes, 0);
  detail::FrameHeader h = detail::decodeFrame(f->data());
  h.magic = detail::kFrameMagic;
  h.version = detail::kFrameVersion;
  h.kind = kind;
  h.nonce = info.nonce;
  const size_t payload = f->size() - detail::kFrameHeaderBytes;
  h.payloadBytes = kind == detail::kHello ? h.payloadBytes % 64 : payload;
  detail::encodeFrame(h, f->data());
  uint8_t tag[detail::kTagBytes];
  if (kind == detail::kHello) {
    f->resize(detail::kFrameHeaderBytes);
    tagInto(detail::kTagHello, info, challenge, f->data(), nullptr, 0, tag);
    f->insert(f->end(), tag, tag + sizeof tag);
    std::vector<uint8_t> blob(h.payloadBytes, 0x5a);
    tagInto(detail::kTagBlob, info, challenge, f->data(), blob.data(), blob.size(), tag);
    f->insert(f->end(), blob.begin(), blob.end());
    f->insert(f->end(), tag, tag + sizeof tag);
  } else if (kind == detail::kError) {
    tagInto(detail::kTagError, info, challenge, f->data(), f->data() + detail::kFrameHeaderBytes, payload, tag);
    f->insert(f->end(), tag, tag + sizeof tag);
  } else {
    uint8_t digest[detail::kTagBytes];
    detail::sha256(f->data() + detail::kFrameHeaderBytes, payload, digest);
    tagInto(detail::kTagResult, info, challenge, f->data(), digest, sizeof digest, tag);
    f->insert(f->end(), tag, tag + sizeof tag);
  }
}

// Mode 2: rank 1 reads a fake rank 0's answer.
void answerToRank(const uint8_t* data, size_t size) {
  IdInfo info;
  info.family = AF_UNIX;
  std::string err;
  if (!detail::randomBytes(info.address, sizeof info.address).ok() ||
      !detail::randomBytes(info.secret, sizeof info.secret).ok())
    return;
  info.nonce = 0x1234;
  info.scopeId = static_cast<uint32_t>(geteuid());
  UniqueId id;
  if (encodeUniqueId(info, &id).into(&err) != arfuseSuccess) return;
  detail::SockAddr bound;
  int lfd = -1;
  if (!detail::openListener(detail::unixAbstractAddress(info.address), &bound, &lfd).ok()) return;
  const bool authentic = size > 0 && (data[0] & 1);
  const uint16_t kind = size > 0 && (data[0] & 2) ? detail::kError : detail::kResult;
  std::vector<uint8_t> answer(data + (size > 0), data + size);
  Options o;
  o.timeoutMs = 200;  // a rank that is told nothing re-dials until then
  std::vector<uint8_t> all;
  const uint8_t mine[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  std::atomic<bool> done{false};
  std::thread rank([&] {
    allGather(id, 1, 2, mine, sizeof mine, &all, o).into(&err);
    done = true;
  });
  for (int served = 0; served < 3 && !done;) {  // retries of a rank told nothing, at most 3
    pollfd p{lfd, POLLIN, 0};
    if (::poll(&p, 1, 5) != 1) continue;
    ++served;
    const int fd = ::accept(lfd, nullptr, nullptr);
    if (fd < 0) break;
    uint8_t challenge[detail::kChallengeBytes] = {7};
    detail::FrameHeader h;
    h.kind = detail::kChallenge;
    h.nranks = 2;
    h.nonce = info.nonce;
    h.payloadBytes = sizeof challenge;
    std::vector<uint8_t> greet(detail::kFrameHeaderBytes);
    detail::encodeFrame(h, greet.data());
    greet.insert(greet.end(), challenge, challenge + sizeof challenge);
    sendAllBytes(fd, greet);
    std::vector<uint8_t> hello(detail::kFrameHeaderBytes + 2 * detail::kTagBytes + sizeof mine);
    if (readAll(fd, hello.data(), hello.size())) {
      std::vector<uint8_t> f = answer;
      if (authentic) authenticate(&f, info, challenge, kind);
      sendAllBytes(fd, f);
    }
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
  }
  rank.join();
  detail::closeFd(lfd);
}

// Mode 3: rank 0 reads a peer's bytes, then a correct rank 1 completes the group.
void peerToRankZero(const uint8_t* data, size_t size) {
  Options o;
  o.timeoutMs = 2000;
  o.helloTimeoutMs = 200;
  o.errorGraceMs = 0;
  UniqueId id;
  std::string err;
  if (makeUniqueId(o, &id).into(&err) != arfuseSuccess) return;
  IdInfo info;
  decodeUniqueId(id, &info).into(&err);
  const uint8_t mine[8] = {9, 9, 9, 9, 9, 9, 9, 9};
  std::vector<uint8_t> all;
  std::atomic<bool> done{false};
  std::thread rank0([&] {
    allGather(id, 0, 2, mine, sizeof mine, &all, o).into(&err);
    done = true;
  });
  const detail::SockAddr a = detail::sockAddrOf(info);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, a.get(), a.length) == 0) {
    uint8_t greet[detail::kFrameHeaderBytes + detail::kChallengeBytes];
    if (readAll(fd, greet, sizeof greet)) {
      std::vector<uint8_t> f(data + (size > 0), data + size);
      if (size > 0 && (data[0] & 1)) authenticate(&f, info, greet + detail::kFrameHeaderBytes, detail::kHello);
      sendAllBytes(fd, f);
      ::shutdown(fd, SHUT_WR);
      uint8_t sink[4096];
      while (::recv(fd, sink, sizeof sink, 0) > 0) {
      }
    }
  }
  if (fd >= 0) ::close(fd);
  // The real rank 1, unless the input already ended the rendezvous (completed or failed it).
  for (int i = 0; i < 20 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!done) {
    Options o1 = o;
    o1.timeoutMs = 300;
    std::vector<uint8_t> all1;
    std::string err1;
    allGather(id, 1, 2, mine, sizeof mine, &all1, o1).into(&err1);
  }
  rank0.join();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 4;
  ++data;
  --size;
  std::string err;
  if (mode == 0) {
    UniqueId id;
    IdInfo info;
    if (uniqueIdFromBytes(data, size, &id).into(&err) == arfuseSuccess &&
        decodeUniqueId(id, &info).into(&err) == arfuseSuccess)
      idAddress(info);
    if (uniqueIdFromHex(std::string(reinterpret_cast<const char*>(data), size), &id).into(&err) == arfuseSuccess)
      decodeUniqueId(id, &info).into(&err);
  } else if (mode == 1) {
    if (size < 3) return 0;
    const int nranks = 1 + data[0] % 8, rank = data[1] % nranks;
    const size_t bytes = data[2] % 64;
    std::vector<uint8_t> in(data + 3, data + size), mine(bytes, 0x42), all;
    allGatherViaCallback(gatherFromInput, &in, rank, nranks, mine.data(), bytes, &all).into(&err);
    validateGathered(in.data(), rank, nranks, mine.data(), std::min(bytes, in.size() / std::max(nranks, 1))).into(&err);
  } else if (mode == 2) {
    answerToRank(data, size);
  } else {
    peerToRankZero(data, size);
  }
  return 0;
}
