#!/usr/bin/env bash
# Style checks: no include points up (the layers in docs/design.md), clang-format (.clang-format)
# must leave every C++ file unchanged, and clang-tidy (.clang-tidy) must report nothing. Changes
# nothing.
#   scripts/lint.sh                 all tracked C++ files
#   scripts/lint.sh FILE...         just these files
#   scripts/lint.sh --format-only   skip clang-tidy (fast; no build needed)
# clang-tidy needs a compilation database: build/compile_commands.json (scripts/build.sh writes it;
# set DDPRUN_LINT_BUILD_DIR for another build directory). Exit 0 when clean, 1 otherwise.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${DDPRUN_LINT_BUILD_DIR:-build}"
JOBS="${DDPRUN_JOBS:-$(nproc)}"

tidy=1
files=()
for arg in "$@"; do
  case "$arg" in
    --format-only) tidy=0 ;;
    -*) echo "usage: scripts/lint.sh [--format-only] [FILE...]" >&2; exit 2 ;;
    *) files+=("$arg") ;;
  esac
done
if ((${#files[@]} == 0)); then
  mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cc')
fi

status=0
# Includes point one way (docs/design.md#layout): common/ includes nothing of ours, rendezvous/
# nothing but common/, and inside launcher/ a folder only its own and the layers before it, in the
# order design.md's "Layers of launcher/" line gives. Needs no build and no clang tool.
layers=$(sed -n 's/^Layers of launcher\/, lowest first: `\([^`]*\)`$/\1/p' docs/design.md)
[[ -n $layers ]] || { echo "lint: docs/design.md has no 'Layers of launcher/' line" >&2; exit 2; }
upward_allowed=()  # FILE>HEADER exceptions; none left
python3 - "$layers" "${upward_allowed[*]}" <<'PY' || status=1
import re, subprocess, sys
layers, allowed = sys.argv[1].split(), set(sys.argv[2].split())
include = re.compile(r'^\s*#\s*include\s+"([^"/]+)/([^"]*)"')
files = subprocess.run(["git", "ls-files", "common", "rendezvous", "launcher"], check=True,
                       capture_output=True, text=True).stdout.split()
problems = []
for f in (f for f in files if f.endswith((".cpp", ".hpp", ".h"))):
    part = f.split("/")
    for n, line in enumerate(open(f, encoding="utf-8", errors="replace"), 1):
        m = include.match(line)
        if not m or f"{f}>{m[1]}/{m[2]}" in allowed:
            continue
        target = [m[1]] + m[2].split("/")
        why = None
        if part[0] == "common" and target[0] in ("launcher", "rendezvous", "worker"):
            why = "common/ includes nothing of ours"
        elif part[0] == "rendezvous" and target[0] in ("launcher", "worker"):
            why = "rendezvous/ includes nothing of ours but common/"
        elif part[0] == "launcher" and target[0] == "launcher" and len(part) > 2 and len(target) > 2:
            mine, theirs = part[1], target[1]
            if mine not in layers or theirs not in layers:
                why = f"launcher/{mine if mine not in layers else theirs}/ is in no layer"
            elif layers.index(theirs) > layers.index(mine):
                why = f"launcher/{mine}/ is below launcher/{theirs}/"
        if why:
            problems.append(f"lint: {f}:{n}: includes {m[1]}/{m[2]}: {why}")
print("\n".join(problems) or "lint: includes point one way")
sys.exit(1 if problems else 0)
PY

for tool in clang-format clang-tidy; do
  if [[ $tool == clang-tidy && $tidy == 0 ]]; then continue; fi
  command -v "$tool" >/dev/null || { echo "lint: $tool not found (apt-get install clang-format clang-tidy)" >&2; exit 2; }
done
echo "lint: clang-format on ${#files[@]} files"
clang-format --dry-run -Werror "${files[@]}" || status=1

if [[ $tidy == 1 ]]; then
  if [[ ! -f $BUILD_DIR/compile_commands.json ]]; then
    echo "lint: $BUILD_DIR/compile_commands.json is missing; run scripts/build.sh first" >&2
    exit 2
  fi
  # clang-tidy checks translation units: the .cpp files the build compiles (headers through them).
  mapfile -t units < <(python3 - "$BUILD_DIR/compile_commands.json" "${files[@]}" <<'PY'
import json, os, sys
compiled = {os.path.realpath(e["file"]) for e in json.load(open(sys.argv[1]))}
skipped = 0
for f in sys.argv[2:]:
    if os.path.realpath(f) in compiled:
        print(f)
    elif f.endswith((".cpp", ".cc")):
        skipped += 1
if skipped:
    print(f"lint: {skipped} source files are not in {sys.argv[1]}; not checked by clang-tidy",
          file=sys.stderr)
PY
)
  echo "lint: clang-tidy on ${#units[@]} translation units"
  # A unity build's database lists its unity_*.cxx files, not the sources: nothing would be checked.
  if ((${#units[@]} == 0)) && printf '%s\n' "${files[@]}" | grep -qE '\.(cpp|cc)$'; then
    echo "lint: no source file is in $BUILD_DIR/compile_commands.json (a unity build?); configure" \
      "a directory with -DCMAKE_UNITY_BUILD=OFF and set DDPRUN_LINT_BUILD_DIR to it" >&2
    exit 2
  fi
  if ((${#units[@]})); then
    printf '%s\0' "${units[@]}" |
      xargs -0 -n 4 -P "$JOBS" clang-tidy -p "$BUILD_DIR" --quiet --warnings-as-errors='*' || status=1
  fi
fi
if [[ $status == 0 ]]; then echo "lint: clean"; else echo "lint: problems found (see above)"; fi
exit $status
