// allGather over arfuse's own rendezvous: a star around rank 0.
//
// Why a star and not a ring: the data is a few KiB per rank exchanged once at init, so bandwidth does
// not matter, while having one process see every hello is what makes the checks possible (nranks
// agreement, duplicate ranks, sizes, session) and lets every rank receive the same verdict. Rank 0
// serves all connections from one poll() loop, so a silent or slow peer cannot stall the others, and
// everything is bounded by one deadline.
//
// Failure policy at rank 0: a connection that does not speak the protocol (bad magic, closes before a
// full header) or belongs to another session (nonce) is dropped and the rendezvous continues, since
// it is not one of our ranks; anything wrong with a connection that claims to be one of our ranks is
// fatal, and rank 0 sends the same error text to every rank connected so far.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "bootstrap/bootstrap.h"
#include "bootstrap/socket.h"
#include "bootstrap/wire.h"

namespace arfuse {
namespace bootstrap {

using detail::Deadline;
using detail::FrameHeader;
using detail::Io;
using detail::kFrameHeaderBytes;

namespace {

double secondsSince(detail::Clock::time_point t0) {
  return std::chrono::duration<double>(detail::Clock::now() - t0).count();
}

// Error frames carry the Result code (4 bytes) then the text, so every rank reports the same class.
std::vector<uint8_t> errorFrame(int nranks, uint64_t nonce, Result code, const std::string& text) {
  std::string t = text.substr(0, detail::kMaxErrorText - 4);
  FrameHeader h;
  h.kind = detail::kError;
  h.nranks = nranks;
  h.nonce = nonce;
  h.payloadBytes = 4 + t.size();
  std::vector<uint8_t> f(kFrameHeaderBytes + h.payloadBytes);
  detail::encodeFrame(h, f.data());
  detail::putU32(f.data() + kFrameHeaderBytes, static_cast<uint32_t>(code));
  std::memcpy(f.data() + kFrameHeaderBytes + 4, t.data(), t.size());
  return f;
}

std::string peerName(int fd) {
  detail::SockAddr a;
  a.length = sizeof(a.storage);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.length) != 0) return "(unknown peer)";
  return detail::formatAddress(a);
}

// ---- Rank 0 --------------------------------------------------------------------------------------------

struct Peer {
  int fd = -1;
  std::string from;
  uint8_t header[kFrameHeaderBytes] = {};
  size_t headerGot = 0;
  int rank = -1;  // set once the header has passed every check
  size_t payloadGot = 0;
  bool complete = false;
};

class Server {
 public:
  Server(int listenFd, const IdInfo& info, int nranks, size_t bytes, std::vector<uint8_t>* all,
         const Deadline& deadline)
      : listenFd_(listenFd),
        info_(info),
        nranks_(nranks),
        bytes_(bytes),
        all_(all),
        deadline_(deadline),
        where_(idAddress(info)),
        joinedFrom_(nranks) {}

  ~Server() {
    for (Peer& p : peers_) detail::closeFd(p.fd);
    detail::closeFd(listenFd_);
  }

  Result run(std::string* error) {
    auto t0 = detail::Clock::now();
    joinedFrom_[0] = "this process";
    joined_ = 1;
    while (joined_ < nranks_ && fatal_ == Result::kOk) {
      if (deadline_.passed()) {
        fail(Result::kTimeout, timeoutText(secondsSince(t0)));
        break;
      }
      pollOnce();
    }
    if (fatal_ != Result::kOk) {
      notifyAll();
      *error = fatalText_;
      return fatal_;
    }
    return sendResults(error);
  }

 private:
  void fail(Result code, const std::string& text) {
    if (fatal_ != Result::kOk) return;
    fatal_ = code;
    fatalText_ = text;
  }

  void note(const std::string& text) {
    if (notes_.size() < 4) notes_.push_back(text);
  }

  std::string timeoutText(double waited) const {
    std::string missing;
    int shown = 0, count = 0;
    for (int r = 0; r < nranks_; ++r) {
      if (!joinedFrom_[r].empty()) continue;
      ++count;
      if (shown < 16) missing += (shown++ ? ", " : "") + std::to_string(r);
    }
    if (count > shown) missing += ", ...";
    std::string s = "rank 0 at " + where_ + " waited " + detail::formatSeconds(waited) + " but only " +
                    std::to_string(joined_) + " of " + std::to_string(nranks_) + " ranks joined (missing rank" +
                    (count > 1 ? "s " : " ") + missing +
                    "); check that those processes started, use this id, and can reach " + where_;
    for (const std::string& n : notes_) s += "; also: " + n;
    return s;
  }

