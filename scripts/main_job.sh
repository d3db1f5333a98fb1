#!/usr/bin/env bash
# The main job: installs what is missing, builds, and trains GPT (tiny) on 4
# CPU ranks with the hybrid plan (tensor parallel x data parallel: every rank
# runs its sub-ops and the collectives the plan derives), verified step by
# step against one device; then Swin (tiny) on 2 ranks with nnScaler's
# coshard plan, verified too; then T5 (tiny) pipelined with the interlaced
# schedule on 2 ranks, verified; then GPT (tiny) on a byte-level token corpus
# made from docs/ with data parallelism on 2 ranks, verified.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build/nns run examples/gpt.nns --config tiny --gpus 4 --plan hybrid --verify
build/nns run examples/swin.nns --config tiny --gpus 2 --plan coshard --steps 10 --verify
# A pipeline: T5 (tiny) under nnScaler's interlaced schedule (1F1B over the
# layers, the vocabulary-split embedding and head over both ranks), verified.
build/nns run examples/t5.nns --config tiny --gpus 2 --plan interlaced --steps 10 --verify
# A token corpus: this repository's docs byte-tokenised into a nanoGPT-style
# train.bin, GPT (tiny) trained on it with data parallelism on 2 ranks (each
# reading its own share of the windows), verified.
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
python3 scripts/make_token_corpus.py docs/*.md -o "$corpus" > /dev/null
sed "s|data = synthetic(seed = 1)|data = token_file(\"$corpus/train.bin\", seed = 1)|" examples/gpt.nns > "$corpus/gpt_tokens.nns"
build/nns run "$corpus/gpt_tokens.nns" --config tiny --gpus 2 --plan dp --steps 30 --verify
