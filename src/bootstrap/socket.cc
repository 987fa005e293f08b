#include "bootstrap/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace arfuse {
namespace bootstrap {
namespace detail {

int Deadline::remainingMs() const {
  auto left = std::chrono::duration_cast<std::chrono::microseconds>(at - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>((left + 999) / 1000);
}

std::string formatAddress(const SockAddr& addr) {
  char host[INET6_ADDRSTRLEN + IF_NAMESIZE + 2] = {};
  if (addr.family() == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr.storage);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (addr.family() == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr.storage);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    std::string text = host;
    if (in6->sin6_scope_id != 0) {
      char name[IF_NAMESIZE] = {};
      text += "%";
      text += if_indextoname(in6->sin6_scope_id, name) ? name : std::to_string(in6->sin6_scope_id);
    }
    return "[" + text + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  if (addr.family() == AF_UNIX) {
    const auto* un = reinterpret_cast<const sockaddr_un*>(&addr.storage);
    const size_t n = addr.length > offsetof(sockaddr_un, sun_path) ? addr.length - offsetof(sockaddr_un, sun_path) : 0;
    if (n == 0) return "unix:(unnamed)";
    if (un->sun_path[0] == '\0') return "unix:@" + std::string(un->sun_path + 1, n - 1);
    return "unix:" + std::string(un->sun_path, strnlen(un->sun_path, n));
  }
  return "(unknown address family " + std::to_string(addr.family()) + ")";
}

SockAddr unixAbstractAddress(const uint8_t name[16]) {
  static const char* kDigits = "0123456789abcdef";
  std::string text = "arfuse-";
  for (int i = 0; i < 16; ++i) {
    text += kDigits[name[i] >> 4];
    text += kDigits[name[i] & 15];
  }
  SockAddr a;
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  un.sun_path[0] = '\0';
  std::memcpy(un.sun_path + 1, text.data(), text.size());
  std::memcpy(&a.storage, &un, sizeof(un));
  a.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + text.size());
  return a;
}

bool peerCredentials(int fd, PeerCred* out) {
  ucred c{};
  socklen_t len = sizeof(c);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) != 0 || len != sizeof(c)) return false;
  out->pid = c.pid;
  out->uid = c.uid;
  return true;
}

std::string errnoText(int err) {
  // strerror's capitalised text reads oddly in the middle of our sentences.
  std::string s = std::strerror(err);
  if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

std::string formatSeconds(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", seconds);
  return buf;
}

namespace {

bool isWildcard(const SockAddr& a) {
  if (a.family() == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&a.storage)->sin_addr.s_addr == htonl(INADDR_ANY);
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a.storage);
  return IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr);
}

bool parseLiteral(const std::string& spec, int port, SockAddr* out) {
  sockaddr_in in{};
  if (inet_pton(AF_INET, spec.c_str(), &in.sin_addr) == 1) {
    in.sin_family = AF_INET;
    in.sin_port = htons(static_cast<uint16_t>(port));
    std::memcpy(&out->storage, &in, sizeof(in));
    out->length = sizeof(in);
    return true;
  }
  std::string host = spec;
  uint32_t scope = 0;
  size_t pct = spec.find('%');
  if (pct != std::string::npos) {
    host = spec.substr(0, pct);
    scope = if_nametoindex(spec.substr(pct + 1).c_str());
    if (scope == 0) return false;
  }
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  sockaddr_in6 in6{};
  if (inet_pton(AF_INET6, host.c_str(), &in6.sin6_addr) == 1) {
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(static_cast<uint16_t>(port));
    in6.sin6_scope_id = scope;
    std::memcpy(&out->storage, &in6, sizeof(in6));
    out->length = sizeof(in6);
    return true;
  }
  return false;
}

bool setPort(SockAddr* a, int port) {
  if (a->family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&a->storage)->sin_port = htons(static_cast<uint16_t>(port));
  } else {
    reinterpret_cast<sockaddr_in6*>(&a->storage)->sin6_port = htons(static_cast<uint16_t>(port));
  }
  return true;
}

