// Per-file and per-stream state of the Analyzer (internal to analyzer.cc and traceback.cc).
#pragma once

#include <deque>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "analyzer.h"

namespace arfuse {
namespace triage {

// Structural literals the analyzer itself needs, scanned in the same pass as the catalogue's.
enum Extra : uint32_t {
  kTraceback = 1u << 0,
  kChainDirect = 1u << 1,
  kChainDuring = 1u << 2,
  kFaultThread = 1u << 3,
  kFatalPython = 1u << 4,
  kNcclInfo = 1u << 5,
  kFrHeader = 1u << 6,
  kErrorRecord = 1u << 7,
  kEpoch = 1u << 8,
  kTorchRootCause = 1u << 9,
  kTorchFailures = 1u << 10,
  kHintTp = 1u << 11,
  kHintWorld = 1u << 12,
  kHintNranks = 1u << 13,
  kHintTpVllm = 1u << 14,
  kDumpNote = 1u << 15,
  kLastError = 1u << 16,
  kFrameLine = 1u << 17,  // 'File "' (a traceback frame, also one pasted without its header)
  kFloorWord = 1u << 18,  // an error word for the grep floor ("error", "fail", "fatal", "[E]", ...)
  kEnvFact = 1u << 19,    // a version or GPU the line may state ("NCCL version", "Driver Version", ...)
};

// One process's output within a file (a rank, a named process, or the unprefixed lines): the
// Python traceback and faulthandler state machines run per stream, because ranks interleave.
struct Analyzer::Stream {
  enum State { kIdle, kFrames, kAfterExc } state = kIdle;
  bool chainPending = false;  // saw "The above exception was the direct cause" after an exception
  bool wrapper = false;       // the traceback being read re-raises lastExc
  int lastExc = -1;
  std::string lastFrame;  // innermost 'File "...", line N, in f' so far
  std::string lastCode;   // the source line printed under it
  bool prevWasFrame = false;
  int frames = 0;
  Occurrence frameOcc;  // where the innermost frame was printed
  int afterLines = 0;
  int faultState = 0;  // 1 after "Fatal Python error", 2 in the current thread's stack, 3 frame taken
  int fatalGroup = -1;
  int rank = -1;
  bool rankInferred = false;
  std::string proc;
  bool lastErrorPending = false;  // the previous line was NCCL's "Last error:"
  int codeSig = -1;               // a line signature the innermost source line matched
  std::vector<std::pair<std::string, std::string>> codeDetails;
  std::string userFrame;  // the outermost frame outside installed packages: the caller's line to change
};

struct Analyzer::FileState {
  static constexpr size_t kMaxStreams = 4096;  // distinct process prefixes tracked per file

  int file = 0;
  uint64_t lineNo = 0;
  int defaultRank = -1;  // from the file name (rank5.log, tp3.log)
  std::unordered_map<std::string, Stream> streams;
  std::string active;  // stream that owns unprefixed continuation lines
  int lastPrefixedRank = -1;
  uint64_t lastPrefixedLine = 0;
  Stamp lastStamp;
  std::unordered_map<std::string, int> ncclWarn;  // host:pid -> group of its latest WARN
  std::deque<std::pair<uint64_t, std::string>> ring;
  std::vector<int> pendingAfter;
  int frRank = -1;  // inside a flight-recorder dump of this rank
  int summaryLeft = 0;
  bool summaryFirst = false;
  bool haveFailure = false;
  TorchrunFailure failure;
  // A message that may continue on the next line(s) of the same stream (an exception's message, an error
  // line ending with ':'): the group it belongs to, where it was last extended, how many lines it may take.
  int contGroup = -1;
  std::string contKey;
  uint64_t contLine = 0;
  int contLeft = 0;
  const char* contFormat = "";
  char contLevel = 0;
  // A symptom (a crash on a signal) just seen: the native frames printed after it name where it crashed.
  int symptomGroup = -1;
  uint64_t symptomLine = 0;
  std::string symptomKey;
  // The last grep-floor line: a floor line right above a traceback header only announces it.
  int floorGroup = -1;
  uint64_t floorLine = 0;
  std::string floorKey;
  bool floorAnnounces = false;  // written by a logger's level prefix, or ending with ':' ("Exception in thread X:")
};

// Helpers shared by analyzer.cc, traceback.cc and verdict.cc.
std::string_view trimLeft(std::string_view s);
bool startsWith(std::string_view s, std::string_view p);
// "KeyError: 'x'", "torch.OutOfMemoryError: CUDA out of memory", "ray.exceptions.RayTaskError(E): m",
// "AssertionError": the final line of a Python traceback. `strict` (outside a traceback) also wants
// an exception-like class name and a message, so "Note: ..." or "Warning: ..." are not taken.
bool looksLikeException(std::string_view trimmed, bool strict);
// Inside a traceback: is this line the source line printed under a frame?
bool isSourceLine(bool afterFrame, std::string_view body);
// "0-4,6,7" (at most 40 runs are written).
std::string rankList(const std::set<int>& ranks);
// A message that may go on on the next line: an exception line, or a line that ends with ':'.
bool continuesOnNextLine(std::string_view body);
// The function a native stack frame names ("PC: @ 0x7f.. (unknown) addProxyOpIfNeeded()", "#0 0x.. in f (",
// "3 0x55.. tensorrt_llm::common::throwRuntimeError(char const*) + 100"), or empty.
std::string nativeFrameFunction(std::string_view body);
// A frame of installed code (site-packages, the standard library), not the caller's own.
bool isLibraryFrame(std::string_view frame);

constexpr size_t kMaxText = 400;

}  // namespace triage
}  // namespace arfuse
