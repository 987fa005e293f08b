/* Proves the public header is C99 and usable from C. */
#include <stdio.h>
#include <string.h>

#include "arfuse/arfuse.h"

int main(void) {
  arfuseConfig_t cfg = ARFUSE_CONFIG_INITIALIZER;
  arfuseConfig_t cfg2;
  arfusePlan_t plan;
  int version = 0;
  if (arfuseConfigInit(&cfg2) != arfuseSuccess) return 1;
  if (memcmp(&cfg, &cfg2, sizeof cfg) != 0) return 2;
  if (arfuseGetVersion(&version) != arfuseSuccess || version != ARFUSE_VERSION_CODE) return 3;
  if (arfuseCommQueryPlan(NULL, arfuseOpAllReduce, 1, 8, arfuseBfloat16, &plan) != arfuseInvalidArgument) return 4;
  printf("C99 client ok: %s\n", arfuseGetBuildInfo());
  return 0;
}
