// The built-in limits of the auto plan, written once: PlanPolicy's initialisers (plan/plan.h) and
// the ARFUSE_* registry's defaults (common/params.cc, which prints them and generates the docs'
// table) both come from here. Plain macros so that the registry can spell them as text.
#pragma once

#define ARFUSE_DEFAULT_ONESHOT_MAX_BYTES 524288       // 512 KiB of peer bytes (message x (n - 1))
#define ARFUSE_DEFAULT_HOST_ONESHOT_MAX_BYTES 131072  // 128 KiB of peer bytes, host-staged path
#define ARFUSE_DEFAULT_HOST_STAGED_MAX_BYTES 1048576  // 1 MiB per rank: host-staged below, NCCL above
// Auto plan: the two-phase low-latency variant above the one-phase limit, up to this message size
// (bytes per rank, 3+ ranks); 0: the auto plan never picks it (forced runs still can).
#define ARFUSE_DEFAULT_LL_TWO_PHASE_MAX_BYTES 0

#define ARFUSE_DEFAULT_TEXT_(x) #x
#define ARFUSE_DEFAULT_TEXT(x) ARFUSE_DEFAULT_TEXT_(x)
