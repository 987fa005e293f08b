// Multi-process init decides "this rank is in my process, its raw pointers are mine" by a random
// per-process cookie, not by PID (equal PIDs are normal across PID namespaces). Real processes
// made with fork(): a child must never carry its parent's cookie, even one drawn before the fork.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <thread>
#include <vector>

#include "transport/process_cookie.h"

namespace arfuse {
namespace {

// The cookie a forked child computes, read back through a pipe.
uint64_t cookieOfChild() {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    const uint64_t c = processCookie();
    const ssize_t n = write(fds[1], &c, sizeof c);
    _exit(n == static_cast<ssize_t>(sizeof c) ? 0 : 1);
  }
  close(fds[1]);
  uint64_t c = 0;
  EXPECT_EQ(read(fds[0], &c, sizeof c), static_cast<ssize_t>(sizeof c));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return c;
}

TEST(ProcessCookie, ChildDrawsItsOwnEvenWhenTheParentHadOneBeforeFork) {
  // First child before the parent draws, then children after: all distinct from each other and
  // from the parent.
  std::set<uint64_t> seen;
  seen.insert(cookieOfChild());
  const uint64_t parent = processCookie();
  ASSERT_NE(parent, 0u);
  EXPECT_EQ(seen.count(parent), 0u);
  seen.insert(parent);
  for (int i = 0; i < 4; ++i) {
    const uint64_t c = cookieOfChild();
    EXPECT_NE(c, 0u);
    EXPECT_EQ(seen.count(c), 0u) << "a child repeated a cookie: " << std::hex << c;
    seen.insert(c);
  }
  EXPECT_EQ(processCookie(), parent) << "the parent's cookie changed across fork()";
}

TEST(ProcessCookie, OneValueForEveryThreadOfTheProcess) {
  const uint64_t mine = processCookie();
  std::vector<uint64_t> got(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) threads.emplace_back([&got, i] { got[i] = processCookie(); });
  for (std::thread& t : threads) t.join();
  for (uint64_t c : got) EXPECT_EQ(c, mine);
}

TEST(ProcessCookie, SameProcessNeedsTheSameHostAndCookie) {
  // The PID plays no part: two containers with PID 1 each are different processes.
  EXPECT_TRUE(sameProcess(7, 42, 7, 42));
  EXPECT_FALSE(sameProcess(7, 42, 7, 43));
  EXPECT_FALSE(sameProcess(7, 42, 8, 42));
  EXPECT_FALSE(sameProcess(7, 0, 7, 0)) << "an unset cookie must never match";
}

}  // namespace
}  // namespace arfuse
