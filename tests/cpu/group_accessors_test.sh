#!/usr/bin/env bash
# The API layer (src/api) reads a Group (src/init/group.h) only through the named functions at the
# end of group.h: no direct use of the fields the init layer builds (the peer views, the host area,
# the per-rank resources, the NCCL communicators, the multi-host part) nor of the API layer's own
# state slots (read through groupApiState).
# Fix: add or use an accessor in init/group.h.
set -uo pipefail
root=$1
cd "$root" || exit 2
pattern='\b(g|group|\*?c->group|comm->group)(\.|->)(peers|host|hostArena|hostArenaBytes|ranks|multiHost|replicaCheck|streamCheck|checkStreams)\b'
hits=$(grep -nE "$pattern" src/api/*.cc src/api/*.h)
if [ -n "$hits" ]; then
  echo "src/api reaches into Group fields directly (use init/group.h's accessors):"
  echo "$hits"
  exit 1
fi
echo "src/api reads Group only through init/group.h's accessors"
