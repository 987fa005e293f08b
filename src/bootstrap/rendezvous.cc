// allGather over arfuse's own rendezvous: a star around rank 0 (rank 0's side is server.cc).
//
// Why a star and not a ring: the data is a few KiB per rank exchanged once at init, so bandwidth does
// not matter, while having one process see every hello is what makes the checks possible (nranks
// agreement, duplicate ranks, sizes, session) and lets every rank receive the same verdict.
//
// A rank's conversation with rank 0 (docs/bootstrap.md has the byte layouts):
//   1. connect (refusals are retried until the deadline: launchers start processes in any order);
//      on AF_UNIX, check that the listener runs as the uid the id names;
//   2. read rank 0's challenge: its session nonce (a stale id is reported here) and 16 random bytes;
//   3. send the hello: header, HMAC(secret, challenge, header), the blob, HMAC(secret, challenge,
//      header, blob);
//   4. read the answer, result or error, and check its HMAC before believing it.
// A connection that rank 0 closes before answering (it evicts unidentified connections when a flood
// fills its table) is retried; an answer that fails its check is an error, never data.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "bootstrap/bootstrap.h"
#include "bootstrap/crypto.h"
#include "bootstrap/socket.h"
#include "bootstrap/wire.h"

namespace arfuse {
namespace bootstrap {

using detail::Deadline;
using detail::FrameHeader;
using detail::Io;
using detail::kChallengeBytes;
using detail::kFrameHeaderBytes;
using detail::kTagBytes;

namespace {

// How one conversation with rank 0 ended: keep going, try a new connection, or final.
enum class Step { kContinue, kRetry, kDone };

class Client {
 public:
  Client(const IdInfo& info, int rank, int nranks, const void* mine, size_t bytes, std::vector<uint8_t>* all,
         const Options& o)
      : info_(info),
        rank_(rank),
        nranks_(nranks),
        mine_(mine),
        bytes_(bytes),
        all_(all),
        deadline_(Deadline::afterMs(o.timeoutMs)),
        timeoutS_(o.timeoutMs / 1000.0),
        me_("rank " + std::to_string(rank)),
        where_(idAddress(info)) {}

  Status run() {
    const detail::SockAddr addr = detail::sockAddrOf(info_);
    std::string earlier;
    int pauseMs = 10;
    while (true) {
      int err = 0;
      int fd = detail::connectOnce(addr, deadline_, &err);
      if (fd < 0) {
        if (!detail::isTransientConnectError(err) || deadline_.passed()) {
          return ARFUSE_FAIL_TEXT(
              deadline_.passed() ? arfusePeerTimeout : arfuseSystemError,
              me_ + " could not connect to " + where_ +
                  (deadline_.passed() ? " after " + detail::formatSeconds(timeoutS_) : std::string()) + ": " +
                  detail::errnoText(err) + (earlier.empty() ? "" : " (earlier: " + earlier + ")") +
                  "; is rank 0 alive and is the address reachable from this host?");
        }
      } else {
        Status st;
        const Step s = converse(fd, &st);
        detail::closeFd(fd);
        if (s == Step::kDone) return st;
        earlier = st.message();  // why this connection is retried
        if (deadline_.passed())
          return ARFUSE_FAIL_TEXT(
              arfusePeerTimeout,
              earlier + ", and the deadline of " + detail::formatSeconds(timeoutS_) + " passed; see rank 0's error");
      }
      // Rank 0 may start later than us (launchers give no ordering), or may have evicted us from a
      // full connection table: wait a little, growing, and dial again.
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(pauseMs, deadline_.remainingMs())));
      pauseMs = std::min(pauseMs * 2, 500);
    }
  }

 private:
  Step converse(int fd, Status* st) {
    if (info_.family == AF_UNIX) {
      detail::PeerCred cred;
      if (detail::peerCredentials(fd, &cred) && cred.uid != info_.scopeId) {
        *st = ARFUSE_FAIL_TEXT(arfuseMismatch, me_ + ": the process listening at " + where_ + " (pid " +
                                                   std::to_string(cred.pid) + ") runs as uid " +
                                                   std::to_string(cred.uid) + " but the id says rank 0 runs as uid " +
                                                   std::to_string(info_.scopeId) + ": it is not this group's rank 0");
        return Step::kDone;
      }
    }
    Step s = readChallenge(fd, st);
    if (s != Step::kContinue) return s;
    s = sendHello(fd, st);
    if (s != Step::kContinue) return s;
    return readAnswer(fd, st);
  }

