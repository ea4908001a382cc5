#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The compile time of a downstream analysis (examples/downstream/fit_tensor.cpp, nine lines that read, fit and print
# a rabbit tensor), header-only and with fitlib::prebuilt, at -O2 and -O3: the CPU seconds (user + system) of the
# compiler on that one file, the best of --repeat runs. Also with fitlib's headers precompiled, as the example does
# by default: the precompiled header's own cost (once per build tree), then each compile of the file.
#
#   scripts/compile-time.sh [--build DIR] [--repeat N] [--json FILE]
#
# DIR is a configured and built fitlib build tree (default: build, as `make test` leaves it); the script installs it
# into a scratch prefix and configures the example against it there. docs/benchmarks.md, "Compile time", records
# its numbers.
set -euo pipefail

build=build
repeat=3
json=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --json) json="$2"; shift 2 ;;
    -h|--help) sed -n '3,12p' "$0"; exit 0 ;;
    *) echo "compile-time.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] || { echo "compile-time.sh: --repeat needs a positive count, got '$repeat'" >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
[[ -f "$build/CMakeCache.txt" ]] || { echo "compile-time.sh: $build is not a configured build tree: run make test (or cmake) first" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "compile-time.sh: needs /usr/bin/time (Debian: apt-get install time)" >&2; exit 2; }
cxx="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" > /dev/null

# cpu_seconds CMD...: the CPU seconds of the best of $repeat runs of CMD, run in $dir.
cpu_seconds() {
  local best="" t
  for ((i = 0; i < repeat; ++i)); do
    (cd "$dir" && /usr/bin/time -f "%U %S" -o "$work/time" "$@" > /dev/null)
    t="$(awk '{ printf "%.2f", $1 + $2 }' "$work/time")"
    if [[ -z "$best" ]] || awk -v a="$t" -v b="$best" 'BEGIN { exit !(a < b) }'; then best="$t"; fi
  done
  echo "$best"
}

results=()
printf '%-12s %-4s %12s %14s %14s\n' variant opt "compile (s)" "PCH once (s)" "with PCH (s)"
for variant in header-only prebuilt; do
  for opt in -O2 -O3; do
    dir="$work/$variant$opt"
    header_only=OFF
    [[ "$variant" == header-only ]] && header_only=ON
    cmake -S "$root/examples/downstream" -B "$dir" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="$opt -DNDEBUG" -DFIT_TENSOR_HEADER_ONLY=$header_only \
      -DFIT_TENSOR_PCH=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON > /dev/null
    # fit_tensor.cpp's compile command (CMake's, as the build runs it), one argument per line, its object in $dir.
    mapfile -t argv < <(python3 - "$dir/compile_commands.json" "$dir/fit_tensor.o" <<'PY'
import json, shlex, sys
entry = next(e for e in json.load(open(sys.argv[1])) if e["file"].endswith("fit_tensor.cpp"))
args = shlex.split(entry["command"])
args[args.index("-o") + 1] = sys.argv[2]
print("\n".join(args))
PY
)
    plain="$(cpu_seconds "${argv[@]}")"
    # The same command with fitlib's headers precompiled (what target_precompile_headers does).
    printf '#include <fitlib/fit.hpp>\n#include <fitlib/io/rabbit.hpp>\n' > "$dir/fitlib_pch.hpp"
    pch_argv=()
    for ((k = 0; k < ${#argv[@]}; ++k)); do
      case "${argv[k]}" in
        -c | *fit_tensor.cpp) ;;
        -o) k=$((k + 1)) ;;
        *) pch_argv+=("${argv[k]}") ;;
      esac
    done
    pch_once="$(cpu_seconds "${pch_argv[@]}" -x c++-header "$dir/fitlib_pch.hpp" -o "$dir/fitlib_pch.hpp.gch")"
    with_pch="$(cpu_seconds "${argv[@]}" -Winvalid-pch -include "$dir/fitlib_pch.hpp")"
    printf '%-12s %-4s %12s %14s %14s\n' "$variant" "$opt" "$plain" "$pch_once" "$with_pch"
    results+=("{\"variant\": \"$variant\", \"opt\": \"$opt\", \"compile_cpu_s\": $plain, \"pch_once_cpu_s\": $pch_once, \"with_pch_cpu_s\": $with_pch}")
  done
done
if [[ -n "$json" ]]; then
  compiler="$("$cxx" --version | head -1 | python3 -c 'import json, sys; print(json.dumps(sys.stdin.read().strip()))')"
  (IFS=,; printf '{"compiler": %s, "repeat": %s, "results": [%s]}\n' "$compiler" "$repeat" "${results[*]}") > "$json"
  echo "wrote $json"
fi
