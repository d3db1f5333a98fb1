#!/usr/bin/env bash
# The main job: installs what is missing, builds, and trains GPT (tiny) on
# 2 CPU ranks as data-parallel replicas, verified step by step against one
# device; then Swin (tiny) on one device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build/nns run examples/gpt.nns --config tiny --gpus 2 --verify
build/nns run examples/swin.nns --config tiny --gpus 1 --steps 10