  void pollOnce() {
    std::vector<pollfd> fds;
    fds.push_back({listenFd_, POLLIN, 0});
    for (const Peer& p : peers_) fds.push_back({p.fd, POLLIN, 0});
    int n = ::poll(fds.data(), fds.size(), std::min(deadline_.remainingMs(), 1000));
    if (n < 0) {
      if (errno != EINTR)
        fail(Result::kSystemError, "rank 0 at " + where_ + ": poll failed: " + detail::errnoText(errno));
      return;
    }
    // Peers first, by index into fds, before accept() appends to peers_.
    std::vector<size_t> drop;
    for (size_t i = 1; i < fds.size() && fatal_ == Result::kOk; ++i) {
      if (fds[i].revents == 0) continue;
      if (!service(peers_[i - 1])) drop.push_back(i - 1);
    }
    for (auto it = drop.rbegin(); it != drop.rend(); ++it) {
      detail::closeFd(peers_[*it].fd);
      peers_.erase(peers_.begin() + static_cast<long>(*it));
    }
    if (fds[0].revents != 0 && fatal_ == Result::kOk) acceptAll();
  }

  void acceptAll() {
    while (true) {
      int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED)
          fail(Result::kSystemError, "rank 0 at " + where_ + ": accept failed: " + detail::errnoText(errno));
        return;
      }
      // Bounded so that a flood of stray connections cannot exhaust this process's descriptors.
      if (peers_.size() >= static_cast<size_t>(nranks_) * 2 + 64) {
        note("refused a connection from " + peerName(fd) + ": too many open connections");
        detail::closeFd(fd);
        continue;
      }
      Peer p;
      p.fd = fd;
      p.from = peerName(fd);
      peers_.push_back(std::move(p));
    }
  }

  // Reads what is available from one peer. Returns false to drop the connection (not one of ours).
  bool service(Peer& p) {
    while (true) {
      uint8_t* dst;
      size_t want;
      if (p.headerGot < kFrameHeaderBytes) {
        dst = p.header + p.headerGot;
        want = kFrameHeaderBytes - p.headerGot;
      } else if (!p.complete) {
        dst = all_->data() + static_cast<size_t>(p.rank) * bytes_ + p.payloadGot;
        want = bytes_ - p.payloadGot;
      } else {
        uint8_t extra;
        dst = &extra;
        want = 1;
      }
      ssize_t n = ::recv(p.fd, dst, want, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) return lost(p, n == 0 ? 0 : errno);
      if (p.headerGot < kFrameHeaderBytes) {
        p.headerGot += static_cast<size_t>(n);
        if (p.headerGot == kFrameHeaderBytes && !admit(p)) return p.rank >= 0 || fatal_ != Result::kOk;
        if (p.rank >= 0 && bytes_ == 0) finish(p);
      } else if (!p.complete) {
        p.payloadGot += static_cast<size_t>(n);
        if (p.payloadGot == bytes_) finish(p);
      } else {
        fail(Result::kMismatch, "rank " + std::to_string(p.rank) + " (from " + p.from +
                                    ") sent bytes after its blob; is it running the same arfuse release?");
        return true;
      }
      if (fatal_ != Result::kOk) return true;
    }
  }

  void finish(Peer& p) {
    p.complete = true;
    ++joined_;
  }

  bool lost(Peer& p, int err) {
    std::string why = err == 0 ? "closed the connection" : "connection failed (" + detail::errnoText(err) + ")";
    if (p.rank < 0) {
      note("a connection from " + p.from + " " + why + " after " + std::to_string(p.headerGot) + " of " +
           std::to_string(kFrameHeaderBytes) + " header bytes");
      return false;
    }
    std::string r = "rank " + std::to_string(p.rank) + " (from " + p.from + ")";
    if (!p.complete) {
      fail(Result::kSystemError, r + " disconnected after " + std::to_string(p.payloadGot) + " of " +
                                     std::to_string(bytes_) + " bytes of its blob; did that process crash?");
    } else {
      fail(Result::kSystemError,
           r + " " + why + " before the rendezvous completed; did that process exit or give up early?");
    }
    return true;
  }

  // Checks a complete header. Returns false when the peer is not admitted (dropped or fatal).
  bool admit(Peer& p) {
    FrameHeader h = detail::decodeFrame(p.header);
    if (h.magic != detail::kFrameMagic || h.version != detail::kFrameVersion || h.kind != detail::kHello) {
      note("dropped a connection from " + p.from + " that did not speak the arfuse rendezvous protocol");
      return false;
    }
    if (h.nonce != info_.nonce) {
      std::string text = "session nonce mismatch: this id belongs to another rendezvous (rank 0 at " + where_ +
                         " is serving a different one); pass every rank the id from this run's arfuseGetUniqueId";
      sendBestEffort(p.fd, errorFrame(h.nranks, h.nonce, Result::kMismatch, text));
      note("dropped rank " + std::to_string(h.rank) + " from " + p.from + " that holds an id of another session");
      return false;
    }
    std::string who = "rank " + std::to_string(h.rank) + " (from " + p.from + ")";
    if (h.nranks != nranks_) {
      fail(Result::kMismatch, "rank " + std::to_string(h.rank) + " said nranks=" + std::to_string(h.nranks) +
                                  " but rank 0 expects " + std::to_string(nranks_) +
                                  "; every rank must pass the same nranks");
    } else if (h.rank < 0 || h.rank >= nranks_) {
      fail(Result::kMismatch, "a process (from " + p.from + ") joined as rank " + std::to_string(h.rank) +
                                  " but valid ranks are 0-" + std::to_string(nranks_ - 1));
    } else if (!joinedFrom_[h.rank].empty()) {
      fail(Result::kMismatch, "ranks " + std::to_string(h.rank) + " and " + std::to_string(h.rank) +
                                  " both joined (from " + joinedFrom_[h.rank] + " and " + p.from +
                                  "); every process must pass a distinct rank");
    } else if (h.payloadBytes != bytes_) {
      fail(Result::kMismatch, who + " sent a " + std::to_string(h.payloadBytes) + "-byte blob but rank 0's is " +
                                  std::to_string(bytes_) + " bytes; every rank must pass the same size");
    }
    if (fatal_ != Result::kOk) {
      // Told now, separately: it has no rank slot, so notifyAll would not reach it.
      sendBestEffort(p.fd, errorFrame(nranks_, info_.nonce, fatal_, fatalText_));
      return false;
    }
    p.rank = h.rank;
    joinedFrom_[h.rank] = p.from;
    return true;
  }

  void sendBestEffort(int fd, const std::vector<uint8_t>& frame) {
    size_t done = 0;
    int err = 0;
    // Short and independent of the main deadline: telling peers why is worth a moment even after a
    // timeout, but not worth hanging on a peer that stopped reading.
    detail::sendAll(fd, frame.data(), frame.size(), Deadline::afterMs(200), &done, &err);
    // Half-close, then drain what the peer was still sending, so that closing does not turn into a
    // reset that can destroy the error frame before the peer reads it.
    ::shutdown(fd, SHUT_WR);
    Deadline drain = Deadline::afterMs(200);
    uint8_t sink[4096];
    while (!drain.passed()) {
      pollfd pf{fd, POLLIN, 0};
      if (::poll(&pf, 1, drain.remainingMs()) <= 0) break;
      ssize_t n = ::recv(fd, sink, sizeof(sink), 0);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
    }
  }

  void notifyAll() {
    std::vector<uint8_t> frame = errorFrame(nranks_, info_.nonce, fatal_, fatalText_);
    for (Peer& p : peers_) {
      if (p.rank >= 0) sendBestEffort(p.fd, frame);
    }
  }

  Result sendResults(std::string* error) {
    FrameHeader h;
    h.kind = detail::kResult;
    h.nranks = nranks_;
    h.nonce = info_.nonce;
    h.payloadBytes = all_->size();
    uint8_t header[kFrameHeaderBytes];
    detail::encodeFrame(h, header);
    for (Peer& p : peers_) {
      if (!p.complete) continue;
      size_t done = 0;
      int err = 0;
      Io io = detail::sendAll(p.fd, header, sizeof(header), deadline_, &done, &err);
      if (io == Io::kOk) io = detail::sendAll(p.fd, all_->data(), all_->size(), deadline_, &done, &err);
      if (io != Io::kOk) {
        *error = "rank 0 at " + where_ + " could not send the gathered blobs to rank " + std::to_string(p.rank) + " (" +
                 p.from + "): " +
                 (io == Io::kTimeout  ? "it stopped reading before the deadline"
                  : io == Io::kClosed ? "it closed the connection"
                                      : detail::errnoText(err)) +
                 "; other ranks may have completed, so tear the group down";
        return io == Io::kTimeout ? Result::kTimeout : Result::kSystemError;
      }
    }
    return Result::kOk;
  }

  int listenFd_;
  IdInfo info_;
  int nranks_;
  size_t bytes_;
  std::vector<uint8_t>* all_;
  Deadline deadline_;
  std::string where_;
  std::vector<std::string> joinedFrom_;  // empty: not joined yet
  int joined_ = 0;
  std::vector<Peer> peers_;
  std::vector<std::string> notes_;
  Result fatal_ = Result::kOk;
  std::string fatalText_;
};

