#!/usr/bin/env bash
# Format check: runs clang-format (style in the top-level .clang-format) over the .cpp/.h/.cu files a change
# touches and exits 1 if any of them differs from the style. The tree as a whole is not reformatted; each change
# keeps the files it touches formatted.
# Usage: scripts/format_check.sh [BASE]   compares BASE..HEAD (default HEAD~1, the last commit)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
base="${1:-HEAD~1}"
if ! command -v clang-format >/dev/null; then
  echo "format_check: clang-format not found (install the Debian package clang-format; scripts/setup.sh does)" >&2
  exit 2
fi
git rev-parse --verify -q "$base^{commit}" >/dev/null || { echo "format_check: no commit '$base'" >&2; exit 2; }
# --diff-filter=d leaves out deleted files; renamed and added ones are checked under their new names.
mapfile -t files < <(git diff --name-only --diff-filter=d "$base" HEAD -- '*.cpp' '*.h' '*.cu')
if [ ${#files[@]} -eq 0 ]; then
  echo "format_check: no C++ files changed since $base"
  exit 0
fi
failed=0
for f in "${files[@]}"; do
  if ! report=$(clang-format --dry-run --Werror "$f" 2>&1); then
    failed=1
    echo "$f: $(grep -c 'error:' <<<"$report") place(s) differ from .clang-format" >&2
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "format_check: see each with clang-format --dry-run FILE; fix with clang-format -i FILE" >&2
  exit 1
fi
echo "format_check: ${#files[@]} changed file(s) formatted"
