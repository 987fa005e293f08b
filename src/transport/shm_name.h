// The names of arfuse's POSIX shared-memory segments, and the creator they record.
//
//   /arfuse-<16 hex random>-c<pid>.<start>.<pidns>-<suffix>      (the creator's fields in hex)
//
// The random part makes a name unguessable (O_EXCL turns a collision into an error, never into
// sharing). The creator tag is for `arfuse doctor --clean`: a segment nobody maps may still belong to
// an init in progress whose creator runs in another PID namespace (a container sharing /dev/shm with
// the host: its processes are invisible in this /proc, so "nobody holds it" proves nothing), or to a
// creator between creating and mapping it. --clean removes a tagged segment only when its creator is
// gone: same PID namespace as the cleaner, and the pid no longer runs the process that started at
// <start> (clock ticks since boot, /proc/PID/stat field 22, so a reused pid is not mistaken for it).
// Pure (no CUDA): the library names segments with it, doctor reads it, CPU tests check both.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace arfuse {

struct ShmCreator {
  long pid = 0;
  unsigned long long start = 0;  // clock ticks after boot when the process started
  unsigned long long pidns = 0;  // inode of its PID namespace (/proc/PID/ns/pid)
};

// Field 22 of /proc/<pid>/stat (under `proc`), or 0 when the process does not exist. The command name
// (field 2) may hold spaces and parentheses: the fields after it are counted from its last ')'.
inline unsigned long long processStartTicks(long pid, const std::string& proc = "/proc") {
  std::ifstream f(proc + "/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = all.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(all.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(rest >> field)) return 0;
  return std::strtoull(field.c_str(), nullptr, 10);
}

// The inode of /proc/<pid>/ns/pid ("pid:[4026531836]"), 0 when it cannot be read.
inline unsigned long long pidNamespaceOf(const std::string& pid = "self", const std::string& proc = "/proc") {
  char buf[64] = {};
  const ssize_t n = readlink((proc + "/" + pid + "/ns/pid").c_str(), buf, sizeof buf - 1);
  if (n <= 0) return 0;
  const char* open = std::strchr(buf, '[');
  return open ? std::strtoull(open + 1, nullptr, 10) : 0;
}

// This process as a creator ("c4d2.1a2b3.f0000000", hex: names must stay short, they travel in the
// init messages every rank receives).
inline std::string shmCreatorTag() {
  const long pid = static_cast<long>(getpid());
  char b[96];
  std::snprintf(b, sizeof b, "c%lx.%llx.%llx", pid, processStartTicks(pid), pidNamespaceOf());
  return b;
}

// The creator a segment's file name ("arfuse-<hex>-c<pid>.<start>.<pidns>-g", hex) records; false for a
// name without one (made by an arfuse before the tag, or not by arfuse).
inline bool parseShmCreator(const std::string& name, ShmCreator* out) {
  constexpr size_t at = 7 + 16;  // after "arfuse-" and the 16 random hex digits
  if (name.size() <= at + 2 || name.rfind("arfuse-", 0) != 0 || name.compare(at, 2, "-c") != 0) return false;
  long pid = 0;
  unsigned long long start = 0, ns = 0;
  int used = 0;
  if (std::sscanf(name.c_str() + at, "-c%lx.%llx.%llx-%n", &pid, &start, &ns, &used) != 3 || used == 0 || pid <= 0)
    return false;
  *out = ShmCreator{pid, start, ns};
  return true;
}

}  // namespace arfuse
