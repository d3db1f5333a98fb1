#!/usr/bin/env bash
# Size budget: every non-test source file (.cpp/.h/.cu outside tests/) under 600 lines and every function
# under 150. Prints each file and function over its budget and exits 1 if there is any, 0 if none.
# Usage: scripts/sizes.sh [--max-file N] [--max-function N]   (run from anywhere inside the repository)
# Function extents come from Universal Ctags (its end: field); length = end - line + 1.
set -euo pipefail
max_file=600
max_function=150
while [ $# -gt 0 ]; do
  case "$1" in
    --max-file) max_file="$2"; shift 2 ;;
    --max-function) max_function="$2"; shift 2 ;;
    *) echo "usage: $0 [--max-file N] [--max-function N]" >&2; exit 2 ;;
  esac
done
cd "$(git rev-parse --show-toplevel)"
# Exuberant ctags and Emacs etags also answer to "ctags" but have no JSON output or end lines.
if ! command -v ctags >/dev/null || ! ctags --version 2>/dev/null | grep -q "Universal Ctags"; then
  echo "sizes: Universal Ctags not found (install the Debian package universal-ctags; scripts/setup.sh does)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' | grep -v '^tests/' || true)
[ ${#files[@]} -gt 0 ] || { echo "sizes: no source files found" >&2; exit 2; }

over_files=$(wc -l "${files[@]}" | awk -v max="$max_file" '$2 != "total" && $1 > max {print $1, $2}' | sort -rn)
# One JSON object per tag; only function definitions (kind f) have an end line worth measuring.
over_functions=$(ctags --langmap=C++:+.cu --c++-kinds=fcs --fields=+neK --output-format=json -f - "${files[@]}" |
  python3 -c '
import json, re, sys
max_len = int(sys.argv[1])
for line in sys.stdin:
    tag = json.loads(line)
    if tag.get("_type") != "tag" or tag.get("kind") != "function" or "end" not in tag:
        continue
    length = tag["end"] - tag["line"] + 1
    if length > max_len:
        scope = tag.get("scope", "")
        name = scope + "::" + tag["name"] if scope else tag["name"]
        name = re.sub(r"__anon[0-9a-f]+", "(anonymous)", name)
        print(length, "%s:%d" % (tag["path"], tag["line"]), name)
' "$max_function" | sort -rn)

count() { [ -z "$1" ] && echo 0 || printf '%s\n' "$1" | wc -l; }
n_files=$(count "$over_files")
n_functions=$(count "$over_functions")
echo "files over $max_file lines: $n_files"
[ -n "$over_files" ] && printf '%s\n' "$over_files" | sed 's/^/  /'
echo "functions over $max_function lines: $n_functions"
[ -n "$over_functions" ] && printf '%s\n' "$over_functions" | sed 's/^/  /'
[ "$n_files" -eq 0 ] && [ "$n_functions" -eq 0 ]
