#!/bin/sh
# Bench worker: records when it started (ns since the epoch) and exits.
date +%s%N >"$BENCH_OUT/started-${RANK:-x}-of-${WORLD_SIZE:-x}-$$"