// First IPv4 address of the first interface `pick` accepts, else its first IPv6 one: IPv4 first
// because that is what mixed clusters most reliably route between hosts. Interfaces are tried in the
// order the kernel lists them.
// *found says whether one was; fails when the interfaces cannot be listed.
template <typename Pick>
Status firstInterfaceAddress(Pick pick, int port, SockAddr* out, std::string* chosen, bool* anyNamed, bool* found) {
  ifaddrs* list = nullptr;
  *found = false;
  if (getifaddrs(&list) != 0)
    return ARFUSE_FAIL_TEXT(arfuseSystemError, "could not list network interfaces: " + errnoText(errno));
  *anyNamed = false;
  std::vector<std::string> order;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next)
    if (it->ifa_name && std::find(order.begin(), order.end(), it->ifa_name) == order.end())
      order.push_back(it->ifa_name);
  for (const std::string& name : order) {
    if (!pick(name)) continue;
    *anyNamed = true;
    for (int want : {AF_INET, AF_INET6}) {
      for (ifaddrs* it = list; it != nullptr && !*found; it = it->ifa_next) {
        if (it->ifa_name == nullptr || name != it->ifa_name || it->ifa_addr == nullptr) continue;
        if (it->ifa_addr->sa_family != want || !(it->ifa_flags & IFF_UP)) continue;
        size_t len = want == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
        std::memcpy(&out->storage, it->ifa_addr, len);
        out->length = static_cast<socklen_t>(len);
        setPort(out, port);
        *chosen = name;
        *found = true;
      }
    }
    if (*found) break;
  }
  freeifaddrs(list);
  return Status();
}

Status interfaceAddress(const std::string& name, int port, SockAddr* out) {
  std::string chosen;
  bool exists = false, found = false;
  ARFUSE_CHECK(
      firstInterfaceAddress([&](const std::string& n) { return n == name; }, port, out, &chosen, &exists, &found));
  if (found) return Status();
  return ARFUSE_FAIL_TEXT(arfuseInvalidArgument,
                          exists ? "interface '" + name + "' has no IPv4 or IPv6 address (or is down)"
                                 : "'" + name + "' is neither an IP address nor a network interface of this host");
}

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p <= s.size()) {
    size_t c = s.find(',', p);
    if (c == std::string::npos) c = s.size();
    if (c > p) out.push_back(s.substr(p, c - p));
    p = c + 1;
  }
  return out;
}

}  // namespace

bool interfaceSelected(const std::string& list, const std::string& name) {
  std::string l = list;
  const bool exclude = !l.empty() && l[0] == '^';
  if (exclude) l = l.substr(1);
  bool exact = !l.empty() && l[0] == '=';
  if (exact) l = l.substr(1);
  bool matched = false;
  for (const std::string& item : splitList(l)) matched = matched || (exact ? name == item : name.rfind(item, 0) == 0);
  return exclude ? !matched : matched;
}

bool usesUnixSocket(const std::string& address, const std::string& ifname) {
  return address == "unix" || (address.empty() && ifname.empty());
}

Status resolveListenAddress(const std::string& spec, const std::string& ifname, int port, SockAddr* out) {
  if (port < 0 || port > 65535)
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "bootstrap port " + std::to_string(port) +
                                                       " is out of range (0 for an ephemeral port, or 1-65535)");
  if (spec.empty()) {
    // Loopback only when the list names it: a list such as "^docker" means "a real interface".
    const bool namesLoopback = ifname[0] != '^' && interfaceSelected(ifname, "lo");
    std::string chosen;
    bool any = false, found = false;
    auto pick = [&](const std::string& n) { return interfaceSelected(ifname, n) && (n != "lo" || namesLoopback); };
    ARFUSE_CHECK(firstInterfaceAddress(pick, port, out, &chosen, &any, &found));
    if (found) return Status();
    return ARFUSE_FAIL_TEXT(
        arfuseInvalidArgument,
        any ? "no interface selected by ifname '" + ifname + "' has an address (or they are down)"
            : "ifname '" + ifname + "' selects none of this host's interfaces (see `ip -brief address`)");
  }
  if (!parseLiteral(spec, port, out)) ARFUSE_CHECK(interfaceAddress(spec, port, out));
  if (isWildcard(*out))
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "bootstrap address '" + spec +
                                                       "' is a wildcard; give the address (or interface) the other "
                                                       "ranks will dial, since it is written into the unique id");
  return Status();
}

bool setNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

void closeFd(int fd) {
  if (fd >= 0) ::close(fd);
}

