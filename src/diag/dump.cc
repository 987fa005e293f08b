#include "diag/dump.h"

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "arfuse/arfuse.h"
#include "common/log.h"
#include "diag/records.h"

namespace arfuse {

namespace {

// One line of text: a note must not spill into lines triage would read as something else.
std::string oneLine(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace

std::string compactCallDesc(CallDesc d) {
  std::string path = callDescPath(d);
  const std::string variant = callDescVariant(d);
  if (!variant.empty()) path += "." + variant;
  return strprintf("%s/%s/%dx%d/%s", callOpName(descOp(d)),
                   arfuseDataTypeName(static_cast<arfuseDataType_t>(descDtype(d))), descTokens(d), descHidden(d),
                   path.c_str());
}

std::string formatDump(const DumpInput& in) {
  std::vector<FlightEntry> entries;
  ErrorRecord rec{};
  bool haveRecord = false, aborted = false;
  if (in.shared) {
    FlightRing ring;
    readFlightRing(*in.shared, in.rank, &ring);
    for (int i = 0; i < kFlightEntries; ++i) {
      const FlightEntry& f = ring.entries[i];
      // Empty, or not where call f.call belongs (a slot being rewritten): left out.
      if (f.call == 0 || static_cast<int>((f.call - 1) % kFlightEntries) != i) continue;
      entries.push_back(f);
    }
    std::sort(entries.begin(), entries.end(),
              [](const FlightEntry& a, const FlightEntry& b) { return a.call < b.call; });
    haveRecord = readErrorRecord(*in.shared, in.rank, &rec);
    aborted = readAbort(*in.shared);
  }

  std::string out = strprintf("arfuse-flight-recorder v1 rank=%d dev=%d nranks=%d", in.rank, in.device, in.nranks);
  if (in.arch > 0) out += strprintf(" arch=sm_%d", in.arch);
  out += strprintf(" timeout_s=%.3f abort=%d entries=%zu\n", static_cast<double>(in.timeoutNs) / 1e9, aborted ? 1 : 0,
                   entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const FlightEntry& f = entries[i];
    const CallDesc d = f.desc;
    out += strprintf("entry=%zu epoch=%llu op=%s bytes=%lld dtype=%s path=%s start_ns=%llu end_ns=", i,
                     static_cast<unsigned long long>(f.call), callOpName(descOp(d)), callDescBytes(d),
                     arfuseDataTypeName(static_cast<arfuseDataType_t>(descDtype(d))), callDescPath(d),
                     static_cast<unsigned long long>(f.startNs));
    out += f.endNs ? std::to_string(f.endNs) : std::string("pending");
    out += strprintf(" tokens=%d hidden=%d", descTokens(d), descHidden(d));
    // ok: block 0 finished with valid outputs; failed: a wait failed, outputs NaN; refused: the group
    // was already aborted, nothing sent, outputs NaN.
    if (f.endNs)
      out += f.status == kFlightFailed ? " status=failed" : f.status == kFlightRefused ? " status=refused" : "";
    const std::string variant = callDescVariant(d);
    if (!variant.empty()) out += " variant=" + variant;
    out += "\n";
  }
  if (haveRecord) {
    out += strprintf("arfuse-error-record rank=%d peer=%d block=%d epoch=%llu phase=%d code=%s", in.rank, rec.peer,
                     rec.block, static_cast<unsigned long long>(rec.call), rec.phase, recordCodeName(rec.code));
    if (!callDescEmpty(rec.mine)) out += " mine=" + compactCallDesc(rec.mine);
    if (rec.code == kErrMismatch) out += " theirs=" + compactCallDesc(rec.theirs);
    out += "\n";
    out += strprintf("arfuse-dump-note rank=%d error: ", in.rank) +
           oneLine(describeErrorRecord(rec, in.rank, in.timeoutNs)) + "; next: " + nextStepFor(rec.code) + "\n";
  }
  if (!in.lastError.empty())
    out += strprintf("arfuse-dump-note rank=%d last_error: ", in.rank) + oneLine(in.lastError) + "\n";
  return out;
}

Status writeDump(const std::string& text, const char* path) {
  const bool toStderr = path == nullptr || std::strcmp(path, "-") == 0;
  std::string expanded;
  FILE* f = stderr;
  if (!toStderr) {
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    expanded = expandDebugPath(path, static_cast<long>(getpid()), host);
    ARFUSE_CHECK(openPrivateAppend(expanded, &f));  // 0600, O_NOFOLLOW, O_CLOEXEC
  }
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = std::fflush(f) == 0 && ok;
  const int e = errno;
  const bool closed = toStderr || std::fclose(f) == 0;
  if (!ok)
    return ARFUSE_FAIL(arfuseSystemError, "cannot write %s: %s", toStderr ? "stderr" : expanded.c_str(),
                       std::strerror(e));
  if (!closed) return ARFUSE_FAIL(arfuseSystemError, "cannot close %s: %s", expanded.c_str(), std::strerror(errno));
  return Status();
}

}  // namespace arfuse