// ---- Ranks 1..n-1 --------------------------------------------------------------------------------------

Result readAnswer(int fd, int rank, int nranks, size_t bytes, const IdInfo& info, const Deadline& deadline,
                  double timeoutS, std::vector<uint8_t>* all, std::string* error) {
  const std::string me = "rank " + std::to_string(rank);
  const std::string where = idAddress(info);
  uint8_t raw[kFrameHeaderBytes];
  size_t done = 0;
  int err = 0;
  Io io = detail::recvAll(fd, raw, sizeof(raw), deadline, &done, &err);
  if (io == Io::kTimeout) {
    *error = me + " waited " + detail::formatSeconds(timeoutS) + " for rank 0 at " + where +
             " to answer; rank 0 is reachable but the rendezvous did not complete (is another rank missing or "
             "stuck? see rank 0's error)";
    return Result::kTimeout;
  }
  if (io != Io::kOk) {
    *error = me + ": rank 0 at " + where + " closed the connection without an answer" +
             (err ? " (" + detail::errnoText(err) + ")" : std::string()) + "; did rank 0 fail or exit? check its error";
    return Result::kSystemError;
  }
  FrameHeader h = detail::decodeFrame(raw);
  if (h.magic != detail::kFrameMagic || h.version != detail::kFrameVersion) {
    *error = me + ": " + where +
             " answered with something that is not an arfuse rendezvous frame; is another "
             "program (or another arfuse release) listening on that port?";
    return Result::kMismatch;
  }
  if (h.kind == detail::kError && h.payloadBytes >= 4 && h.payloadBytes <= detail::kMaxErrorText) {
    std::vector<uint8_t> text(h.payloadBytes);
    io = detail::recvAll(fd, text.data(), text.size(), deadline, &done, &err);
    if (io != Io::kOk) {
      *error = me + ": rank 0 at " + where + " reported an error but the connection dropped before its text arrived";
      return Result::kSystemError;
    }
    uint32_t code = detail::getU32(text.data());
    *error = std::string(text.begin() + 4, text.end());
    return code >= 1 && code <= static_cast<uint32_t>(Result::kSystemError) ? static_cast<Result>(code)
                                                                            : Result::kSystemError;
  }
  uint64_t expect = static_cast<uint64_t>(nranks) * bytes;
  if (h.kind != detail::kResult || h.nonce != info.nonce || h.nranks != nranks || h.payloadBytes != expect) {
    *error = me + ": rank 0 at " + where + " sent an unexpected answer (kind " + std::to_string(h.kind) + ", nranks " +
             std::to_string(h.nranks) + ", " + std::to_string(h.payloadBytes) + " bytes where " +
             std::to_string(expect) + " were expected); are all processes running the same arfuse release?";
    return Result::kMismatch;
  }
  all->assign(expect, 0);
  io = detail::recvAll(fd, all->data(), all->size(), deadline, &done, &err);
  if (io != Io::kOk) {
    *error = me + ": the answer from rank 0 at " + where + " stopped after " + std::to_string(done) + " of " +
             std::to_string(expect) + " bytes (" +
             (io == Io::kTimeout ? std::string("deadline reached") : "connection closed") + "); did rank 0 crash?";
    all->clear();
    return io == Io::kTimeout ? Result::kTimeout : Result::kSystemError;
  }
  return Result::kOk;
}

