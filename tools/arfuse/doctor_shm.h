// `arfuse doctor`'s view of arfuse's POSIX shared memory: the /arfuse-* segments in /dev/shm, who owns
// them, how old they are, and whether a live process still holds them (maps them or has them open).
//
// A multi-process group's segments are unlinked as soon as every rank has mapped them, so a name
// that stays in /dev/shm belongs either to an init in progress (its rank 0 holds it) or to a group
// whose processes were all killed during init (nobody holds it: it only wastes memory, and on a small
// Docker /dev/shm it makes the next group fail). `arfuse doctor --clean` removes the latter.
// No CUDA: CPU-tested with a temporary directory standing in for /dev/shm.
#pragma once

#include <string>
#include <vector>

namespace arfuse {
namespace cli {
namespace checkup {

struct ShmSegmentInfo {
  std::string name;  // "arfuse-0123456789abcdef-g" (the file name under the directory)
  unsigned uid = 0;
  std::string owner;      // user name, else the uid as text
  double ageSeconds = 0;  // since its last change
  long long bytes = 0;
  std::vector<long> holders;  // pids of live processes that map it or hold it open
  bool holdersKnown = true;   // false: some processes could not be inspected (not root), so "nobody" is a guess
  // The creator its name records (transport/shm_name.h): kNoTag (an older arfuse's name), kGone (same PID
  // namespace, that process no longer runs), kAlive, or kElsewhere (another PID namespace: a
  // container sharing /dev/shm, whose processes this /proc does not show).
  enum Creator { kNoTag, kGone, kAlive, kElsewhere } creator = kNoTag;
  long creatorPid = 0;
};

struct ShmScan {
  bool listed = false;  // the directory could be read
  std::string error;    // why not
  std::vector<ShmSegmentInfo> segments;
  unsigned long long freeBytes = 0, totalBytes = 0;  // of the file system
};

// Lists arfuse-* in `dir` and finds their holders through `proc` (/proc/PID/maps and /proc/PID/fd).
ShmScan scanShm(const std::string& dir = "/dev/shm", const std::string& proc = "/proc");

// The doctor's `shm` check: WARN (with `arfuse doctor --clean` as the fix) when some segment is held
// by nobody, else OK; the message names them and /dev/shm's free space.
struct ShmVerdict {
  bool warn = false;
  std::string message, fix;
};
ShmVerdict judgeShm(const ShmScan& scan);

// Removes the listed segments that no live process holds, that this user may remove (its own, or any
// when root), and whose creator is gone; a segment without a creator tag only by its owner (root
// does not guess for other users: their creator may run where this /proc cannot see). One line per
// segment saying what was done (the caller escapes it: names are any local user's choice).
// *failures counts the ones that could not be removed.
std::vector<std::string> cleanShm(const ShmScan& scan, const std::string& dir, int* failures);

}  // namespace checkup
}  // namespace cli
}  // namespace arfuse
