// The framework path: a caller-supplied all-gather, checked before its result is trusted.
//
// A framework's glue is where rank orders get permuted (a sub-group's local rank versus the global
// one) and buffers get sized wrong. The rendezvous can catch both because rank 0 sees every hello; a
// callback cannot, so each blob travels with a small header naming its rank, nranks and size, and the
// slots are checked on the way back. A mistake then fails init with a sentence instead of wiring
// rank 2's IPC handle to rank 3's buffer.
#include <cstring>

#include "bootstrap/bootstrap.h"
#include "bootstrap/wire.h"

namespace arfuse {
namespace bootstrap {

namespace {

constexpr uint32_t kSlotMagic = 0x53465241u;  // "ARFS"
constexpr uint16_t kSlotVersion = 1;

Status checkShape(int rank, int nranks, size_t bytes) {
  if (nranks < 1 || nranks > detail::kMaxRanks)
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "nranks=" + std::to_string(nranks) + " is out of range (1-" +
                                                       std::to_string(detail::kMaxRanks) + ")");
  if (rank < 0 || rank >= nranks)
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument,
                            "rank " + std::to_string(rank) + " is out of range for nranks=" + std::to_string(nranks));
  // nranks * (bytes + header) must fit a size_t; kMaxRanks keeps the multiplier small.
  if (bytes > (SIZE_MAX / static_cast<size_t>(nranks)) - kSlotHeaderBytes)
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, std::to_string(bytes) + "-byte blobs times nranks=" +
                                                       std::to_string(nranks) + " overflow memory");
  return Status();
}

}  // namespace

Status validateGathered(const void* all, int rank, int nranks, const void* mine, size_t bytes) {
  ARFUSE_CHECK(checkShape(rank, nranks, bytes));
  if (bytes == 0) return Status();
  if (all == nullptr || mine == nullptr) {
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "validateGathered: a buffer pointer is null");
  }
  const auto* slot = static_cast<const uint8_t*>(all) + static_cast<size_t>(rank) * bytes;
  if (std::memcmp(slot, mine, bytes) != 0) {
    return ARFUSE_FAIL_TEXT(
        arfuseMismatch,
        "the all-gather callback's slot " + std::to_string(rank) +
            " does not hold this rank's bytes: it must place rank r's contribution at offset r*bytes, with "
            "ranks numbered as in arfuse (is the process group's rank order the same?)");
  }
  return Status();
}

Status allGatherViaCallback(AllGatherFn fn, void* ctx, int rank, int nranks, const void* mine, size_t bytes,
                            std::vector<uint8_t>* all) {
  if (fn == nullptr || all == nullptr || (mine == nullptr && bytes > 0)) {
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument,
                            "allGatherViaCallback: the callback, the blob or the output pointer is null");
  }
  ARFUSE_CHECK(checkShape(rank, nranks, bytes));

  const size_t slot = kSlotHeaderBytes + bytes;
  std::vector<uint8_t> framed(slot);
  detail::putU32(framed.data() + 0, kSlotMagic);
  detail::putU16(framed.data() + 4, kSlotVersion);
  detail::putU16(framed.data() + 6, 0);
  detail::putU32(framed.data() + 8, static_cast<uint32_t>(rank));
  detail::putU32(framed.data() + 12, static_cast<uint32_t>(nranks));
  detail::putU64(framed.data() + 16, bytes);
  if (bytes > 0) std::memcpy(framed.data() + kSlotHeaderBytes, mine, bytes);

  // Zero-filled, so a slot the callback never wrote has no magic and is reported as unfilled.
  std::vector<uint8_t> gathered(static_cast<size_t>(nranks) * slot, 0);
  int rc = fn(ctx, framed.data(), gathered.data(), slot);
  if (rc != 0) {
    return ARFUSE_FAIL_TEXT(arfuseSystemError, "rank " + std::to_string(rank) +
                                                   ": the all-gather callback failed (returned " + std::to_string(rc) +
                                                   "); see the framework's own error for why");
  }
  for (int r = 0; r < nranks; ++r) {
    const uint8_t* s = gathered.data() + static_cast<size_t>(r) * slot;
    const std::string where = "the all-gather callback's slot " + std::to_string(r);
    if (detail::getU32(s) != kSlotMagic || detail::getU16(s + 4) != kSlotVersion) {
      return ARFUSE_FAIL_TEXT(arfuseMismatch,
                              where + " holds no arfuse blob: the callback must write nranks*bytes bytes (" +
                                  std::to_string(static_cast<size_t>(nranks) * slot) + " here) into `all`");
    }
    int sr = static_cast<int>(detail::getU32(s + 8));
    int sn = static_cast<int>(detail::getU32(s + 12));
    uint64_t sb = detail::getU64(s + 16);
    if (sn != nranks) {
      return ARFUSE_FAIL_TEXT(arfuseMismatch, "rank " + std::to_string(sr) + " said nranks=" + std::to_string(sn) +
                                                  " but rank " + std::to_string(rank) + " expects " +
                                                  std::to_string(nranks) + "; every rank must pass the same nranks");
    }
    if (sr != r) {
      return ARFUSE_FAIL_TEXT(
          arfuseMismatch,
          where + " holds rank " + std::to_string(sr) +
              "'s bytes: the callback must place rank r's contribution at offset r*bytes, with ranks numbered as "
              "in arfuse (is the process group's rank order the same?)");
    }
    if (sb != bytes) {
      return ARFUSE_FAIL_TEXT(arfuseMismatch, "rank " + std::to_string(r) + " sent a " + std::to_string(sb) +
                                                  "-byte blob but rank " + std::to_string(rank) + "'s is " +
                                                  std::to_string(bytes) + " bytes; every rank must pass the same size");
    }
  }
  ARFUSE_CHECK(validateGathered(gathered.data(), rank, nranks, framed.data(), slot));
  all->resize(static_cast<size_t>(nranks) * bytes);
  for (int r = 0; r < nranks && bytes > 0; ++r) {
    std::memcpy(all->data() + static_cast<size_t>(r) * bytes,
                gathered.data() + static_cast<size_t>(r) * slot + kSlotHeaderBytes, bytes);
  }
  return Status();
}

}  // namespace bootstrap
}  // namespace arfuse
