/* Links libarfuse from an installed prefix and calls the parts of the ABI that need no GPU: the
 * version (which must be the one of the header it was compiled against) and the build line. */
#include <arfuse/arfuse.h>
#include <stdio.h>

int main(void) {
  int version = 0;
  if (arfuseGetVersion(&version) != arfuseSuccess) {
    fprintf(stderr, "consumer: arfuseGetVersion failed\n");
    return 1;
  }
  printf("consumer: linked arfuse version code %d (%s)\n", version, arfuseGetBuildInfo());
  return version == ARFUSE_VERSION_CODE ? 0 : 1;
}
