// Keeps docs/environment.md true: its table is exactly what the parameter registry generates.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "common/params.h"

TEST(Docs, EnvironmentTableMatchesRegistry) {
  std::ifstream f(std::string(ARFUSE_SOURCE_DIR) + "/docs/environment.md");
  ASSERT_TRUE(f) << "docs/environment.md missing";
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find(arfuse::paramsMarkdown()), std::string::npos)
      << "docs/environment.md is stale: regenerate its table with `arfuse env --markdown`";
}
