"""A stub libarfuse.so for testing the multi-process calls without a GPU or the native part: every
function of the binding table exists (NULL-returning, except those below), and the three
multi-process calls behave like the real ones at their boundary:
- arfuseGetUniqueId writes bytes i*7+3;
- arfuseCommInitRank checks that the id arrives by value and that nranks=3, rank=2, device=5 and a
  config with maxTokens=64 land in their places (InvalidArgument naming the problem otherwise);
- arfuseCommInitRankWithAllGather calls the callback twice with 40 bytes of 'A'+rank+round and
  checks every rank's slot, returning SystemError when the callback fails and Mismatch when a slot is
  wrong; the handle is 0x2000 + rank;
- arfuseCommQueryPlan answers InvalidArgument above 64 tokens, Unsupported above hidden 16384, and
  a one-shot plan otherwise (with the communicator's last error set as the real one does).
"""
import subprocess

import pytest

from conftest import find_cc

_STUB = r"""
#include <stddef.h>
#include <stdio.h>
#include <string.h>
typedef struct { unsigned char internal[128]; } uid_t_;
typedef struct { size_t size; unsigned magic, version; int maxTokens, maxHidden; unsigned dtypeMask;
                 int algo, timeoutMs, maxBlocks, deterministic, reserved; } cfg_t_;
typedef int (*gather_t)(void*, const void*, void*, size_t);
static char last[512];
static const char* names[] = {"arfuseSuccess", "arfuseInvalidArgument", "arfuseInvalidUsage", "arfuseUnsupported",
  "arfuseCudaError", "arfuseNcclError", "arfuseSystemError", "arfuseInternalError", "arfusePeerTimeout",
  "arfuseNoDevice", "arfuseMismatch"};
static int fail(int code, const char* text) { snprintf(last, sizeof last, "%s: %s", names[code], text); return code; }
int arfuseGetVersion(int* v) { *v = 100; return 0; }
const char* arfuseGetErrorName(int r) { return r >= 0 && r <= 10 ? names[r] : "arfuseUnknownResult"; }
const char* arfuseGetErrorString(int r) { (void)r; return "stub"; }
const char* arfuseGetLastError(void) { return last; }
const char* arfuseCommGetLastError(void* c) { (void)c; return last; }
typedef struct { int algo, blocks, threads; char reason[256]; } plan_t_;
int arfuseCommQueryPlan(void* c, int op, int tokens, int hidden, int dtype, plan_t_* plan) {
  char text[200];
  (void)c; (void)op; (void)dtype;
  if (tokens > 64) {
    snprintf(text, sizeof text, "arfuseCommQueryPlan: tokens=%d exceeds this communicator's maxTokens=64", tokens);
    return fail(1, text);
  }
  if (hidden > 16384) return fail(3, "arfuseCommQueryPlan: hidden too large for the stub");
  plan->algo = 1; plan->blocks = 1; plan->threads = 32;
  snprintf(plan->reason, sizeof plan->reason, "oneshot: stub plan for %d tokens", tokens);
  return 0;
}
int arfuseCommDestroy(void* c) { (void)c; return 0; }
int arfuseGetUniqueId(uid_t_* id) {
  for (int i = 0; i < 128; ++i) id->internal[i] = (unsigned char)(i * 7 + 3);
  return 0;
}
int arfuseCommInitRank(void** comm, int nranks, uid_t_ id, int rank, int device, const cfg_t_* cfg) {
  for (int i = 0; i < 128; ++i)
    if (id.internal[i] != (unsigned char)(i * 7 + 3)) return fail(1, "arfuseCommInitRank: uniqueId: not the stub's id");
  if (nranks != 3 || rank != 2 || device != 5) return fail(1, "arfuseCommInitRank: arguments out of place");
  if (cfg == NULL || cfg->size != sizeof(cfg_t_) || cfg->maxTokens != 64) return fail(1, "arfuseCommInitRank: config");
  *comm = (void*)(size_t)(0x1000 + rank);
  return 0;
}
int arfuseCommInitRankWithAllGather(void** comm, int nranks, int rank, int device, const cfg_t_* cfg,
                                    gather_t fn, void* ctx) {
  unsigned char mine[40], all[16 * 40];
  (void)cfg; (void)device;
  if (fn == NULL || ctx != NULL) return fail(1, "arfuseCommInitRankWithAllGather: allGather is NULL or ctx set");
  for (int round = 0; round < 2; ++round) {
    memset(mine, 'A' + rank + round, sizeof mine);
    memset(all, 0, sizeof all);
    int rc = fn(ctx, mine, all, sizeof mine);
    if (rc != 0) {
      char text[160];
      snprintf(text, sizeof text, "rank %d: the all-gather callback failed (returned %d)", rank, rc);
      return fail(6, text);
    }
    for (int r = 0; r < nranks; ++r)
      for (size_t i = 0; i < sizeof mine; ++i)
        if (all[r * sizeof mine + i] != (unsigned char)('A' + r + round)) return fail(10, "slot mismatch");
  }
  *comm = (void*)(size_t)(0x2000 + rank);
  return 0;
}
"""



_DEFINED = {"arfuseGetVersion", "arfuseGetErrorName", "arfuseGetErrorString", "arfuseGetLastError",
            "arfuseCommGetLastError", "arfuseCommDestroy", "arfuseGetUniqueId", "arfuseCommInitRank",
            "arfuseCommInitRankWithAllGather", "arfuseCommQueryPlan"}


def build_multiprocess_stub(directory) -> str:
    """Compiles the stub into directory/libarfuse.so and returns its path (skips without a C compiler)."""
    from arfuse import _lib

    cc = find_cc()
    if cc is None:
        pytest.skip("no C compiler (cc/gcc/clang) to build the stub library")
    rest = "\n".join(f"void* {n}(void) {{ return NULL; }}" for n, _, _ in _lib.FUNCTIONS if n not in _DEFINED)
    (directory / "stub.c").write_text(_STUB + rest + "\n")
    out = directory / "libarfuse.so"
    subprocess.run([cc, "-std=c99", "-shared", "-fPIC", "-o", str(out), str(directory / "stub.c")], check=True,
                   capture_output=True)
    return str(out)
