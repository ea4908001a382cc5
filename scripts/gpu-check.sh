#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The CUDA backend's check on a machine with a GPU: tests/cuda (every parity test against cpu::Serial, a multi-shard
# run on one device, the layer's primitives) and bench_cuda, built by nvcc alone, run, and summarised as JSON.
#
#   scripts/gpu-check.sh --deps        here, where Debian's Eigen and Catch2 are installed: copies their headers
#                                      into .gpu-deps/ (ignored by git), to carry to the GPU machine
#   scripts/gpu-check.sh --build-only  here: builds both programs into build-gpu/ (same nvcc 13 as the GPU machine),
#                                      to carry too, so that the GPU machine's minutes go to running them
#   scripts/gpu-check.sh [OUT_DIR]     there: builds what build-gpu/ lacks or what is older than its sources, runs
#                                      both (each under a time limit), writes OUT_DIR/summary.json, cuda_tests.log,
#                                      bench_cuda.json and bench_cuda.log (OUT_DIR: default $OUT, else build-gpu/out)
#
# The GPU machine is bare (nvcc, CMake, Python; no Debian packages, no network), so nothing here needs more than nvcc,
# the headers of .gpu-deps/ and CUDA's own libraries (runtime, cuBLAS, cuSOLVER). Hopper (sm_90) explicitly; FITLIB_CUDA_ARCH overrides it.
# Without a GPU both programs build and then exit with 77 ("did not run").
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS=.gpu-deps
BUILD=build-gpu

if [[ "${1:-}" == "--deps" ]]; then
  [[ -d /usr/include/eigen3/Eigen && -f /usr/include/catch2/catch.hpp ]] ||
    { echo "gpu-check.sh --deps: needs Eigen's and Catch2 v2's headers (scripts/install-deps.sh installs them)" >&2; exit 1; }
  rm -rf "$DEPS" && mkdir -p "$DEPS/eigen3" "$DEPS/catch2"
  cp -r /usr/include/eigen3/Eigen "$DEPS/eigen3/"
  cp /usr/include/catch2/catch.hpp "$DEPS/catch2/"
  echo "wrote $DEPS ($(du -sh "$DEPS" | cut -f1)); carry it to the GPU machine"
  exit 0
fi
BUILD_ONLY=0
if [[ "${1:-}" == "--build-only" ]]; then BUILD_ONLY=1; shift; fi

OUT_DIR="${1:-${OUT:-$BUILD/out}}"
ARCH="${FITLIB_CUDA_ARCH:-90}"
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
CUDA_LIB="$(dirname "$(readlink -f "$NVCC")")/../lib64"
mkdir -p "$BUILD" "$OUT_DIR"
[[ -d "$DEPS/eigen3/Eigen" && -f "$DEPS/catch2/catch.hpp" ]] ||
  { echo "gpu-check.sh: $DEPS is missing; run scripts/gpu-check.sh --deps where Eigen and Catch2 are installed, and carry it" >&2; exit 1; }

COMMON=(-std=c++20 "-arch=sm_$ARCH" --expt-relaxed-constexpr -DEIGEN_NO_CUDA -Xcompiler=-Wall,-Wextra
        -Iinclude -isystem "$DEPS" -isystem "$DEPS/eigen3" -Itests -Itests/common -Ibenchmarks)
TEST_FLAGS=(-O2 "${COMMON[@]}")
# The benchmark's host side (cpu::Threads, the peer it is compared with) optimised as fitlib-fit is, for x86-64-v3
# (AVX2 and FMA): built here, it must run on the GPU machine's CPU, whatever that is (an AVX-512 host is then
# understated somewhat; bench_cuda says so in its output).
BENCH_FLAGS=(-O3 -DNDEBUG -Xcompiler=-O3,-march=x86-64-v3 "${COMMON[@]}")
LIBS=(-lcublas -lcusolver -ldl -Xlinker -rpath -Xlinker "$CUDA_LIB")
TESTS=(tests/cuda/main.cu tests/cuda/test_cuda_layer.cu tests/cuda/test_cuda_policies.cu)
BENCH=(benchmarks/cuda/bench_cuda.cu)
log() { echo "== $*"; }

# A program is rebuilt unless build-gpu/NAME.inputs holds the hash of its flags and of every file it is built from
# (content, not times: a carried tree's files may all look new).
inputs_hash() {
  { echo "$NVCC $*"; find include tests/common tests/cuda tests/likelihood/test_policies.cpp benchmarks/cuda benchmarks/synthetic_model.hpp \
      "$DEPS" -type f | LC_ALL=C sort | xargs cat; } | sha256sum | cut -d' ' -f1
}
stale() { [[ ! -x "$BUILD/$1" || "$(cat "$BUILD/$1.inputs" 2>/dev/null)" != "$(inputs_hash "$2")" ]]; }