Result runClient(const IdInfo& info, int rank, int nranks, const void* mine, size_t bytes, std::vector<uint8_t>* all,
                 const Options& options, std::string* error) {
  const std::string me = "rank " + std::to_string(rank);
  const std::string where = idAddress(info);
  const double timeoutS = options.timeoutMs / 1000.0;
  Deadline deadline = Deadline::afterMs(options.timeoutMs);
  detail::SockAddr addr = detail::sockAddrOf(info);

  // Rank 0 may start later than us (launchers give no ordering), so refusals are retried with a
  // growing pause until the deadline; errors that cannot heal by waiting are reported at once.
  int fd = -1, err = 0;
  int pauseMs = 10;
  while (true) {
    fd = detail::connectOnce(addr, deadline, &err);
    if (fd >= 0) break;
    if (!detail::isTransientConnectError(err) || deadline.passed()) {
      *error = me + " could not connect to " + where +
               (deadline.passed() ? " after " + detail::formatSeconds(timeoutS) : std::string()) + ": " +
               detail::errnoText(err) + "; is rank 0 alive and is the address reachable from this host?";
      return deadline.passed() ? Result::kTimeout : Result::kSystemError;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(pauseMs, deadline.remainingMs())));
    pauseMs = std::min(pauseMs * 2, 500);
  }

  FrameHeader h;
  h.kind = detail::kHello;
  h.rank = rank;
  h.nranks = nranks;
  h.nonce = info.nonce;
  h.payloadBytes = bytes;
  uint8_t raw[kFrameHeaderBytes];
  detail::encodeFrame(h, raw);
  size_t done = 0;
  bool spoke = false;
  Io io = detail::sendUnlessReadable(fd, raw, sizeof(raw), deadline, &done, &err, &spoke);
  if (io == Io::kOk && bytes > 0) io = detail::sendUnlessReadable(fd, mine, bytes, deadline, &done, &err, &spoke);
  if (io == Io::kTimeout) {
    detail::closeFd(fd);
    *error = me + " could not send its blob to rank 0 at " + where + " within " + detail::formatSeconds(timeoutS) +
             "; is rank 0 stuck?";
    return Result::kTimeout;
  }
  if (io == Io::kError) {
    detail::closeFd(fd);
    *error = me + " lost its connection to rank 0 at " + where + ": " + detail::errnoText(err);
    return Result::kSystemError;
  }
  // kOk, or kClosed / rank 0 spoke early: either way, what rank 0 says next is the verdict.
  Result r = readAnswer(fd, rank, nranks, bytes, info, deadline, timeoutS, all, error);
  detail::closeFd(fd);
  return r;
}

}  // namespace

