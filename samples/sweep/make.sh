#!/usr/bin/env bash
# Regenerates every file in samples/sweep/ from sweep.yaml (one to two minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")"
rm -rf results
tacos sweep sweep.yaml -o results
tacos plot results -o ratio.png
tacos synthesize --topology torus2d:4x4 --collective all-reduce --chunk-size 1MiB \
      --chunks-per-npu 2 --seed 0 -q -o schedule.json
tacos plot schedule.json -o schedule.png
tacos plot schedule.json -o timeline.svg --kind timeline --color-by source
