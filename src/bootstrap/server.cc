// Rank 0's side of the rendezvous: one poll() loop that serves every connection.
//
// Each rule below answers an attack that stopped a group from forming when it was tried on loopback:
//  - Nothing rank 0 sends blocks the loop. Every frame goes into the connection's outbox and leaves
//    when poll() says the socket is writable, so a peer that never reads costs a few bytes, not time
//    (the first design sent error frames with a 200 ms blocking send + drain: 150 bogus hellos used up
//    a 30 s timeout).
//  - A connection is *unidentified* until the tag after its hello header proves it holds the id's
//    secret (HMAC over rank 0's per-connection challenge, so a hello cannot be replayed on another
//    connection). Only an identified connection can fail the rendezvous: what a stranger says is
//    dropped with a note. Unidentified connections get Options::helloTimeoutMs to authenticate, and
//    when the table is full the oldest of them is evicted to make room (the first design refused new
//    connections at the cap, so 80 silent connections shut the real ranks out).
//  - On AF_UNIX the kernel names the uid of every process that connects (SO_PEERCRED): another user
//    is refused before a byte is read, with an error frame that says why.
//  - accept() runs a bounded number of times per turn of the loop, so a flood of connections cannot
//    starve the peers already connected of service.
// When the rendezvous fails, every member still connected (and, for a short grace period, every rank
// that connects and authenticates late) is told the same sentence in an authenticated error frame,
// so the ranks report one cause. Only members hear it: the sentence names ranks and their addresses,
// which a stranger that merely reached the port has no business learning (it is closed unanswered).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

#include "base/printable.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/crypto.h"
#include "bootstrap/socket.h"
#include "bootstrap/wire.h"