Result allGather(const UniqueId& id, int rank, int nranks, const void* mine, size_t bytes, std::vector<uint8_t>* all,
                 const Options& options, std::string* error) {
  if (all == nullptr || (mine == nullptr && bytes > 0)) {
    *error = "allGather: the blob or the output pointer is null";
    return Result::kInvalidArgument;
  }
  if (nranks < 1 || nranks > detail::kMaxRanks) {
    *error = "nranks=" + std::to_string(nranks) + " is out of range (1-" + std::to_string(detail::kMaxRanks) + ")";
    return Result::kInvalidArgument;
  }
  if (rank < 0 || rank >= nranks) {
    *error = "rank " + std::to_string(rank) + " is out of range for nranks=" + std::to_string(nranks) +
             " (valid ranks are 0-" + std::to_string(nranks - 1) + ")";
    return Result::kInvalidArgument;
  }
  if (bytes > options.maxBlobBytes) {
    *error = "rank " + std::to_string(rank) + "'s blob is " + std::to_string(bytes) + " bytes, over the limit of " +
             std::to_string(options.maxBlobBytes) + " (Options::maxBlobBytes)";
    return Result::kInvalidArgument;
  }
  if (options.timeoutMs <= 0) {
    *error = "bootstrap timeout must be positive, got " + std::to_string(options.timeoutMs) + " ms";
    return Result::kInvalidArgument;
  }
  IdInfo info;
  Result r = decodeUniqueId(id, &info, error);
  if (r != Result::kOk) return r;

  if (rank != 0) return runClient(info, rank, nranks, mine, bytes, all, options, error);

  int listenFd = detail::takeListener(info.nonce);
  if (listenFd < 0) {
    *error = "rank 0 holds no listener for this id (at " + idAddress(info) +
             "): rank 0 must run in the process that called arfuseGetUniqueId (or a child forked after it), "
             "once per id";
    return Result::kInvalidArgument;
  }
  all->assign(static_cast<size_t>(nranks) * bytes, 0);
  if (bytes > 0) std::memcpy(all->data(), mine, bytes);
  Server server(listenFd, info, nranks, bytes, all, Deadline::afterMs(options.timeoutMs));
  r = server.run(error);
  if (r != Result::kOk) all->clear();
  return r;
}

}  // namespace bootstrap
}  // namespace arfuse
