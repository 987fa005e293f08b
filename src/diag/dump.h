// The flight-recorder dump: one rank's last calls and error record as text, in the format
// `arfuse triage` reads (docs/triage.md, "arfuse flight recorder"):
//
//   arfuse-flight-recorder v1 rank=0 dev=0 nranks=4 arch=sm_90 timeout_s=0.300 abort=1 entries=3
//   entry=0 epoch=15 op=AllReduceAddRmsNorm bytes=14336 dtype=bf16 path=oneshot start_ns=.. end_ns=.. tokens=1
//   hidden=7168 entry=1 epoch=16 ... entry=2 epoch=17 ... end_ns=pending tokens=1 hidden=7168 arfuse-error-record
//   rank=0 peer=2 block=5 epoch=17 phase=0 code=peer_timeout mine=AllReduceAddRmsNorm/bf16/1x7168/oneshot
//   arfuse-dump-note rank=0 error: rank 0 waited 0.300 s for rank 2 ...; next: ...
//   arfuse-dump-note rank=0 last_error: <the communicator's last error text>
//
// Entries are oldest first; `entry` counts them from 0 and `epoch` is the rank's 1-based call
// number. `end_ns=pending` marks a call that has not finished (still running, or stopped); a call
// that ended without valid outputs adds `status=failed` (a wait failed: its outputs are NaN) or
// `status=refused` (the group was already aborted: nothing sent, outputs NaN). Host-staged
// entries add `variant=oneshot|twoshot`. The error-record line is present only when the rank has a
// record; descriptors there are op/dtype/TOKENSxHIDDEN/path (path `hoststaged.twoshot` for a
// variant). `arfuse-dump-note` lines repeat what the log lines say, for people; triage does not
// classify them. Pure formatting: no CUDA calls, nothing written to the group's memory.
#pragma once

#include <stdint.h>

#include <string>

#include "base/status.h"
#include "diag/device_records.h"

namespace arfuse {

struct DumpInput {
  int rank = -1;
  int device = -1;
  int nranks = 0;
  int arch = 0;                         // 90 for sm_90; 0 when unknown
  uint64_t timeoutNs = 0;               // the group's timeout
  const GroupShared* shared = nullptr;  // the group's host-mapped area (only read); null: header only
  std::string lastError;                // the communicator's last error text ("" if none)
};

// "AllReduceAddRmsNorm/bf16/1x7168/oneshot" (the dump's descriptor form).
std::string compactCallDesc(CallDesc d);

// The dump of one rank, newline-terminated lines.
std::string formatDump(const DumpInput& in);

// Writes `text` to `path`: NULL or "-" is stderr; otherwise the file is opened for appending
// (several ranks may dump into one file), after expanding %p (process id) and %h (host name) as
// ARFUSE_DEBUG_FILE does. Fails with arfuseSystemError ("cannot open /x/y: Permission denied").
Status writeDump(const std::string& text, const char* path);

}  // namespace arfuse
