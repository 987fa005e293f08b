// The framework path: allGatherViaCallback over a fake in-process "process group", a correct one and
// the mistakes a framework's glue makes (permuted ranks, short copies, failures, disagreeing ranks).
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>

#include "bootstrap/bootstrap.h"
#include "test_util.h"

namespace arfuse {
namespace bootstrap {
namespace {

using testing::blobFor;
using testing::expectedAll;

// A process group of threads: each member deposits its bytes, waits for all, then copies the whole
// buffer out. `permute` maps a rank to the slot its bytes land in (identity for a correct group).
struct FakeGroup {
  FakeGroup(int n, std::vector<int> p) : nranks(n), permute(std::move(p)) {}
  int nranks;
  std::vector<int> permute;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint8_t> buffer;
  int arrived = 0;

  struct Member {
    FakeGroup* group;
    int rank;
  };

  static int gather(void* ctx, const void* mine, void* all, size_t bytes) {
    auto* m = static_cast<Member*>(ctx);
    FakeGroup& g = *m->group;
    std::unique_lock<std::mutex> lock(g.mu);
    if (g.buffer.empty()) g.buffer.resize(static_cast<size_t>(g.nranks) * bytes);
    std::memcpy(g.buffer.data() + static_cast<size_t>(g.permute[m->rank]) * bytes, mine, bytes);
    ++g.arrived;
    g.cv.notify_all();
    if (!g.cv.wait_for(lock, std::chrono::seconds(5), [&] { return g.arrived == g.nranks; })) return 1;
    std::memcpy(all, g.buffer.data(), g.buffer.size());
    return 0;
  }
};

std::vector<std::pair<arfuseResult_t, std::string>> runGroup(FakeGroup* g, size_t bytes,
                                                             std::vector<std::vector<uint8_t>>* alls) {
  std::vector<FakeGroup::Member> members;
  for (int r = 0; r < g->nranks; ++r) members.push_back({g, r});
  std::vector<std::future<std::pair<arfuseResult_t, std::string>>> f;
  alls->assign(g->nranks, {});
  for (int r = 0; r < g->nranks; ++r) {
    f.push_back(std::async(std::launch::async, [&, r] {
      auto mine = blobFor(r, bytes);
      std::string err;
      arfuseResult_t res =
          allGatherViaCallback(&FakeGroup::gather, &members[r], r, g->nranks, mine.data(), bytes, &(*alls)[r])
              .into(&err);
      return std::make_pair(res, err);
    }));
  }
  std::vector<std::pair<arfuseResult_t, std::string>> out;
  for (auto& fu : f) out.push_back(fu.get());
  return out;
}

TEST(BootstrapCallback, CorrectGroupGivesEveryBlobInRankOrder) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}}) {
    FakeGroup g(4, {0, 1, 2, 3});
    std::vector<std::vector<uint8_t>> alls;
    auto res = runGroup(&g, bytes, &alls);
    EXPECT_EQ(g.buffer.size(), 4 * (bytes + kSlotHeaderBytes));  // the callback saw framed slots
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(res[r].first, arfuseSuccess) << res[r].second;
      EXPECT_EQ(alls[r], expectedAll(4, bytes)) << "rank " << r << " bytes " << bytes;
    }
  }
}

TEST(BootstrapCallback, PermutedRankOrderIsCaught) {
  FakeGroup g(4, {1, 0, 2, 3});  // ranks 0 and 1 swapped, as with a sub-group's local ranks
  std::vector<std::vector<uint8_t>> alls;
  auto res = runGroup(&g, 64, &alls);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(res[r].first, arfuseMismatch);
    EXPECT_EQ(res[r].second.rfind("the all-gather callback's slot 0 holds rank 1's bytes", 0), 0u) << res[r].second;
  }
}

int failingCallback(void*, const void*, void*, size_t) { return 5; }
int silentCallback(void*, const void*, void*, size_t) { return 0; }  // "succeeds" without writing

