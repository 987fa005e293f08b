#include "transport/local.h"

#include <cuda_runtime.h>

#include "init/cuda_check.h"
#include "transport/hostmem.h"
#include "transport/nccl.h"
#include "transport/p2p.h"

namespace arfuse {
namespace {

Status allocateRanks(Group* g, const int* devices) {
  for (int r = 0; r < g->nranks; ++r) ARFUSE_CHECK(allocateRank(g, r, devices[r]));
  return Status();
}

// In-process groups: one process drives every rank, so every buffer is a plain device pointer
// (the same device for virtual ranks, a peer device with peer access enabled otherwise: UVA).
class InProcessTransport : public Transport {
 public:
  InProcessTransport(const int* devices, std::vector<int> unique) : devices_(devices), unique_(std::move(unique)) {}

  Status allocate(Group* g) override {
    ARFUSE_CHECK(allocatePinnedGroupArea(g));
    return allocateRanks(g, devices_);
  }
  Status connect(Group* g) override { return connectPeers(g, unique_); }
  Status prove(Group* g) override { return proveP2p(g); }
  Status nccl(Group* g) override { return initNcclAll(g, devices_); }
  Status hostArea(Group* g, bool needed) override {
    return needed ? allocatePinnedHostArena(g, unique_, hostMessageBytesFor(*g)) : Status();
  }

 private:
  const int* devices_;
  std::vector<int> unique_;
};

}  // namespace

std::unique_ptr<Transport> makeInProcessTransport(const int* devices, std::vector<int> unique) {
  return std::unique_ptr<Transport>(new InProcessTransport(devices, std::move(unique)));
}

}  // namespace arfuse