  bool tag(const char* domain, const uint8_t* header, const void* payload, size_t n, uint8_t* out, Status* st) const {
    const Status made = detail::hmacSha256(
        info_.secret,
        {{domain, std::strlen(domain)}, {challenge_, kChallengeBytes}, {header, kFrameHeaderBytes}, {payload, n}}, out);
    if (made.ok()) return true;
    *st = ARFUSE_FAIL_TEXT(made.code(), me_ + ": " + made.message());
    return false;
  }

  Step notArfuse(Status* st) const {
    *st = ARFUSE_FAIL_TEXT(
        arfuseMismatch,
        me_ + ": " + where_ +
            " answered with something that is not an arfuse rendezvous frame; is another program (or another "
            "arfuse release) listening there?");
    return Step::kDone;
  }

  Step timedOut(const std::string& what, Status* st) const {
    *st = ARFUSE_FAIL_TEXT(arfusePeerTimeout, me_ + " waited " + detail::formatSeconds(timeoutS_) + " for rank 0 at " +
                                                  where_ + " " + what);
    return Step::kDone;
  }

  Step readChallenge(int fd, Status* st) {
    uint8_t raw[kFrameHeaderBytes];
    size_t done = 0;
    int err = 0;
    Io io = detail::recvAll(fd, raw, sizeof raw, deadline_, &done, &err);
    if (io == Io::kTimeout && done == 0)
      return timedOut("to greet it; rank 0 is reachable but not serving (is it stuck before arfuseCommInitRank?)", st);
    const FrameHeader h = detail::decodeFrame(raw);
    if (io == Io::kOk && (h.magic != detail::kFrameMagic || h.version != detail::kFrameVersion ||
                          h.kind != detail::kChallenge || h.payloadBytes != kChallengeBytes))
      return notArfuse(st);
    if (io == Io::kOk) io = detail::recvAll(fd, challenge_, kChallengeBytes, deadline_, &done, &err);
    if (io == Io::kTimeout) return notArfuse(st);  // a partial greeting: not an arfuse rank 0
    if (io != Io::kOk) {
      *st = ARFUSE_FAIL_TEXT(arfuseSystemError, me_ + ": rank 0 at " + where_ +
                                                    " closed the connection before greeting it" +
                                                    (err ? " (" + detail::errnoText(err) + ")" : std::string()));
      return Step::kRetry;
    }
    if (h.nonce != info_.nonce) {
      *st = ARFUSE_FAIL_TEXT(
          arfuseMismatch,
          me_ + ": the rendezvous at " + where_ +
              " belongs to another session (its session nonce differs from this id's): the id is stale or from "
              "another run; pass every rank the id from this run's arfuseGetUniqueId");
      return Step::kDone;
    }
    return Step::kContinue;
  }

  Step sendHello(int fd, Status* st) {
    FrameHeader h;
    h.kind = detail::kHello;
    h.rank = rank_;
    h.nranks = nranks_;
    h.nonce = info_.nonce;
    h.payloadBytes = bytes_;
    uint8_t head[kFrameHeaderBytes + kTagBytes], tail[kTagBytes];
    detail::encodeFrame(h, head);
    if (!tag(detail::kTagHello, head, nullptr, 0, head + kFrameHeaderBytes, st)) return Step::kDone;
    if (!tag(detail::kTagBlob, head, mine_, bytes_, tail, st)) return Step::kDone;
    size_t done = 0;
    int err = 0;
    bool spoke = false;
    Io io = detail::sendUnlessReadable(fd, head, sizeof head, deadline_, &done, &err, &spoke);
    if (io == Io::kOk && bytes_ > 0) io = detail::sendUnlessReadable(fd, mine_, bytes_, deadline_, &done, &err, &spoke);
    if (io == Io::kOk) io = detail::sendUnlessReadable(fd, tail, sizeof tail, deadline_, &done, &err, &spoke);
    if (io == Io::kTimeout) {
      *st = ARFUSE_FAIL_TEXT(arfusePeerTimeout, me_ + " could not send its blob to rank 0 at " + where_ + " within " +
                                                    detail::formatSeconds(timeoutS_) + "; is rank 0 stuck?");
      return Step::kDone;
    }
    if (io == Io::kError) {
      *st = ARFUSE_FAIL_TEXT(arfuseSystemError,
                             me_ + " lost its connection to rank 0 at " + where_ + ": " + detail::errnoText(err));
      return Step::kDone;
    }
    return Step::kContinue;  // sent, or rank 0 spoke early / closed: what it says next is the verdict
  }