# Compiles every source of both programs at once (one nvcc each), then links them.
build() {
  local pids=() names=() src flags
  local need_tests=0 need_bench=0
  stale fitlib_cuda_tests "${TEST_FLAGS[*]}" && need_tests=1
  stale bench_cuda "${BENCH_FLAGS[*]}" && need_bench=1
  for src in "${TESTS[@]}" "${BENCH[@]}"; do
    if [[ " ${TESTS[*]} " == *" $src "* ]]; then [[ $need_tests == 1 ]] || continue; flags=("${TEST_FLAGS[@]}")
    else [[ $need_bench == 1 ]] || continue; flags=("${BENCH_FLAGS[@]}"); fi
    "$NVCC" "${flags[@]}" -c "$src" -o "$BUILD/$(basename "$src" .cu).o" > "$BUILD/$(basename "$src" .cu).log" 2>&1 &
    pids+=($!) names+=("$(basename "$src" .cu)")
  done
  local ok=1 i
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then ok=0; cat "$BUILD/${names[$i]}.log"; fi
  done
  [[ $ok == 1 ]] || return 1
  if [[ $need_tests == 1 ]]; then
    "$NVCC" "${TEST_FLAGS[@]}" "$BUILD/main.o" "$BUILD/test_cuda_layer.o" "$BUILD/test_cuda_policies.o" "${LIBS[@]}" -o "$BUILD/fitlib_cuda_tests"
    inputs_hash "${TEST_FLAGS[*]}" > "$BUILD/fitlib_cuda_tests.inputs"
  fi
  if [[ $need_bench == 1 ]]; then
    "$NVCC" "${BENCH_FLAGS[@]}" "$BUILD/bench_cuda.o" "${LIBS[@]}" -o "$BUILD/bench_cuda"
    inputs_hash "${BENCH_FLAGS[*]}" > "$BUILD/bench_cuda.inputs"
  fi
  [[ $need_tests == 1 || $need_bench == 1 ]] || log "both programs are up to date (build-gpu/*.inputs)"
}

start=$(date +%s)
log "nvcc: $("$NVCC" --version | tail -1)"
build_status=0
build || build_status=1
built=$(date +%s)
log "built in $((built - start)) s (status $build_status)"
[[ $BUILD_ONLY == 1 ]] && exit $build_status

# Runs "$@" under a time limit, its output also into a log; returns its exit status (124: the limit).
run_logged() {
  local limit=$1 logfile=$2; shift 2
  set +e
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$logfile"
  local rc=${PIPESTATUS[0]}
  set -e
  return "$rc"
}
tests_status=-1
if [[ -x "$BUILD/fitlib_cuda_tests" ]]; then
  log "running the CUDA tests"
  run_logged 300 "$OUT_DIR/cuda_tests.log" "$BUILD/fitlib_cuda_tests" --durations yes && tests_status=0 || tests_status=$?
  [[ $tests_status == 0 || $tests_status == 77 ]] || ldd "$BUILD/fitlib_cuda_tests" | grep -i "not found" || true
fi
bench_status=-1
if [[ -x "$BUILD/bench_cuda" ]]; then
  log "running bench_cuda"
  run_logged 300 "$OUT_DIR/bench_cuda.log" "$BUILD/bench_cuda" --json "$OUT_DIR/bench_cuda.json" && bench_status=0 || bench_status=$?
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT_DIR/gpu.txt" 2>/dev/null || echo "no nvidia-smi" > "$OUT_DIR/gpu.txt"

python3 - "$OUT_DIR" "$build_status" "$tests_status" "$bench_status" "$((built - start))" "$(($(date +%s) - built))" <<'EOF'
import json, pathlib, re, sys
out, build, tests, bench, build_s, run_s = sys.argv[1], *map(int, sys.argv[2:])
o = pathlib.Path(out)
def status(rc):
    return {-1: "not run", 0: "passed", 77: "skipped: no CUDA device", 124: "timed out"}.get(rc, f"failed (exit {rc})")
doc = dict(gpu=(o / "gpu.txt").read_text().strip(), build="ok" if build == 0 else "failed",
           tests=status(tests), bench=status(bench), build_seconds=build_s, run_seconds=run_s)
log = o / "cuda_tests.log"
if log.exists():  # Catch2's last lines: "test cases: N | P passed | F failed" and the assertions'
    doc["tests_summary"] = [l.strip() for l in log.read_text(errors="replace").splitlines() if re.match(r"\s*(test cases|assertions|All tests)", l)]
bj = o / "bench_cuda.json"
if bj.exists():
    try:
        doc["bench_cuda"] = json.loads(bj.read_text())
    except json.JSONDecodeError as ex:
        doc["bench_cuda"] = f"unreadable: {ex}"
(o / "summary.json").write_text(json.dumps(doc, indent=1) + "\n")
print(json.dumps(doc, indent=1))
EOF
[[ $build_status == 0 && ( $tests_status == 0 || $tests_status == 77 ) && ( $bench_status == 0 || $bench_status == 77 ) ]]
