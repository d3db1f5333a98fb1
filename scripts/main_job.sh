#!/usr/bin/env bash
# The main job: installs what is missing, builds, and trains the examples'
# tiny presets. (Multi-rank training comes with the parallel-plans issue;
# until then this trains on one CPU device.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build/nns run examples/gpt.nns --config tiny --gpus 1
build/nns run examples/swin.nns --config tiny --gpus 1