namespace arfuse {
namespace bootstrap {
namespace detail {

namespace {

constexpr int kAcceptBatch = 16;  // accepts per turn of the loop
constexpr int kMaxTurnMs = 100;   // poll() wakes at least this often to enforce hello deadlines
constexpr size_t kHeadBytes = kFrameHeaderBytes + kTagBytes;

double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Bytes waiting to leave one connection: owned bytes, or a view of the gathered blobs (which every
// peer receives, so they are not copied per connection).
struct Chunk {
  std::vector<uint8_t> own;
  const uint8_t* view = nullptr;
  size_t viewBytes = 0;
  size_t done = 0;
  const uint8_t* data() const { return view ? view : own.data(); }
  size_t size() const { return view ? viewBytes : own.size(); }
};

struct Conn {
  int fd = -1;
  std::string from;
  Clock::time_point since;
  uint8_t challenge[kChallengeBytes] = {};
  std::deque<Chunk> out;
  bool closing = false;  // told its verdict: half-close once the outbox is empty, then read to EOF
  bool halfClosed = false;
  bool dead = false;  // to be removed at the end of this turn
  uint8_t head[kHeadBytes] = {};
  size_t headGot = 0;
  bool headerChecked = false;
  FrameHeader hdr;
  bool identified = false;  // the hello tag verified: it holds the id's secret
  int rank = -1;            // identified and admitted: owns slot `rank`
  size_t blobGot = 0;
  uint8_t tail[kTagBytes] = {};
  size_t tailGot = 0;
  bool complete = false;
};

class Server {
 public:
  Server(int listenFd, const IdInfo& info, int nranks, size_t bytes, std::vector<uint8_t>* all, const Options& o)
      : listenFd_(listenFd),
        info_(info),
        nranks_(nranks),
        bytes_(bytes),
        all_(all),
        options_(o),
        deadline_(Deadline::afterMs(o.timeoutMs)),
        where_(idAddress(info)),
        joinedFrom_(nranks),
        cap_(static_cast<size_t>(nranks) * 2 + 64) {}

  ~Server() {
    for (Conn& c : conns_) closeFd(c.fd);
    closeFd(listenFd_);
  }

  Status run() {
    const auto t0 = Clock::now();
    joinedFrom_[0] = "this process";
    joined_ = 1;
    while (joined_ < nranks_ && fatal_.ok()) {
      if (deadline_.passed()) {
        fail(arfusePeerTimeout, timeoutText(secondsSince(t0)));
        break;
      }
      turn(std::min(deadline_.remainingMs(), kMaxTurnMs));
    }
    if (!fatal_.ok()) {
      spreadVerdict();
      return fatal_;
    }
    return sendResults();
  }

 private:
  // ---- bookkeeping ----
  // The group's failure: the first one wins, and every member is told it (spreadVerdict).
  void fail(arfuseResult_t code, const std::string& text) {
    if (!fatal_.ok()) return;
    fatal_ = ARFUSE_FAIL(code, "%s", text.c_str());
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
    std::string s = "rank 0 at " + where_ + " waited " + formatSeconds(waited) + " but only " +
                    std::to_string(joined_) + " of " + std::to_string(nranks_) + " ranks joined (missing rank" +
                    (count > 1 ? "s " : " ") + missing +
                    "); check that those processes started, use this id, and can reach " + where_;
    for (const std::string& n : notes_) s += "; also: " + n;
    if (dropped_ > 0)
      s += "; " + std::to_string(dropped_) + " connection(s) were dropped without authenticating (" +
           std::to_string(evicted_) + " evicted at the cap of " + std::to_string(cap_) + ", " + std::to_string(slow_) +
           " silent past " + formatSeconds(options_.helloTimeoutMs / 1000.0) + ")";
    return s;
  }

  bool tag(const char* domain, const Conn& c, const uint8_t* header, const void* payload, size_t n, uint8_t* out) {
    const Status made = hmacSha256(
        info_.secret,
        {{domain, std::strlen(domain)}, {c.challenge, kChallengeBytes}, {header, kFrameHeaderBytes}, {payload, n}},
        out);
    if (made.ok()) return true;
    fail(made.code(), "rank 0 at " + where_ + ": " + made.message());
    return false;
  }

  // ---- frames out ----
  void queue(Conn& c, std::vector<uint8_t> bytes) {
    Chunk k;
    k.own = std::move(bytes);
    c.out.push_back(std::move(k));
  }

  void queueChallenge(Conn& c) {
    FrameHeader h;
    h.kind = kChallenge;
    h.nranks = nranks_;
    h.nonce = info_.nonce;
    h.payloadBytes = kChallengeBytes;
    std::vector<uint8_t> f(kFrameHeaderBytes + kChallengeBytes);
    encodeFrame(h, f.data());
    std::memcpy(f.data() + kFrameHeaderBytes, c.challenge, kChallengeBytes);
    queue(c, std::move(f));
  }

  // The verdict, authenticated for this connection; the connection then closes.
  void tell(Conn& c, arfuseResult_t code, const std::string& text) {
    const std::string t = text.substr(0, kMaxErrorText - 4);
    FrameHeader h;
    h.kind = kError;
    h.nranks = nranks_;
    h.nonce = info_.nonce;
    h.payloadBytes = 4 + t.size();
    std::vector<uint8_t> f(kFrameHeaderBytes + h.payloadBytes + kTagBytes);
    encodeFrame(h, f.data());
    putU32(f.data() + kFrameHeaderBytes, wireCode(code));
    std::memcpy(f.data() + kFrameHeaderBytes + 4, t.data(), t.size());
    if (!tag(kTagError, c, f.data(), f.data() + kFrameHeaderBytes, h.payloadBytes,
             f.data() + kFrameHeaderBytes + h.payloadBytes))
      std::memset(f.data() + kFrameHeaderBytes + h.payloadBytes, 0, kTagBytes);
    queue(c, std::move(f));
    c.closing = true;
  }

  // Sends what the socket takes now. False when the peer is gone.
  bool flush(Conn& c) {
    while (!c.out.empty()) {
      Chunk& k = c.out.front();
      while (k.done < k.size()) {
        ssize_t n = ::send(c.fd, k.data() + k.done, k.size() - k.done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
          k.done += static_cast<size_t>(n);
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
        return false;
      }
      c.out.pop_front();
    }
    if (c.closing && !c.halfClosed) {
      // Half-close, then read to EOF: closing with unread input would turn into a reset that can
      // destroy the error frame before the peer reads it.
      ::shutdown(c.fd, SHUT_WR);
      c.halfClosed = true;
    }
    return true;
  }

  // ---- the loop ----
  void turn(int timeoutMs) {
    std::vector<pollfd> fds;
    fds.push_back({listenFd_, POLLIN, 0});
    for (const Conn& c : conns_) fds.push_back({c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    int n = ::poll(fds.data(), fds.size(), std::max(timeoutMs, 0));
    if (n < 0) {
      if (errno != EINTR) fail(arfuseSystemError, "rank 0 at " + where_ + ": poll failed: " + errnoText(errno));
      return;
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      Conn& c = conns_[i - 1];
      if (fds[i].revents == 0 || c.dead) continue;
      if ((fds[i].revents & (POLLOUT | POLLERR | POLLHUP)) && !flush(c)) {
        lost(c, errno);
        continue;
      }
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) c.closing ? drain(c) : service(c);
    }
    if (listenFd_ >= 0 && (fds[0].revents & POLLIN)) acceptSome();
    expireUnidentified();
    conns_.erase(std::remove_if(conns_.begin(), conns_.end(),
                                [](const Conn& c) {
                                  if (c.dead) closeFd(c.fd);
                                  return c.dead;
                                }),
                 conns_.end());
  }

  void acceptSome() {
    for (int k = 0; k < kAcceptBatch; ++k) {
      int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED && errno != EMFILE && errno != ENFILE)
          fail(arfuseSystemError, "rank 0 at " + where_ + ": accept failed: " + errnoText(errno));
        if (errno == EMFILE || errno == ENFILE) note("accept: " + errnoText(errno) + " (too many open files)");
        return;
      }
      if (conns_.size() >= cap_ && !evictOldestUnidentified()) {
        closeFd(fd);  // every slot is held by an identified rank: cannot happen with cap > nranks
        continue;
      }
      Conn c;
      c.fd = fd;
      c.since = Clock::now();
      if (const Status drawn = randomBytes(c.challenge, kChallengeBytes); !drawn.ok()) {
        closeFd(fd);
        fail(drawn.code(), "rank 0 at " + where_ + ": " + drawn.message());
        return;
      }
      queueChallenge(c);
      PeerCred cred;
      if (info_.family == AF_UNIX && peerCredentials(fd, &cred)) {
        c.from = "pid " + std::to_string(cred.pid) + " uid " + std::to_string(cred.uid);
        if (!uidAllowed(cred.uid)) {
          const std::string why = "rank 0 at " + where_ + " (uid " + std::to_string(geteuid()) +
                                  ") refuses a connection from " + c.from +
                                  ": the ranks of a group must run as one user (list other uids in "
                                  "ARFUSE_BOOTSTRAP_UIDS on rank 0 to admit them)";
          note("refused " + c.from + ": not this user");
          ++dropped_;
          tell(c, arfuseMismatch, why);
        }
      } else {
        c.from = peerNameOf(fd);
      }
      conns_.push_back(std::move(c));  // in the grace period too: one that authenticates hears why
      flush(conns_.back());
    }
  }

  bool uidAllowed(uint32_t uid) const {
    if (uid == static_cast<uint32_t>(geteuid())) return true;
    return std::find(options_.allowedUids.begin(), options_.allowedUids.end(), uid) != options_.allowedUids.end();
  }

  static std::string peerNameOf(int fd) {
    SockAddr a;
    a.length = sizeof(a.storage);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.length) != 0) return "(unknown peer)";
    return formatAddress(a);
  }

