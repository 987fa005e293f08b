// Helpers of the hostile-input tests (issue 37): a child process under an alarm, so that a case that
// turned quadratic or blocks fails at its bound instead of hanging the suite, and scratch files.
// The bounds are generous (seconds for work that takes milliseconds): they are not speed targets.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>

namespace hostile {

// Runs fn in a forked child killed after `seconds`; true when it returned true in time. *took: the
// child's wall time.
inline bool finishesWithin(int seconds, const std::function<bool()>& fn, double* took) {
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(static_cast<unsigned>(seconds));
    _exit(fn() ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  *took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// An empty directory under the test's temporary directory, named for this process and `name`.
inline std::string freshDir(const std::string& name) {
  std::string d = ::testing::TempDir() + "/hostile_" + std::to_string(getpid()) + "_" + name;
  std::system(("rm -rf '" + d + "'").c_str());
  mkdir(d.c_str(), 0755);
  return d;
}

inline void writeBytes(const std::string& path, const std::string& data) {
  std::ofstream o(path, std::ios::binary);
  o << data;
}

}  // namespace hostile