  Step readAnswer(int fd, Status* st) {
    uint8_t raw[kFrameHeaderBytes];
    size_t done = 0;
    int err = 0;
    Io io = detail::recvAll(fd, raw, sizeof raw, deadline_, &done, &err);
    if (io == Io::kTimeout)
      return timedOut(
          "to answer; rank 0 is reachable but the rendezvous did not complete (is another rank missing "
          "or stuck? see rank 0's error)",
          st);
    if (io != Io::kOk) {
      const std::string closed = me_ + ": rank 0 at " + where_ + " closed the connection without an answer" +
                                 (err ? " (" + detail::errnoText(err) + ")" : std::string());
      if (done == 0) {  // evicted, or rank 0 went away: dialling again tells which
        *st = ARFUSE_FAIL_TEXT(arfuseSystemError, closed);
        return Step::kRetry;
      }
      *st = ARFUSE_FAIL_TEXT(arfuseSystemError, closed + "; did rank 0 fail or exit? check its error");
      return Step::kDone;
    }
    const FrameHeader h = detail::decodeFrame(raw);
    if (h.magic != detail::kFrameMagic || h.version != detail::kFrameVersion) return notArfuse(st);
    const uint64_t expect = static_cast<uint64_t>(nranks_) * bytes_;
    const bool isError = h.kind == detail::kError && h.payloadBytes >= 4 && h.payloadBytes <= detail::kMaxErrorText;
    const bool isResult = h.kind == detail::kResult && h.nranks == nranks_ && h.payloadBytes == expect;
    if (h.nonce != info_.nonce || (!isError && !isResult)) {
      *st = ARFUSE_FAIL_TEXT(arfuseMismatch, me_ + ": rank 0 at " + where_ + " sent an unexpected answer (kind " +
                                                 std::to_string(h.kind) + ", nranks " + std::to_string(h.nranks) +
                                                 ", " + std::to_string(h.payloadBytes) + " bytes where " +
                                                 std::to_string(expect) +
                                                 " were expected); are all processes running the same arfuse release?");
      return Step::kDone;
    }
    std::vector<uint8_t> local;
    std::vector<uint8_t>* body = isResult ? all_ : &local;
    body->assign(h.payloadBytes + kTagBytes, 0);
    io = detail::recvAll(fd, body->data(), body->size(), deadline_, &done, &err);
    if (io != Io::kOk) {
      *st = ARFUSE_FAIL_TEXT(io == Io::kTimeout ? arfusePeerTimeout : arfuseSystemError,
                             me_ + ": the answer from rank 0 at " + where_ + " stopped after " + std::to_string(done) +
                                 " of " + std::to_string(body->size()) + " bytes (" +
                                 (io == Io::kTimeout ? std::string("deadline reached") : "connection closed") +
                                 "); did rank 0 crash?");
      body->clear();
      return Step::kDone;
    }
    // A result's tag covers the SHA-256 of the blobs (hashed once by rank 0, see crypto.h).
    uint8_t want[kTagBytes], digest[kTagBytes];
    const Status hashed = isResult ? detail::sha256(body->data(), h.payloadBytes, digest) : Status();
    if (!hashed.ok()) {
      *st = ARFUSE_FAIL_TEXT(hashed.code(), me_ + ": " + hashed.message());
      body->clear();
      return Step::kDone;
    }
    if (!(isResult ? tag(detail::kTagResult, raw, digest, sizeof digest, want, st)
                   : tag(detail::kTagError, raw, body->data(), h.payloadBytes, want, st))) {
      body->clear();
      return Step::kDone;
    }
    if (!detail::tagsEqual(want, body->data() + h.payloadBytes)) {
      *st = ARFUSE_FAIL_TEXT(arfuseMismatch, me_ + ": rank 0 at " + where_ + " sent an " +
                                                 (isResult ? "answer" : "error report") +
                                                 " that fails authentication (not made with this id's secret: another "
                                                 "session, or altered on the way); it was not believed");
      body->clear();
      return Step::kDone;
    }
    if (isResult) {
      all_->resize(expect);
      *st = Status();
      return Step::kDone;
    }
    const uint32_t code = detail::getU32(local.data());
    // Rank 0's verdict, with its class as the wire carries it (wire.h wireCode).
    *st = ARFUSE_FAIL_TEXT(
        detail::fromWireCode(code),
        detail::sanitizeText(std::string(local.begin() + 4, local.begin() + static_cast<long>(h.payloadBytes))));
    return Step::kDone;
  }