  bool evictOldestUnidentified() {
    Conn* oldest = nullptr;
    for (Conn& c : conns_)
      if (!c.identified && !c.dead && (!oldest || c.since < oldest->since)) oldest = &c;
    if (!oldest) return false;
    oldest->dead = true;
    ++evicted_;
    if (!oldest->closing) ++dropped_;
    return true;
  }

  void expireUnidentified() {
    const auto now = Clock::now();
    for (Conn& c : conns_) {
      if (c.identified || c.dead) continue;
      const auto limit = std::chrono::milliseconds(c.closing ? options_.errorGraceMs : options_.helloTimeoutMs);
      if (now - c.since < limit) continue;
      c.dead = true;
      if (!c.closing) {
        ++dropped_;
        ++slow_;
      }
    }
  }

  void drain(Conn& c) {
    uint8_t sink[4096];
    while (true) {
      ssize_t n = ::recv(c.fd, sink, sizeof sink, 0);
      if (n > 0) continue;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      c.dead = true;  // EOF or error: nothing more to tell it
      return;
    }
  }

  // ---- frames in ----
  void service(Conn& c) {
    // After a failure, connections keep being read until they authenticate (then hear the verdict).
    while (!c.dead && !c.closing && (fatal_.ok() || !c.identified)) {
      uint8_t* dst;
      size_t want;
      uint8_t extra;
      if (c.headGot < kHeadBytes) {
        dst = c.head + c.headGot;
        // Stop at the header first: a stranger is turned away before its tag is even read.
        want = (c.headerChecked ? kHeadBytes : kFrameHeaderBytes) - c.headGot;
      } else if (c.rank >= 0 && c.blobGot < bytes_) {
        dst = all_->data() + static_cast<size_t>(c.rank) * bytes_ + c.blobGot;
        want = bytes_ - c.blobGot;
      } else if (c.rank >= 0 && c.tailGot < kTagBytes) {
        dst = c.tail + c.tailGot;
        want = kTagBytes - c.tailGot;
      } else {
        dst = &extra;
        want = 1;
      }
      ssize_t n = ::recv(c.fd, dst, want, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) return lost(c, n == 0 ? 0 : errno);
      const size_t got = static_cast<size_t>(n);
      if (c.headGot < kHeadBytes) {
        c.headGot += got;
        if (c.headGot == kFrameHeaderBytes && !c.headerChecked && !checkHeader(c)) return;
        if (c.headGot == kHeadBytes && !identify(c)) return;
      } else if (c.rank >= 0 && c.blobGot < bytes_) {
        c.blobGot += got;
      } else if (c.rank >= 0 && c.tailGot < kTagBytes) {
        c.tailGot += got;
        if (c.tailGot == kTagBytes) finish(c);
      } else {
        fail(arfuseMismatch, "rank " + std::to_string(c.rank) + " (from " + c.from +
                                 ") sent bytes after its blob; is it running the same arfuse release?");
      }
    }
  }

