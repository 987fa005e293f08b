#include "doctor_shm.h"

#include <dirent.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <set>

#include "transport/shm_name.h"

namespace arfuse {
namespace cli {
namespace checkup {

namespace {

std::string userName(unsigned uid) {
  passwd pw;
  passwd* found = nullptr;
  char buf[1024];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found) return found->pw_name;
  return std::to_string(uid);
}

bool isPid(const char* s) {
  if (!*s) return false;
  for (; *s; ++s)
    if (*s < '0' || *s > '9') return false;
  return true;
}

// Which of `names` (file names under dir) each live process holds: mapped (maps) or open (fd links).
void findHolders(const std::string& dir, const std::string& proc, std::map<std::string, std::set<long>>* holders,
                 bool* complete) {
  *complete = true;
  DIR* d = opendir(proc.c_str());
  if (!d) {
    *complete = false;
    return;
  }
  const std::string prefix = dir + "/";
  while (dirent* e = readdir(d)) {
    if (!isPid(e->d_name)) continue;
    const long pid = std::atol(e->d_name);
    const std::string base = proc + "/" + e->d_name;
    bool readable = false;
    std::ifstream maps(base + "/maps");
    std::string line;
    while (std::getline(maps, line)) {
      readable = true;
      const size_t at = line.find(prefix + "arfuse-");
      if (at == std::string::npos) continue;
      std::string name = line.substr(at + prefix.size());
      const size_t del = name.find(" (deleted)");
      if (del != std::string::npos) continue;  // unlinked already: not one of the listed names
      (*holders)[name].insert(pid);
    }
    if (DIR* fds = opendir((base + "/fd").c_str())) {
      readable = true;
      while (dirent* f = readdir(fds)) {
        if (f->d_name[0] == '.') continue;
        char target[4096];
        const ssize_t n = readlink((base + "/fd/" + f->d_name).c_str(), target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = '\0';
        const std::string t = target;
        if (t.rfind(prefix + "arfuse-", 0) == 0) (*holders)[t.substr(prefix.size())].insert(pid);
      }
      closedir(fds);
    }
    if (!readable && access(base.c_str(), F_OK) == 0) *complete = false;  // another user's process
  }
  closedir(d);
}

}  // namespace

namespace {
ShmSegmentInfo::Creator creatorOf(const std::string& name, const std::string& proc, long* pid) {
  ShmCreator c;
  if (!parseShmCreator(name, &c)) return ShmSegmentInfo::kNoTag;
  *pid = c.pid;
  const unsigned long long mine = pidNamespaceOf("self", proc);
  if (c.pidns == 0 || mine == 0 || c.pidns != mine) return ShmSegmentInfo::kElsewhere;
  const unsigned long long start = processStartTicks(c.pid, proc);
  return start != 0 && start == c.start ? ShmSegmentInfo::kAlive : ShmSegmentInfo::kGone;
}
}  // namespace

ShmScan scanShm(const std::string& dir, const std::string& proc) {
  ShmScan s;
  DIR* d = opendir(dir.c_str());
  if (!d) {
    s.error = "cannot list " + dir + ": " + std::strerror(errno);
    return s;
  }
  s.listed = true;
  struct statvfs vs;
  if (statvfs(dir.c_str(), &vs) == 0) {
    s.freeBytes = static_cast<unsigned long long>(vs.f_bavail) * vs.f_frsize;
    s.totalBytes = static_cast<unsigned long long>(vs.f_blocks) * vs.f_frsize;
  }
  const time_t now = time(nullptr);
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, "arfuse-", 7) != 0) continue;
    struct stat st;
    if (lstat((dir + "/" + e->d_name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    ShmSegmentInfo i;
    i.name = e->d_name;
    i.uid = st.st_uid;
    i.owner = userName(st.st_uid);
    i.ageSeconds = std::difftime(now, st.st_mtime);
    i.bytes = static_cast<long long>(st.st_size);
    i.creator = creatorOf(i.name, proc, &i.creatorPid);
    s.segments.push_back(i);
  }
  closedir(d);
  std::map<std::string, std::set<long>> holders;
  bool complete = true;
  findHolders(dir, proc, &holders, &complete);
  for (ShmSegmentInfo& i : s.segments) {
    const auto it = holders.find(i.name);
    if (it != holders.end()) i.holders.assign(it->second.begin(), it->second.end());
    // A segment of ours can only be held by processes we can inspect (it is 0600).
    i.holdersKnown = complete || i.uid == geteuid() || geteuid() == 0;
  }
  return s;
}

namespace {
std::string mibText(unsigned long long b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  return buf;
}
}  // namespace

ShmVerdict judgeShm(const ShmScan& s) {
  ShmVerdict v;
  if (!s.listed) {
    v.warn = true;
    v.message = s.error;
    v.fix = "check that /dev/shm is mounted";
    return v;
  }
  const std::string space = "/dev/shm: " + mibText(s.freeBytes) + " free of " + mibText(s.totalBytes);
  std::vector<const ShmSegmentInfo*> stale;
  size_t live = 0;
  unsigned long long staleBytes = 0;
  for (const ShmSegmentInfo& i : s.segments) {
    if (!i.holders.empty()) {
      ++live;
      continue;
    }
    stale.push_back(&i);
    staleBytes += static_cast<unsigned long long>(i.bytes);
  }
  if (stale.empty()) {
    v.message = space + "; no stale arfuse segments" +
                (live ? " (" + std::to_string(live) + " held by live processes: an init in progress)" : std::string());
    return v;
  }
  std::string list;
  for (size_t k = 0; k < stale.size() && k < 4; ++k) {
    const ShmSegmentInfo& i = *stale[k];
    char age[32];
    std::snprintf(age, sizeof age, "%.0f s", i.ageSeconds);
    list += (k ? ", " : "") + i.name + " (" + i.owner + ", " + age + " old, " + std::to_string(i.bytes) + " B" +
            (i.holdersKnown ? "" : ", holders unknown") + ")";
  }
  if (stale.size() > 4) list += ", ...";
  v.warn = true;
  v.message = std::to_string(stale.size()) + " arfuse segment(s) in /dev/shm that no live process holds (" +
              mibText(staleBytes) + ", left by groups killed during init): " + list + "; " + space;
  v.fix = "`arfuse doctor --clean` removes them";
  return v;
}

std::vector<std::string> cleanShm(const ShmScan& scan, const std::string& dir, int* failures) {
  std::vector<std::string> lines;
  *failures = 0;
  for (const ShmSegmentInfo& i : scan.segments) {
    const std::string path = dir + "/" + i.name;
    if (!i.holders.empty()) {
      lines.push_back("kept    " + path + ": held by pid " + std::to_string(i.holders[0]) +
                      (i.holders.size() > 1 ? " and others" : "") + " (an init in progress, or a live group)");
      continue;
    }
    if (!i.holdersKnown) {
      lines.push_back("kept    " + path + ": owned by " + i.owner + ", whose processes this user cannot inspect");
      continue;
    }
    if (i.uid != geteuid() && geteuid() != 0) {
      lines.push_back("kept    " + path + ": owned by " + i.owner + " (run as that user or root to remove it)");
      continue;
    }
    const std::string creator = "pid " + std::to_string(i.creatorPid);
    if (i.creator == ShmSegmentInfo::kAlive) {
      lines.push_back("kept    " + path + ": its creator, " + creator + ", still runs (an init in progress?)");
      continue;
    }
    if (i.creator == ShmSegmentInfo::kElsewhere) {
      lines.push_back("kept    " + path + ": its creator, " + creator +
                      ", ran in another PID namespace (a container sharing /dev/shm?), which this /proc does "
                      "not show; run --clean there");
      continue;
    }
    if (i.creator == ShmSegmentInfo::kNoTag && i.uid != geteuid()) {
      lines.push_back("kept    " + path + ": owned by " + i.owner +
                      " and its name records no creator (an older arfuse): remove it as that user, or by hand "
                      "if you are sure its group is gone");
      continue;
    }
    if (unlink(path.c_str()) == 0) {
      lines.push_back("removed " + path + " (" + std::to_string(i.bytes) + " B, owner " + i.owner +
                      (i.creator == ShmSegmentInfo::kGone ? ", its creator " + creator + " is gone" : std::string()) +
                      ", nobody held it)");
    } else {
      ++*failures;
      lines.push_back("FAILED  " + path + ": " + std::strerror(errno));
    }
  }
  if (scan.segments.empty()) lines.push_back("no arfuse-* segments in " + dir);
  return lines;
}

}  // namespace checkup
}  // namespace cli
}  // namespace arfuse
