#!/usr/bin/env bash
# Installs every Debian package nns needs to build and test (idempotent).
set -euo pipefail
PACKAGES=(g++ cmake make ccache pkg-config antlr4 libantlr4-runtime-dev libz3-dev libdnnl-dev
          libgloo-dev libjemalloc-dev catch2 libedit-dev python3 universal-ctags clang-format nlohmann-json3-dev xz-utils
          python3-torch)  # python3-torch: the independent PyTorch models the pretrained-weights test compares with
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