  void drop(Conn& c, const std::string& why) {
    note(why);
    ++dropped_;
    c.dead = true;
  }

  // The 32 header bytes of an unidentified connection: is it a hello for this session at all?
  bool checkHeader(Conn& c) {
    c.hdr = decodeFrame(c.head);
    c.headerChecked = true;
    if (c.hdr.magic != kFrameMagic || c.hdr.version != kFrameVersion || c.hdr.kind != kHello) {
      drop(c, "dropped a connection from " + c.from + " that did not speak this arfuse rendezvous protocol");
      return false;
    }
    if (c.hdr.nonce != info_.nonce) {
      drop(c, "dropped a hello from " + c.from + " for another session (an id of another run?)");
      return false;
    }
    return true;
  }

  // The hello's tag: from here on the peer is one of ours, and what it says can fail the group.
  bool identify(Conn& c) {
    uint8_t want[kTagBytes];
    if (!tag(kTagHello, c, c.head, nullptr, 0, want)) return false;
    if (!tagsEqual(want, c.head + kFrameHeaderBytes)) {
      drop(c, "dropped a hello from " + c.from + " that failed authentication (it does not hold this id's secret)");
      return false;
    }
    c.identified = true;
    if (!fatal_.ok()) {  // a member that arrived after the failure (the grace period)
      tell(c, fatal_.code(), fatal_.message());
      return false;
    }
    const FrameHeader& h = c.hdr;
    if (h.nranks != nranks_) {
      fail(arfuseMismatch, "rank " + std::to_string(h.rank) + " said nranks=" + std::to_string(h.nranks) +
                               " but rank 0 expects " + std::to_string(nranks_) +
                               "; every rank must pass the same nranks");
    } else if (h.rank < 0 || h.rank >= nranks_) {
      fail(arfuseMismatch, "a process (from " + c.from + ") joined as rank " + std::to_string(h.rank) +
                               " but valid ranks are 0-" + std::to_string(nranks_ - 1));
    } else if (!joinedFrom_[h.rank].empty()) {
      fail(arfuseMismatch, "ranks " + std::to_string(h.rank) + " and " + std::to_string(h.rank) +
                               " both joined (from " + joinedFrom_[h.rank] + " and " + c.from +
                               "); every process must pass a distinct rank");
    } else if (h.payloadBytes != bytes_) {
      fail(arfuseMismatch, "rank " + std::to_string(h.rank) + " (from " + c.from + ") sent a " +
                               std::to_string(h.payloadBytes) + "-byte blob but rank 0's is " + std::to_string(bytes_) +
                               " bytes; every rank must pass the same size");
    }
    if (!fatal_.ok()) return false;
    c.rank = h.rank;
    joinedFrom_[h.rank] = c.from;
    return true;
  }

  void finish(Conn& c) {
    uint8_t want[kTagBytes];
    const uint8_t* blob = all_->data() + static_cast<size_t>(c.rank) * bytes_;
    if (!tag(kTagBlob, c, c.head, blob, bytes_, want)) return;
    if (!tagsEqual(want, c.tail)) {
      fail(arfuseMismatch, "rank " + std::to_string(c.rank) + " (from " + c.from +
                               ")'s blob failed its authentication check: it was altered on the way");
      return;
    }
    c.complete = true;
    ++joined_;
  }

