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

  Result run(std::string* error) {
    const detail::SockAddr addr = detail::sockAddrOf(info_);
    std::string earlier;
    int pauseMs = 10;
    while (true) {
      int err = 0;
      int fd = detail::connectOnce(addr, deadline_, &err);
      if (fd < 0) {
        if (!detail::isTransientConnectError(err) || deadline_.passed()) {
          *error = me_ + " could not connect to " + where_ +
                   (deadline_.passed() ? " after " + detail::formatSeconds(timeoutS_) : std::string()) + ": " +
                   detail::errnoText(err) + (earlier.empty() ? "" : " (earlier: " + earlier + ")") +
                   "; is rank 0 alive and is the address reachable from this host?";
          return deadline_.passed() ? Result::kTimeout : Result::kSystemError;
        }
      } else {
        Result r = Result::kOk;
        std::string why;
        const Step s = converse(fd, &r, &why);
        detail::closeFd(fd);
        if (s == Step::kDone) {
          *error = why;
          return r;
        }
        earlier = why;
        if (deadline_.passed()) {
          *error = why + ", and the deadline of " + detail::formatSeconds(timeoutS_) + " passed; see rank 0's error";
          return Result::kTimeout;
        }
      }
      // Rank 0 may start later than us (launchers give no ordering), or may have evicted us from a
      // full connection table: wait a little, growing, and dial again.
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(pauseMs, deadline_.remainingMs())));
      pauseMs = std::min(pauseMs * 2, 500);
    }
  }

 private:
  Step converse(int fd, Result* r, std::string* error) {
    if (info_.family == AF_UNIX) {
      detail::PeerCred cred;
      if (detail::peerCredentials(fd, &cred) && cred.uid != info_.scopeId) {
        *error = me_ + ": the process listening at " + where_ + " (pid " + std::to_string(cred.pid) + ") runs as uid " +
                 std::to_string(cred.uid) + " but the id says rank 0 runs as uid " + std::to_string(info_.scopeId) +
                 ": it is not this group's rank 0";
        *r = Result::kMismatch;
        return Step::kDone;
      }
    }
    Step s = readChallenge(fd, r, error);
    if (s != Step::kContinue) return s;
    s = sendHello(fd, r, error);
    if (s != Step::kContinue) return s;
    return readAnswer(fd, r, error);
  }

  bool tag(const char* domain, const uint8_t* header, const void* payload, size_t n, uint8_t* out, Result* r,
           std::string* error) const {
    std::string err;
    if (detail::hmacSha256(
            info_.secret,
            {{domain, std::strlen(domain)}, {challenge_, kChallengeBytes}, {header, kFrameHeaderBytes}, {payload, n}},
            out, &err))
      return true;
    *error = me_ + ": " + err;
    *r = Result::kSystemError;
    return false;
  }

  Step notArfuse(Result* r, std::string* error) const {
    *error = me_ + ": " + where_ +
             " answered with something that is not an arfuse rendezvous frame; is another program (or another "
             "arfuse release) listening there?";
    *r = Result::kMismatch;
    return Step::kDone;
  }

  Step timedOut(const std::string& what, Result* r, std::string* error) const {
    *error = me_ + " waited " + detail::formatSeconds(timeoutS_) + " for rank 0 at " + where_ + " " + what;
    *r = Result::kTimeout;
    return Step::kDone;
  }

  Step readChallenge(int fd, Result* r, std::string* error) {
    uint8_t raw[kFrameHeaderBytes];
    size_t done = 0;
    int err = 0;
    Io io = detail::recvAll(fd, raw, sizeof raw, deadline_, &done, &err);
    if (io == Io::kTimeout && done == 0)
      return timedOut("to greet it; rank 0 is reachable but not serving (is it stuck before arfuseCommInitRank?)", r,
                      error);
    const FrameHeader h = detail::decodeFrame(raw);
    if (io == Io::kOk && (h.magic != detail::kFrameMagic || h.version != detail::kFrameVersion ||
                          h.kind != detail::kChallenge || h.payloadBytes != kChallengeBytes))
      return notArfuse(r, error);
    if (io == Io::kOk) io = detail::recvAll(fd, challenge_, kChallengeBytes, deadline_, &done, &err);
    if (io == Io::kTimeout) return notArfuse(r, error);  // a partial greeting: not an arfuse rank 0
    if (io != Io::kOk) {
      *error = me_ + ": rank 0 at " + where_ + " closed the connection before greeting it" +
               (err ? " (" + detail::errnoText(err) + ")" : std::string());
      return Step::kRetry;
    }
    if (h.nonce != info_.nonce) {
      *error = me_ + ": the rendezvous at " + where_ +
               " belongs to another session (its session nonce differs from this id's): the id is stale or from "
               "another run; pass every rank the id from this run's arfuseGetUniqueId";
      *r = Result::kMismatch;
      return Step::kDone;
    }
    return Step::kContinue;
  }

  Step sendHello(int fd, Result* r, std::string* error) {
    FrameHeader h;
    h.kind = detail::kHello;
    h.rank = rank_;
    h.nranks = nranks_;
    h.nonce = info_.nonce;
    h.payloadBytes = bytes_;
    uint8_t head[kFrameHeaderBytes + kTagBytes], tail[kTagBytes];
    detail::encodeFrame(h, head);
    if (!tag(detail::kTagHello, head, nullptr, 0, head + kFrameHeaderBytes, r, error)) return Step::kDone;
    if (!tag(detail::kTagBlob, head, mine_, bytes_, tail, r, error)) return Step::kDone;
    size_t done = 0;
    int err = 0;
    bool spoke = false;
    Io io = detail::sendUnlessReadable(fd, head, sizeof head, deadline_, &done, &err, &spoke);
    if (io == Io::kOk && bytes_ > 0) io = detail::sendUnlessReadable(fd, mine_, bytes_, deadline_, &done, &err, &spoke);
    if (io == Io::kOk) io = detail::sendUnlessReadable(fd, tail, sizeof tail, deadline_, &done, &err, &spoke);
    if (io == Io::kTimeout) {
      *error = me_ + " could not send its blob to rank 0 at " + where_ + " within " + detail::formatSeconds(timeoutS_) +
               "; is rank 0 stuck?";
      *r = Result::kTimeout;
      return Step::kDone;
    }
    if (io == Io::kError) {
      *error = me_ + " lost its connection to rank 0 at " + where_ + ": " + detail::errnoText(err);
      *r = Result::kSystemError;
      return Step::kDone;
    }
    return Step::kContinue;  // sent, or rank 0 spoke early / closed: what it says next is the verdict
  }

  Step readAnswer(int fd, Result* r, std::string* error) {
    uint8_t raw[kFrameHeaderBytes];
    size_t done = 0;
    int err = 0;
    Io io = detail::recvAll(fd, raw, sizeof raw, deadline_, &done, &err);
    if (io == Io::kTimeout)
      return timedOut(
          "to answer; rank 0 is reachable but the rendezvous did not complete (is another rank missing "
          "or stuck? see rank 0's error)",
          r, error);
    if (io != Io::kOk) {
      *error = me_ + ": rank 0 at " + where_ + " closed the connection without an answer" +
               (err ? " (" + detail::errnoText(err) + ")" : std::string());
      if (done == 0) return Step::kRetry;  // evicted, or rank 0 went away: dialling again tells which
      *error += "; did rank 0 fail or exit? check its error";
      *r = Result::kSystemError;
      return Step::kDone;
    }
    const FrameHeader h = detail::decodeFrame(raw);
    if (h.magic != detail::kFrameMagic || h.version != detail::kFrameVersion) return notArfuse(r, error);
    const uint64_t expect = static_cast<uint64_t>(nranks_) * bytes_;
    const bool isError = h.kind == detail::kError && h.payloadBytes >= 4 && h.payloadBytes <= detail::kMaxErrorText;
    const bool isResult = h.kind == detail::kResult && h.nranks == nranks_ && h.payloadBytes == expect;
    if (h.nonce != info_.nonce || (!isError && !isResult)) {
      *error = me_ + ": rank 0 at " + where_ + " sent an unexpected answer (kind " + std::to_string(h.kind) +
               ", nranks " + std::to_string(h.nranks) + ", " + std::to_string(h.payloadBytes) + " bytes where " +
               std::to_string(expect) + " were expected); are all processes running the same arfuse release?";
      *r = Result::kMismatch;
      return Step::kDone;
    }
    std::vector<uint8_t> local;
    std::vector<uint8_t>* body = isResult ? all_ : &local;
    body->assign(h.payloadBytes + kTagBytes, 0);
    io = detail::recvAll(fd, body->data(), body->size(), deadline_, &done, &err);
    if (io != Io::kOk) {
      *error = me_ + ": the answer from rank 0 at " + where_ + " stopped after " + std::to_string(done) + " of " +
               std::to_string(body->size()) + " bytes (" +
               (io == Io::kTimeout ? std::string("deadline reached") : "connection closed") + "); did rank 0 crash?";
      body->clear();
      *r = io == Io::kTimeout ? Result::kTimeout : Result::kSystemError;
      return Step::kDone;
    }
    // A result's tag covers the SHA-256 of the blobs (hashed once by rank 0, see crypto.h).
    uint8_t want[kTagBytes], digest[kTagBytes];
    std::string why;
    if (isResult && !detail::sha256(body->data(), h.payloadBytes, digest, &why)) {
      *error = me_ + ": " + why;
      *r = Result::kSystemError;
      body->clear();
      return Step::kDone;
    }
    if (!(isResult ? tag(detail::kTagResult, raw, digest, sizeof digest, want, r, error)
                   : tag(detail::kTagError, raw, body->data(), h.payloadBytes, want, r, error))) {
      body->clear();
      return Step::kDone;
    }
    if (!detail::tagsEqual(want, body->data() + h.payloadBytes)) {
      *error = me_ + ": rank 0 at " + where_ + " sent an " + (isResult ? "answer" : "error report") +
               " that fails authentication (not made with this id's secret: another session, or altered on the way); "
               "it was not believed";
      body->clear();
      *r = Result::kMismatch;
      return Step::kDone;
    }
    if (isResult) {
      all_->resize(expect);
      *r = Result::kOk;
      return Step::kDone;
    }
    const uint32_t code = detail::getU32(local.data());
    *error = detail::sanitizeText(std::string(local.begin() + 4, local.begin() + static_cast<long>(h.payloadBytes)));
    *r = code >= 1 && code <= static_cast<uint32_t>(Result::kSystemError) ? static_cast<Result>(code)
                                                                          : Result::kSystemError;
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

std::string checkArgs(int rank, int nranks, const void* mine, size_t bytes, const std::vector<uint8_t>* all,
                      const Options& options) {
  if (all == nullptr || (mine == nullptr && bytes > 0)) return "allGather: the blob or the output pointer is null";
  if (nranks < 1 || nranks > detail::kMaxRanks)
    return "nranks=" + std::to_string(nranks) + " is out of range (1-" + std::to_string(detail::kMaxRanks) + ")";
  if (rank < 0 || rank >= nranks)
    return "rank " + std::to_string(rank) + " is out of range for nranks=" + std::to_string(nranks) +
           " (valid ranks are 0-" + std::to_string(nranks - 1) + ")";
  if (bytes > options.maxBlobBytes)
    return "rank " + std::to_string(rank) + "'s blob is " + std::to_string(bytes) + " bytes, over the limit of " +
           std::to_string(options.maxBlobBytes) + " (Options::maxBlobBytes)";
  if (options.timeoutMs <= 0)
    return "bootstrap timeout must be positive, got " + std::to_string(options.timeoutMs) + " ms";
  if (options.helloTimeoutMs <= 0)
    return "bootstrap hello timeout must be positive, got " + std::to_string(options.helloTimeoutMs) + " ms";
  if (options.errorGraceMs < 0)
    return "bootstrap error grace must not be negative, got " + std::to_string(options.errorGraceMs) + " ms";
  return "";
}

}  // namespace

