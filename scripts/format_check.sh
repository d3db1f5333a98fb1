#!/usr/bin/env bash
# Format check: the lines a change touches in .cpp/.h/.cu files must follow the
# style of the top-level .clang-format (git clang-format: only changed lines,
# so the tree need not be reformatted at once). Exits 1 with the diff when not.
# The CPU kernel-family files are left out: clang-format breaks their
# KERNEL(name)(args) macro calls.
# Usage: scripts/format_check.sh [BASE]   compares BASE..HEAD (default HEAD~1, the last commit)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
base="${1:-HEAD~1}"
if ! command -v git-clang-format >/dev/null; then
  echo "format_check: git-clang-format not found (Debian package clang-format; scripts/setup.sh installs it)" >&2
  exit 2
fi
git rev-parse --verify -q "$base^{commit}" >/dev/null || { echo "format_check: no commit '$base'" >&2; exit 2; }
mapfile -t files < <(git diff --name-only --diff-filter=d "$base" HEAD -- '*.cpp' '*.h' '*.cu' |
                     grep -vE '^backend/runtime/cpu/(ops_[a-z]+\.cpp|call\.h)$' || true)
if [ ${#files[@]} -eq 0 ]; then
  echo "format_check: no C++ lines changed since $base"
  exit 0
fi
out=$(git clang-format --diff --extensions cpp,h,cu "$base" HEAD -- "${files[@]}" 2>&1 || true)
if grep -qE '^(no modified files to format|clang-format did not modify any files)' <<<"$out" || [ -z "$out" ]; then
  echo "format_check: the changed lines of ${#files[@]} file(s) follow .clang-format"
  exit 0
fi
sed -n 1,80p <<<"$out"  # reads it all: no SIGPIPE under pipefail
echo "format_check: changed lines differ from .clang-format (the diff above; 'git clang-format $base' fixes them)" >&2
exit 1