// Two-rank group simulated by one rank: slot 0 is ours, slot 1 is a copy of ours with fields edited
// at the documented slot-header offsets (rank at 8, nranks at 12, size at 16).
struct Forge {
  int rank1 = 1, nranks1 = 2;
  uint64_t size1 = 0;
  bool sizeSet = false;
  static int gather(void* ctx, const void* mine, void* all, size_t bytes) {
    auto* f = static_cast<Forge*>(ctx);
    auto* out = static_cast<uint8_t*>(all);
    std::memcpy(out, mine, bytes);
    std::memcpy(out + bytes, mine, bytes);
    auto put = [&](size_t off, uint64_t v, int n) {
      for (int i = 0; i < n; ++i) out[bytes + off + i] = static_cast<uint8_t>(v >> (8 * i));
    };
    put(8, static_cast<uint32_t>(f->rank1), 4);
    put(12, static_cast<uint32_t>(f->nranks1), 4);
    if (f->sizeSet) put(16, f->size1, 8);
    return 0;
  }
};

TEST(BootstrapCallback, FailuresAndDisagreementsAreNamed) {
  auto mine = blobFor(0, 32);
  std::vector<uint8_t> all;
  std::string err;
  EXPECT_EQ(allGatherViaCallback(&failingCallback, nullptr, 0, 2, mine.data(), 32, &all).into(&err), arfuseSystemError);
  EXPECT_EQ(err, "rank 0: the all-gather callback failed (returned 5); see the framework's own error for why");

  EXPECT_EQ(allGatherViaCallback(&silentCallback, nullptr, 0, 2, mine.data(), 32, &all).into(&err), arfuseMismatch);
  EXPECT_EQ(err,
            "the all-gather callback's slot 0 holds no arfuse blob: the callback must write nranks*bytes bytes "
            "(112 here) into `all`");

  Forge ok;
  ASSERT_EQ(allGatherViaCallback(&Forge::gather, &ok, 0, 2, mine.data(), 32, &all).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(all.size(), 64u);

  Forge nranks;
  nranks.nranks1 = 3;
  EXPECT_EQ(allGatherViaCallback(&Forge::gather, &nranks, 0, 2, mine.data(), 32, &all).into(&err), arfuseMismatch);
  EXPECT_EQ(err, "rank 1 said nranks=3 but rank 0 expects 2; every rank must pass the same nranks");

  Forge size;
  size.sizeSet = true;
  size.size1 = 31;
  EXPECT_EQ(allGatherViaCallback(&Forge::gather, &size, 0, 2, mine.data(), 32, &all).into(&err), arfuseMismatch);
  EXPECT_EQ(err, "rank 1 sent a 31-byte blob but rank 0's is 32 bytes; every rank must pass the same size");

  EXPECT_EQ(allGatherViaCallback(nullptr, nullptr, 0, 2, mine.data(), 32, &all).into(&err), arfuseInvalidArgument);
  EXPECT_EQ(allGatherViaCallback(&silentCallback, nullptr, 2, 2, mine.data(), 32, &all).into(&err),
            arfuseInvalidArgument);
  EXPECT_EQ(err, "rank 2 is out of range for nranks=2");
}

TEST(BootstrapCallback, ValidateGathered) {
  auto all = expectedAll(3, 16);
  auto mine = blobFor(1, 16);
  std::string err;
  EXPECT_EQ(validateGathered(all.data(), 1, 3, mine.data(), 16).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(validateGathered(all.data(), 2, 3, mine.data(), 16).into(&err), arfuseMismatch);
  EXPECT_EQ(err.rfind("the all-gather callback's slot 2 does not hold this rank's bytes", 0), 0u) << err;
  EXPECT_EQ(validateGathered(all.data(), 3, 3, mine.data(), 16).into(&err), arfuseInvalidArgument);
  EXPECT_EQ(validateGathered(nullptr, 0, 3, nullptr, 0).into(&err), arfuseSuccess);  // nothing to compare
  EXPECT_EQ(validateGathered(all.data(), 0, 3, mine.data(), SIZE_MAX / 2).into(&err), arfuseInvalidArgument);
  EXPECT_TRUE(err.find("overflow") != std::string::npos) << err;
}

}  // namespace
}  // namespace bootstrap
}  // namespace arfuse
