// Host-side reading of what the kernels record in the group's host-mapped area (diag/device_records.h):
// error records and call descriptors turned into sentences, result codes and log-line fields.
// Pure host code, no CUDA calls: the library, the watchdog, the dump and the CPU tests share it.
#pragma once

#include <stdint.h>

#include <functional>
#include <string>

#include "diag/device_records.h"

namespace arfuse {

// "AllReduce" (0), "AllReduceAddRmsNorm" (1), "unknown" otherwise: the op names of the log lines.
const char* callOpName(int op);
// Bytes one rank contributes to the call: tokens x hidden x dtype size (0 for an unknown dtype).
long long callDescBytes(CallDesc d);
// The path of a call as logs print it: "oneshot", ..., and for host-staged "hoststaged"; the
// host-staged variant separately ("oneshot" / "twoshot"; "" for other paths).
const char* callDescPath(CallDesc d);
const char* callDescVariant(CallDesc d);
// True when the descriptor was never filled (every real call has tokens >= 1).
inline bool callDescEmpty(CallDesc d) { return d.w0 == 0 && d.w1 == 0; }
// "AllReduceAddRmsNorm bf16 tokens=1 hidden=7168 (14336 B)"; with withPath, the path is added
// inside the parentheses: "(14336 B, path hoststaged two-shot)".
std::string describeCallDesc(CallDesc d, bool withPath);

// "peer_timeout", "mismatch", "concurrent" (the dump's code= words); "unknown" otherwise.
const char* recordCodeName(int code);
// ErrorRecord::code -> the arfuseResult_t a call reports: kErrPeerTimeout -> arfusePeerTimeout,
// kErrMismatch -> arfuseMismatch, kErrConcurrent -> arfuseInvalidUsage; arfuseInternalError for
// anything else (a code this build does not know).
int resultForRecordCode(int code);

// One sentence for the error record `e` of rank `who` (timeoutNs: the group's timeout), e.g.
//   rank 0 waited 0.300 s for rank 2 at call 17 (block 5, phase 0) in AllReduceAddRmsNorm bf16
//     tokens=1 hidden=7168 (14336 B, path oneshot); the group is aborted
//   divergent call at call 311: rank 0 made AllReduceAddRmsNorm bf16 tokens=1 hidden=7168 (14336 B),
//     rank 2 made AllReduce bf16 tokens=2 hidden=7168 (28672 B)
//   two calls of rank 1 ran at the same time (call 9): a communicator must be used from one stream
//     at a time
// No trailing period and no "next:" (see nextStepFor), so callers can append to it.
// `rankName` names a rank of the group that recorded it (default "rank N"; a group that spans hosts
// passes one that gives the global rank, host and local rank of its intra-host ranks).
std::string describeErrorRecord(const ErrorRecord& e, int who, uint64_t timeoutNs,
                                const std::function<std::string(int)>& rankName = nullptr);
// The "next:" advice for a record code (without the "next: " prefix).
std::string nextStepFor(int code);
// The key=value fields of the canonical log line for the record:
//   code=arfusePeerTimeout call=17 op=AllReduceAddRmsNorm bytes=14336 dtype=bf16 path=oneshot peer=2 block=5 phase=0
// (op/bytes/dtype/path only when the record carries this rank's descriptor; peer only when >= 0).
std::string errorRecordFields(const ErrorRecord& e);

// One line per error per rank: the watchdog and the library's failing calls both ask before they
// print a record's line. True for the first caller for (group area, rank, record call, record code),
// false afterwards. forgetErrorReports drops a group's claims; call it when the group's area is
// freed (a later group may get the same address).
bool claimErrorReport(const GroupShared* s, int rank, const ErrorRecord& e);
// An error the host found for local rank `rank` (kErrNcclTimeout, kErrReplicaMismatch), written into
// the group's host-mapped records as a kernel writes one (fields, then `valid`), so that the other
// processes of the host read it; and claimed, since the writer prints it itself with its whole text.
void writeHostErrorRecord(GroupShared* s, int rank, const ErrorRecord& rec);
void forgetErrorReports(const GroupShared* s);

// Copies of the host-mapped area, read with volatile loads (kernels may be writing it).
// readErrorRecord returns false (and leaves *out alone) when the record is not valid.
bool readErrorRecord(const GroupShared& s, int rank, ErrorRecord* out);
void readFlightRing(const GroupShared& s, int rank, FlightRing* out);
bool readAbort(const GroupShared& s);

}  // namespace arfuse
