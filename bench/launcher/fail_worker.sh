#!/bin/sh
# Benchmark worker: rank 0 sleeps 0.5 s, records the time of its exit in $FAIL_STAMP and exits 3;
# every other rank sleeps (and dies on the launcher's SIGTERM).
if [ "$RANK" = 0 ]; then
  sleep 0.5
  date +%s.%N > "$FAIL_STAMP"
  exit 3
fi
exec sleep 600
