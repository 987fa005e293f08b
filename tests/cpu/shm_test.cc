// POSIX shared memory of multi-process groups (src/transport/shm.cc): allocated for real so that a full
// /dev/shm is an error with the fix, never a SIGBUS; names random, exclusive and private; a segment of
// another owner under our name refused. The full-/dev/shm case runs in a child with its own mount
// namespace and a 1 MiB tmpfs on /dev/shm (needs root or unprivileged user namespaces; skipped with
// the reason otherwise).
#include "transport/shm.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <string>

#include "transport/shm_name.h"

namespace arfuse {
namespace {

// A Status as the bool the checks read, its message into *err.
bool okInto(const Status& st, std::string* err) {
  *err = st.message();
  return st.ok();
}

// Runs fn in a child whose /dev/shm is a private 1 MiB tmpfs. Returns the child's wait status, or -1
// with *why when this machine cannot make one.
template <typename Fn>
int inTinyShm(Fn fn, std::string* why) {
  int p[2];
  if (pipe(p) != 0) return *why = "pipe failed", -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    char ok = 0;
    const int flags = geteuid() == 0 ? CLONE_NEWNS : CLONE_NEWUSER | CLONE_NEWNS;
    if (unshare(flags) == 0 && mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") == 0)
      ok = 1;
    if (write(p[1], &ok, 1) != 1 || !ok) _exit(99);
    close(p[1]);
    _exit(fn());
  }
  close(p[1]);
  char ok = 0;
  const bool got = read(p[0], &ok, 1) == 1;
  close(p[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!got || !ok) {
    *why = "cannot mount a private tmpfs on /dev/shm here (needs root or user namespaces)";
    return -1;
  }
  return status;
}

TEST(Shm, FullDevShmIsAnErrorWithTheFixNotASigbus) {
  std::string why;
  // 4 MiB asked of a 1 MiB /dev/shm. ftruncate alone succeeded here and the first touch of the memory
  // killed the process with SIGBUS; posix_fallocate fails at creation, and the message says what to do.
  const int status = inTinyShm(
      [] {
        ShmSegment seg;
        std::string err;
        const std::string name = shmRandomName("h");
        if (okInto(shmCreate(name, 4u << 20, &seg), &err)) {
          std::memset(seg.host, 0x5a, seg.bytes);  // where the old code died
          return 1;
        }
        const bool named =
            err.find("needs 4194304 B (4.0 MiB) of shared memory but /dev/shm has") != std::string::npos &&
            err.find("--shm-size") != std::string::npos && err.find("maxTokens") != std::string::npos &&
            err.size() < 200;  // it must fit the 240-byte status every rank receives
        std::fprintf(stderr, "%s\n", err.c_str());
        // Nothing is left behind, and a segment that fits still works.
        const bool gone = shm_open(name.c_str(), O_RDONLY, 0) < 0 && errno == ENOENT;
        ShmSegment small;
        const bool fits = okInto(shmCreate(shmRandomName("g"), 256u << 10, &small), &err);
        if (fits) std::memset(small.host, 0x5a, small.bytes);
        shmUnlink(small.name);
        return named && gone && fits ? 0 : 2;
      },
      &why);
  if (status == -1) GTEST_SKIP() << "SKIPPED: " << why;
  ASSERT_TRUE(WIFEXITED(status)) << "the child died by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                                 << " (7 is SIGBUS: the memory was never allocated)";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(Shm, NamesAreRandomExclusiveAndPrivate) {
  std::set<std::string> names;
  for (int i = 0; i < 64; ++i) names.insert(shmRandomName("g"));
  EXPECT_EQ(names.size(), 64u);
  const std::string n = *names.begin();
  EXPECT_EQ(n.rfind("/arfuse-", 0), 0u);
  // "/arfuse-<16 hex>-<creator>-g": the creator is this process (transport/shm_name.h, for doctor --clean).
  ShmCreator c;
  ASSERT_TRUE(parseShmCreator(n.substr(1), &c)) << n;
  EXPECT_EQ(c.pid, static_cast<long>(getpid())) << n;
  EXPECT_EQ(c.start, processStartTicks(getpid())) << n;
  EXPECT_EQ(n.substr(n.size() - 2), "-g");
  EXPECT_LT(n.size(), 64u) << n;  // it travels in the hello (comm/mp_protocol.h kShmNameBytes)

  ShmSegment a, b;
  std::string err;
  ASSERT_TRUE(okInto(shmCreate(n, 8192, &a), &err)) << err;
  struct stat st;
  ASSERT_EQ(stat(("/dev/shm" + n).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 8192);
  EXPECT_FALSE(okInto(shmCreate(n, 8192, &b), &err));  // exclusive: a name that exists is never shared
  EXPECT_NE(err.find("File exists"), std::string::npos) << err;
  // Fresh memory is zero-filled.
  const auto* p = static_cast<const unsigned char*>(a.host);
  bool zero = true;
  for (size_t i = 0; i < a.bytes; ++i) zero = zero && p[i] == 0;
  EXPECT_TRUE(zero);
  shmRelease(&a);
  shmUnlink(n);
}

TEST(Shm, ReservedNameIsSizedLaterAndHeldMeanwhile) {
  const std::string n = shmRandomName("h");
  ShmSegment r, peer;
  std::string err;
  ASSERT_TRUE(okInto(shmReserve(n, &r), &err)) << err;
  EXPECT_GE(r.fd, 0);  // held open: `arfuse doctor` sees an init in progress, not a stale segment
  ASSERT_TRUE(okInto(shmAllocate(&r, 65536), &err)) << err;
  EXPECT_EQ(r.fd, -1);
  ASSERT_TRUE(okInto(shmOpen(n, 65536, 1000, &peer), &err)) << err;
  static_cast<char*>(r.host)[100] = 42;
  EXPECT_EQ(static_cast<char*>(peer.host)[100], 42);
  shmRelease(&peer);
  shmRelease(&r);
  shmUnlink(n);
}

TEST(Shm, SegmentOfAnotherOwnerIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "SKIPPED: giving a segment to another user needs root (chown)";
  const std::string n = shmRandomName("g");
  ShmSegment a, b;
  std::string err;
  ASSERT_TRUE(okInto(shmCreate(n, 4096, &a), &err)) << err;
  ASSERT_EQ(chown(("/dev/shm" + n).c_str(), 65534, 65534), 0);
  EXPECT_FALSE(okInto(shmOpen(n, 4096, 200, &b), &err));
  EXPECT_NE(err.find("belongs to uid 65534, not to this user"), std::string::npos) << err;
  shmRelease(&a);
  shmUnlink(n);
}

}  // namespace
}  // namespace arfuse
