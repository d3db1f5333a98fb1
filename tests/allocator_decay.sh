#!/usr/bin/env bash
# Freed memory per command (driver/allocator.h): `nns check` keeps every
# freed page (decays of -1, main.cpp's malloc_conf), `nns simulate` and
# `nns plan` take jemalloc's defaults back (10 s dirty, 0 muzzy), and a
# MALLOC_CONF in the environment wins over both. Exits 77 (skipped) where
# nns runs on the C library's malloc (no jemalloc to ask).
#   allocator_decay.sh NNS_BINARY
set -euo pipefail
NNS="$1"
cd "$(dirname "$0")/.."
fail() { echo "FAIL: $*"; exit 1; }
# decay_of ARGS...: the "allocator:" line nns prints at exit.
decay_of() { NNS_ALLOCATOR_REPORT=1 "$@" 2>&1 >/dev/null | sed -n 's/^allocator: //p'; }
check=(check examples/gpt.nns --config tiny --plan dp --gpus 2)
simulate=(simulate examples/gpt.nns --config tiny --plan dp --gpus 2 --device a100)
got=$(decay_of "$NNS" "${check[@]}")
if [ -z "$got" ]; then echo "SKIPPED: nns is not linked with jemalloc"; exit 77; fi
[ "$got" = "dirty decay -1 ms, muzzy decay -1 ms" ] || fail "check: '$got'"
got=$(decay_of "$NNS" "${simulate[@]}")
[ "$got" = "dirty decay 10000 ms, muzzy decay 0 ms" ] || fail "simulate: '$got'"
got=$(decay_of "$NNS" plan examples/gpt.nns --config tiny --gpus 2 --device a100)
[ "$got" = "dirty decay 10000 ms, muzzy decay 0 ms" ] || fail "plan: '$got'"
got=$(MALLOC_CONF=dirty_decay_ms:5000 decay_of "$NNS" "${simulate[@]}")
[ "$got" = "dirty decay 5000 ms, muzzy decay -1 ms" ] || fail "simulate under MALLOC_CONF: '$got'"
echo "ok: check keeps freed pages, simulate and plan return them, MALLOC_CONF wins"