  void lost(Conn& c, int err) {
    const std::string why = err == 0 ? "closed the connection" : "connection failed (" + errnoText(err) + ")";
    if (!c.identified || c.closing) {
      if (!c.closing)
        drop(c, "a connection from " + c.from + " " + why + " after " + std::to_string(c.headGot) +
                    " bytes, before authenticating");
      c.dead = true;
      return;
    }
    c.dead = true;
    const std::string r = "rank " + std::to_string(c.rank) + " (from " + c.from + ")";
    if (!c.complete) {
      fail(arfuseSystemError, r + " disconnected after " + std::to_string(c.blobGot) + " of " + std::to_string(bytes_) +
                                  " bytes of its blob; did that process crash?");
    } else {
      fail(arfuseSystemError,
           r + " " + why + " before the rendezvous completed; did that process exit or give up early?");
    }
  }

  // ---- endings ----
  // Tells every connection the verdict, and for a short grace keeps telling newcomers (a rank that
  // connects late hears the cause instead of "connection refused"), then closes.
  void spreadVerdict() {
    for (Conn& c : conns_)
      if (!c.dead && !c.closing && c.identified) tell(c, fatal_.code(), fatal_.message());
    for (Conn& c : conns_)
      if (!c.dead && !flush(c)) c.dead = true;
    const Deadline grace = Deadline::afterMs(options_.errorGraceMs);
    while (!grace.passed()) {
      bool open = false;
      for (const Conn& c : conns_) open = open || !c.dead;
      if (!open && listenFd_ < 0) break;
      turn(std::min(grace.remainingMs(), kMaxTurnMs));
    }
  }

  Status sendResults() {
    closeFd(listenFd_);
    listenFd_ = -1;
    FrameHeader h;
    h.kind = kResult;
    h.nranks = nranks_;
    h.nonce = info_.nonce;
    h.payloadBytes = all_->size();
    uint8_t header[kFrameHeaderBytes];
    encodeFrame(h, header);
    uint8_t digest[kTagBytes];
    if (const Status hashed = sha256(all_->data(), all_->size(), digest); !hashed.ok())
      fail(hashed.code(), "rank 0 at " + where_ + ": " + hashed.message());
    for (Conn& c : conns_) {
      if (!fatal_.ok()) break;
      if (!c.complete) {
        c.dead = true;  // strangers still connected: no business here any more
        continue;
      }
      Chunk hk, body, tk;
      hk.own.assign(header, header + kFrameHeaderBytes);
      body.view = all_->data();
      body.viewBytes = all_->size();
      tk.own.resize(kTagBytes);
      if (!tag(kTagResult, c, header, digest, sizeof digest, tk.own.data())) break;
      c.out.push_back(std::move(hk));
      c.out.push_back(std::move(body));
      c.out.push_back(std::move(tk));
      c.closing = true;
    }
    while (fatal_.ok()) {
      Conn* pending = nullptr;
      for (Conn& c : conns_)
        if (!c.dead && !c.out.empty()) pending = &c;
      if (!pending) break;
      if (deadline_.passed())
        return ARFUSE_FAIL(arfusePeerTimeout,
                           "rank 0 at %s could not send the gathered blobs to rank %d (%s): it stopped reading before "
                           "the deadline; other ranks may have completed, so tear the group down",
                           where_.c_str(), pending->rank, pending->from.c_str());
      turn(std::min(deadline_.remainingMs(), kMaxTurnMs));
      for (Conn& c : conns_)
        if (c.complete && c.dead && !c.out.empty())
          return ARFUSE_FAIL(arfuseSystemError,
                             "rank 0 at %s could not send the gathered blobs to rank %d (%s): it closed the "
                             "connection; other ranks may have completed, so tear the group down",
                             where_.c_str(), c.rank, c.from.c_str());
    }
    return fatal_;
  }

  int listenFd_;
  IdInfo info_;
  int nranks_;
  size_t bytes_;
  std::vector<uint8_t>* all_;
  Options options_;
  Deadline deadline_;
  std::string where_;
  std::vector<std::string> joinedFrom_;  // empty: not joined yet
  int joined_ = 0;
  size_t cap_;
  std::vector<Conn> conns_;
  std::vector<std::string> notes_;
  int dropped_ = 0, evicted_ = 0, slow_ = 0;
  Status fatal_;  // the group's failure, told to every member
};

}  // namespace

Status serveRendezvous(int listenFd, const IdInfo& info, int nranks, size_t bytes, std::vector<uint8_t>* all,
                       const Options& options) {
  Server server(listenFd, info, nranks, bytes, all, options);
  return server.run();
}

std::string sanitizeText(const std::string& text) { return printable(text); }

}  // namespace detail
}  // namespace bootstrap
}  // namespace arfuse