Status openListener(const SockAddr& addr, SockAddr* bound, int* listenFd) {
  *listenFd = -1;
  int fd = ::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return ARFUSE_FAIL_TEXT(arfuseSystemError,
                            "could not create a socket for " + formatAddress(addr) + ": " + errnoText(errno));
  int one = 1;
  // SO_REUSEADDR so a fixed port freed by a crashed run (TIME_WAIT) can be bound again at once.
  if (addr.family() != AF_UNIX) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, addr.get(), addr.length) != 0) {
    int e = errno;
    closeFd(fd);
    return ARFUSE_FAIL_TEXT(arfuseSystemError, "rank 0 could not listen on " + formatAddress(addr) + ": " +
                                                   errnoText(e) +
                                                   (e == EADDRINUSE ? "; pick another port or 0 for an ephemeral one"
                                                                    : "; check that the address belongs to this host"));
  }
  if (::listen(fd, SOMAXCONN) != 0) {
    int e = errno;
    closeFd(fd);
    return ARFUSE_FAIL_TEXT(arfuseSystemError,
                            "rank 0 could not listen on " + formatAddress(addr) + ": " + errnoText(e));
  }
  bound->length = sizeof(bound->storage);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound->storage), &bound->length) != 0) {
    int e = errno;
    closeFd(fd);
    return ARFUSE_FAIL_TEXT(arfuseSystemError,
                            "could not read the bound address of " + formatAddress(addr) + ": " + errnoText(e));
  }
  *listenFd = fd;
  return Status();
}

int connectOnce(const SockAddr& addr, const Deadline& deadline, int* err) {
  int fd = ::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  int one = 1;
  if (addr.family() != AF_UNIX) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (::connect(fd, addr.get(), addr.length) == 0) return fd;
  if (errno != EINPROGRESS) {
    *err = errno;
    closeFd(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int n;
  do {
    n = ::poll(&p, 1, deadline.remainingMs());
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    *err = n == 0 ? ETIMEDOUT : errno;
    closeFd(fd);
    return -1;
  }
  int soErr = 0;
  socklen_t len = sizeof(soErr);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &soErr, &len);
  if (soErr != 0) {
    *err = soErr;
    closeFd(fd);
    return -1;
  }
  return fd;
}

bool isTransientConnectError(int err) {
  switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ETIMEDOUT:
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ENETDOWN:
    case EAGAIN:
    case EINTR:
      return true;
    default:
      return false;
  }
}

namespace {

// Waits for `events` on fd; returns kOk when ready.
Io waitFor(int fd, short events, const Deadline& deadline, short* revents, int* err) {
  while (true) {
    int ms = deadline.remainingMs();
    if (ms == 0) return Io::kTimeout;
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      *err = errno;
      return Io::kError;
    }
    if (n == 0) continue;  // re-check the deadline
    *revents = p.revents;
    return Io::kOk;
  }
}

Io sendImpl(int fd, const void* data, size_t size, const Deadline& deadline, size_t* done, int* err, bool* peerSpoke) {
  const auto* p = static_cast<const uint8_t*>(data);
  *done = 0;
  while (*done < size) {
    ssize_t n = ::send(fd, p + *done, size - *done, MSG_NOSIGNAL);
    if (n > 0) {
      *done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      *err = errno;
      return (errno == EPIPE || errno == ECONNRESET) ? Io::kClosed : Io::kError;
    }
    short ev = 0;
    short want = static_cast<short>(POLLOUT | (peerSpoke ? POLLIN : 0));
    Io w = waitFor(fd, want, deadline, &ev, err);
    if (w != Io::kOk) return w;
    if (peerSpoke && (ev & POLLIN)) {
      *peerSpoke = true;
      return Io::kClosed;
    }
  }
  return Io::kOk;
}

}  // namespace

Io sendAll(int fd, const void* data, size_t size, const Deadline& deadline, size_t* done, int* err) {
  return sendImpl(fd, data, size, deadline, done, err, nullptr);
}

Io sendUnlessReadable(int fd, const void* data, size_t size, const Deadline& deadline, size_t* done, int* err,
                      bool* peerSpoke) {
  *peerSpoke = false;
  return sendImpl(fd, data, size, deadline, done, err, peerSpoke);
}

Io recvAll(int fd, void* data, size_t size, const Deadline& deadline, size_t* done, int* err) {
  auto* p = static_cast<uint8_t*>(data);
  *done = 0;
  while (*done < size) {
    ssize_t n = ::recv(fd, p + *done, size - *done, 0);
    if (n > 0) {
      *done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Io::kClosed;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *err = errno;
      return errno == ECONNRESET ? Io::kClosed : Io::kError;
    }
    short ev = 0;
    Io w = waitFor(fd, POLLIN, deadline, &ev, err);
    if (w != Io::kOk) return w;
  }
  return Io::kOk;
}

}  // namespace detail
}  // namespace bootstrap
}  // namespace arfuse