  const IdInfo& info_;
  int rank_, nranks_;
  const void* mine_;
  size_t bytes_;
  std::vector<uint8_t>* all_;
  Deadline deadline_;
  double timeoutS_;
  std::string me_, where_;
  uint8_t challenge_[kChallengeBytes] = {};
};

Status checkArgs(int rank, int nranks, const void* mine, size_t bytes, const std::vector<uint8_t>* all,
                 const Options& options) {
  if (all == nullptr || (mine == nullptr && bytes > 0))
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "allGather: the blob or the output pointer is null");
  if (nranks < 1 || nranks > detail::kMaxRanks)
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "nranks=" + std::to_string(nranks) + " is out of range (1-" +
                                                       std::to_string(detail::kMaxRanks) + ")");
  if (rank < 0 || rank >= nranks)
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "rank " + std::to_string(rank) +
                                                       " is out of range for nranks=" + std::to_string(nranks) +
                                                       " (valid ranks are 0-" + std::to_string(nranks - 1) + ")");
  if (bytes > options.maxBlobBytes)
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "rank " + std::to_string(rank) + "'s blob is " +
                                                       std::to_string(bytes) + " bytes, over the limit of " +
                                                       std::to_string(options.maxBlobBytes) +
                                                       " (Options::maxBlobBytes)");
  if (options.timeoutMs <= 0)
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument,
                            "bootstrap timeout must be positive, got " + std::to_string(options.timeoutMs) + " ms");
  if (options.helloTimeoutMs <= 0)
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "bootstrap hello timeout must be positive, got " +
                                                       std::to_string(options.helloTimeoutMs) + " ms");
  if (options.errorGraceMs < 0)
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "bootstrap error grace must not be negative, got " +
                                                       std::to_string(options.errorGraceMs) + " ms");
  return Status();
}

}  // namespace

Status allGather(const UniqueId& id, int rank, int nranks, const void* mine, size_t bytes, std::vector<uint8_t>* all,
                 const Options& options) {
  IdInfo info;
  ARFUSE_CHECK(decodeUniqueId(id, &info));
  // Rank 0 owns the listener from here on, so that every early return below closes it.
  int listenFd = -1;
  const Status taken = rank == 0 ? detail::takeListener(info.nonce, &listenFd) : Status();
  if (Status bad = checkArgs(rank, nranks, mine, bytes, all, options); !bad.ok()) {
    detail::closeFd(listenFd);
    return bad.through(__FILE__, __LINE__);
  }
  if (rank != 0) return Client(info, rank, nranks, mine, bytes, all, options).run();
  if (!taken.ok())
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument,
                            "rank 0 holds no listener for this id (at " + idAddress(info) + "): " + taken.message());
  all->assign(static_cast<size_t>(nranks) * bytes, 0);
  if (bytes > 0) std::memcpy(all->data(), mine, bytes);
  const Status served = detail::serveRendezvous(listenFd, info, nranks, bytes, all, options);
  if (!served.ok()) all->clear();
  return served;
}

}  // namespace bootstrap
}  // namespace arfuse
