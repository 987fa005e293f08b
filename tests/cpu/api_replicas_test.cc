// ARFUSE_CHECK_REPLICAS, the host part (api/replicas.h): the ranks' copies meet, are compared with
// rank 0's, and a difference names the lowest differing rank, the tensor and the first element
// with both bit patterns. Fresh random data; the CUDA part is tested on a GPU (gpu_replicas_test).
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "api/replicas.h"

namespace arfuse {
namespace {

struct Copies {
  ReplicaShape shape;
  std::vector<std::vector<unsigned char>> bytes;  // per rank: residual then weight
  std::vector<ReplicaShape> shapes() const { return std::vector<ReplicaShape>(bytes.size(), shape); }
  std::vector<const unsigned char*> data() const {
    std::vector<const unsigned char*> d;
    for (const auto& b : bytes) d.push_back(b.data());
    return d;
  }
};

Copies randomCopies(int nranks, int tokens, int hidden, arfuseDataType_t dt, uint32_t seed) {
  Copies c;
  c.shape = ReplicaShape{tokens, hidden, dt, true};
  std::mt19937 rng(seed);
  std::vector<unsigned char> one(c.shape.residualBytes() + c.shape.weightBytes());
  for (unsigned char& b : one) b = static_cast<unsigned char>(rng());
  c.bytes.assign(nranks, one);
  return c;
}

TEST(Replicas, EqualCopiesPass) {
  for (arfuseDataType_t dt : {arfuseBfloat16, arfuseFloat16, arfuseFloat32}) {
    const Copies c = randomCopies(4, 3, 256, dt, 7 + dt);
    EXPECT_EQ(compareReplicas(c.shapes(), c.data(), 1), "");
  }
}

TEST(Replicas, NamesTheLowestDifferingRankAndTheFirstElement) {
  Copies c = randomCopies(4, 3, 256, arfuseBfloat16, 11);
  // rank 3 differs at element 300 (token 1, column 44) and earlier at 10; rank 2 later at 500.
  const auto set = [&](int rank, int elem, uint16_t bits) { std::memcpy(&c.bytes[rank][2 * elem], &bits, 2); };
  set(3, 300, 0x3f80);
  set(3, 10, 0x4000);
  set(2, 500, 0x3f80);
  uint16_t rank0At500;
  std::memcpy(&rank0At500, &c.bytes[0][2 * 500], 2);
  if (rank0At500 == 0x3f80) set(2, 500, 0x3f81);
  const std::string m = compareReplicas(c.shapes(), c.data(), 9);
  EXPECT_NE(m.find("residual_in differs between rank 0 and rank 2 at element 500 (token 1, column 244) of checked "
                   "call 9 (bf16 tokens=3 hidden=256)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("rank 2 has 0x3f8"), std::string::npos) << m;
  EXPECT_NE(m.find("bitwise equal on every rank"), std::string::npos) << m;
}

TEST(Replicas, WeightDifferenceAndValuesAreNamed) {
  Copies c = randomCopies(2, 2, 64, arfuseFloat32, 5);
  const size_t rb = c.shape.residualBytes();
  const float one = 1.0f, two = 2.0f;
  std::memcpy(&c.bytes[0][rb + 4 * 17], &one, 4);
  std::memcpy(&c.bytes[1][rb + 4 * 17], &two, 4);
  const std::string m = compareReplicas(c.shapes(), c.data(), 3);
  EXPECT_NE(m.find("weight differs between rank 0 and rank 1 at element 17 of checked call 3"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 0 has 0x3f800000 (1)"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 1 has 0x40000000 (2)"), std::string::npos) << m;
}

TEST(Replicas, Fp16ValuesAreDecoded) {
  Copies c = randomCopies(2, 1, 8, arfuseFloat16, 3);
  const uint16_t a = 0x3c00, b = 0xc500;  // 1.0, -5.0
  std::memcpy(&c.bytes[0][0], &a, 2);
  std::memcpy(&c.bytes[1][0], &b, 2);
  const std::string m = compareReplicas(c.shapes(), c.data(), 1);
  EXPECT_NE(m.find("rank 0 has 0x3c00 (1), rank 1 has 0xc500 (-5)"), std::string::npos) << m;
}

TEST(Replicas, DivergentShapesAreLeftToTheKernelsAndAMissingResidualIsNamed) {
  Copies c = randomCopies(2, 2, 64, arfuseBfloat16, 1);
  std::vector<ReplicaShape> s = c.shapes();
  s[1].tokens = 1;  // a divergent call: the descriptor exchange names it (arfuseMismatch), not this check
  EXPECT_EQ(compareReplicas(s, c.data(), 1), "");
  s[1] = c.shape;
  s[1].hasResidual = false;
  EXPECT_NE(compareReplicas(s, c.data(), 1).find("rank 1 passed no residual_in and rank 0 did"), std::string::npos);
}

// The meeting, from one thread per rank as CUDA's callback threads would: every set completes once,
// in order, and a difference injected at one check is reported at exactly that check.
TEST(Replicas, GatherCompletesEachCheckOnceFromConcurrentRanks) {
  const int nranks = 4, checks = 200, bad = 137;
  ReplicaGather gather(nranks);
  std::vector<Copies> perCheck;
  for (int n = 0; n < checks; ++n) perCheck.push_back(randomCopies(nranks, 1, 64, arfuseBfloat16, 100 + n));
  perCheck[bad - 1].bytes[2][5] ^= 0x01;
  std::mutex mu;
  std::vector<std::pair<uint64_t, std::string>> verdicts;
  // Ranks may not run more than one check ahead of each other (the calls' own waits ensure it on a
  // GPU); a per-check barrier stands in for them here.
  std::vector<std::atomic<int>> arrived(checks + 1);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      for (int n = 1; n <= checks; ++n) {
        while (n > 1 && arrived[n - 1].load() < nranks) std::this_thread::yield();
        std::string m;
        uint64_t k = 0;
        if (gather.arrive(r, perCheck[n - 1].shape, perCheck[n - 1].bytes[r].data(), &m, &k)) {
          std::lock_guard<std::mutex> lock(mu);
          verdicts.emplace_back(k, m);
        }
        arrived[n].fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(verdicts.size(), static_cast<size_t>(checks));
  for (const auto& v : verdicts) {
    if (v.first == static_cast<uint64_t>(bad))
      EXPECT_NE(v.second.find("between rank 0 and rank 2 at element 2 "), std::string::npos) << v.second;
    else
      EXPECT_EQ(v.second, "") << "check " << v.first;
  }
}

// Multi-process groups (issue 37 item 8c): the same meeting in shared memory, between processes.
// Three forked processes (one rank each) put their copies in their slots of one shared area and
// arrive; each set is compared exactly once, by whichever process completed it, and the check with
// a flipped byte names rank 2.
TEST(Replicas, ProcessesMeetInSharedMemoryAndEachSetIsComparedOnce) {
  const int nranks = 3, checks = 100, bad = 61;
  const ReplicaShape shape{2, 64, arfuseBfloat16, true};
  const size_t bytes = shape.residualBytes() + shape.weightBytes();
  const size_t slot = replicaSlotBytes(2, 64, false);
  ASSERT_GE(slot, bytes);
  struct Shared {
    std::atomic<int> passed[checks + 1];
    std::atomic<int> compares[checks + 1];  // how many processes compared set n
    std::atomic<int> verdict[checks + 1];   // 1: all equal, 2: named rank 2, 3: something else
  };
  const size_t total = sizeof(Shared) + 64 + replicaAreaBytes(nranks, slot);
  void* mem = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  std::memset(mem, 0, total);
  Shared* sh = static_cast<Shared*>(mem);
  ReplicaArea* area = replicaAreaAt(static_cast<char*>(mem) + (sizeof(Shared) + 63) / 64 * 64);
  std::vector<pid_t> kids;
  for (int r = 0; r < nranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      for (int n = 1; n <= checks; ++n) {
        // The calls' own waits keep ranks within one check of each other on a GPU; a barrier here.
        while (n > 1 && sh->passed[n - 1].load() < nranks) sched_yield();
        Copies c = randomCopies(nranks, 2, 64, arfuseBfloat16, 500 + n);
        if (n == bad && r == 2) c.bytes[2][9] ^= 0x04;
        std::memcpy(replicaSlot(area, r, slot), c.bytes[r].data(), bytes);
        std::string m;
        int who = -2;
        if (arriveShared(area, nranks, slot, r, n, shape, &m, &who)) {
          sh->compares[n].fetch_add(1);
          const bool named = m.find("between rank 0 and rank 2 at element") != std::string::npos && who == 2;
          sh->verdict[n] = m.empty() && who == -1 ? 1 : named ? 2 : 3;
        }
        sh->passed[n].fetch_add(1);
      }
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  for (int n = 1; n <= checks; ++n) {
    EXPECT_EQ(sh->compares[n].load(), 1) << "set " << n << " must be compared exactly once";
    EXPECT_EQ(sh->verdict[n].load(), n == bad ? 2 : 1) << "set " << n;
  }
  munmap(mem, total);
}

}  // namespace
}  // namespace arfuse
