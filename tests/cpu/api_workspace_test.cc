// The staging workspace is sized from the dtypes a communicator enables, not for fp32 always.
#include <gtest/gtest.h>

#include "policy/config.h"

namespace arfuse {
namespace {

TEST(Workspace, SizedForTheLargestEnabledDtype) {
  Limits l;
  l.maxTokens = 2048;
  l.maxHidden = 7168;
  l.dtypeMask = ARFUSE_DTYPE_BIT(arfuseBfloat16);
  EXPECT_EQ(workspaceMessageBytes(l), 2048ull * 7168 * 2);
  l.dtypeMask = ARFUSE_DTYPE_BIT(arfuseBfloat16) | ARFUSE_DTYPE_BIT(arfuseFloat16);
  EXPECT_EQ(workspaceMessageBytes(l), 2048ull * 7168 * 2);
  l.dtypeMask = ARFUSE_DTYPE_ALL;
  EXPECT_EQ(workspaceMessageBytes(l), 2048ull * 7168 * 4);
  l.dtypeMask = ARFUSE_DTYPE_BIT(arfuseFloat32);
  EXPECT_EQ(workspaceMessageBytes(l), 2048ull * 7168 * 4);
}

TEST(Workspace, ResolvedConfigCarriesIt) {
  arfuseConfig_t c = ARFUSE_CONFIG_INITIALIZER;
  c.maxTokens = 64;
  c.maxHidden = 4096;
  c.dtypeMask = ARFUSE_DTYPE_BIT(arfuseBfloat16);
  ResolvedConfig r;
  std::string msg;
  ASSERT_EQ(resolveConfig(&c, 2, &r).into(&msg), arfuseSuccess) << msg;
  EXPECT_EQ(r.messageBytes, 64ull * 4096 * 2) << "a bf16-only communicator must not get an fp32-sized workspace";
  c.dtypeMask = ARFUSE_DTYPE_ALL;
  ASSERT_EQ(resolveConfig(&c, 2, &r).into(&msg), arfuseSuccess) << msg;
  EXPECT_EQ(r.messageBytes, 64ull * 4096 * 4);
}

}  // namespace
}  // namespace arfuse