Result allGather(const UniqueId& id, int rank, int nranks, const void* mine, size_t bytes, std::vector<uint8_t>* all,
                 const Options& options, std::string* error) {
  IdInfo info;
  Result r = decodeUniqueId(id, &info, error);
  if (r != Result::kOk) return r;
  // Rank 0 owns the listener from here on, so that every early return below closes it.
  int listenFd = -1;
  std::string why;
  if (rank == 0) listenFd = detail::takeListener(info.nonce, &why);
  const std::string bad = checkArgs(rank, nranks, mine, bytes, all, options);
  if (!bad.empty()) {
    detail::closeFd(listenFd);
    *error = bad;
    return Result::kInvalidArgument;
  }
  if (rank != 0) return Client(info, rank, nranks, mine, bytes, all, options).run(error);
  if (listenFd < 0) {
    *error = "rank 0 holds no listener for this id (at " + idAddress(info) + "): " + why;
    return Result::kInvalidArgument;
  }
  all->assign(static_cast<size_t>(nranks) * bytes, 0);
  if (bytes > 0) std::memcpy(all->data(), mine, bytes);
  r = detail::serveRendezvous(listenFd, info, nranks, bytes, all, options, error);
  if (r != Result::kOk) all->clear();
  return r;
}

}  // namespace bootstrap
}  // namespace arfuse
