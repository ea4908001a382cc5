#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds fitlib_tests and fitlib-fit with AddressSanitizer + UndefinedBehaviorSanitizer in a kept build folder
# (build-asan/, Debug, -O1) and runs them; exits non-zero on any sanitizer report or warning.
#   scripts/sanitize.sh                # configure, build, run everything
#   scripts/sanitize.sh --only fit     # only a step group (builds only what it needs, in the same build-asan/):
#                                      #   fiber (the fibers' checks), tests (fitlib_tests), fit (the fitlib-fit runs);
#                                      #   a comma-separated list or a repeated --only names several
#   BUILD_DIR=dir JOBS=n scripts/sanitize.sh
# The first build takes about 45 minutes on 2 cores; later runs rebuild what changed (fitlib-fit alone: its two
# unity TUs). Logs: $BUILD_DIR/sanitize-logs/ (a run with --only keeps the other groups' logs).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD_DIR:-build-asan}
JOBS=${JOBS:-$(nproc)}
SAN="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer"
LOGS=$BUILD/sanitize-logs
SUPP=$ROOT/scripts/sanitize.supp

GROUPS_ALL="fiber tests fit"
only=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --only) [[ $# -ge 2 ]] || { echo "sanitize.sh: --only needs a step group: ${GROUPS_ALL// /, }" >&2; exit 2; }
            only+=" ${2//,/ }"; shift 2 ;;
    --only=*) only+=" ${1#--only=}"; only=${only//,/ }; shift ;;
    -h|--help) sed -n '3,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sanitize.sh: unknown argument '$1' (usage: scripts/sanitize.sh [--only fiber|tests|fit[,...]])" >&2; exit 2 ;;
  esac
done
for g in $only; do
  [[ " $GROUPS_ALL " == *" $g "* ]] || { echo "sanitize.sh: unknown step group '$g' (one of: ${GROUPS_ALL// /, })" >&2; exit 2; }
done
only=${only:-$GROUPS_ALL}
# Whether step group $1 runs.
wants() { [[ " $only " == *" $1 "* ]]; }

targets=()
wants tests && targets+=(fitlib_tests)
wants fit && targets+=(fitlib-fit)
if [[ ${#targets[@]} -gt 0 ]]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER="${CXX:-g++}" -DCMAKE_C_COMPILER="${CC:-gcc}" \
    "-DCMAKE_CXX_FLAGS=$SAN" "-DCMAKE_C_FLAGS=$SAN" \
    "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" "-DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined" \
    -DFITLIB_BUILD_TESTS=ON -DFITLIB_BUILD_APPS=ON -DFITLIB_BUILD_BENCHMARKS=OFF -DFITLIB_BUILD_EXAMPLES=OFF \
    -DFITLIB_ENABLE_CUDA=OFF
  cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}"
fi

# halt on the first report; fibers are annotated for ASan (detail/fiber.hpp), so use-after-return
# detection works inside replica fibers too. Every step runs under the full unwinder: the suppressions
# (sanitize.supp) name frames that the fast one loses, in libhdf5 and in Open MPI's libraries, which have no
# frame pointers; and with the fast one a block the Blosc2 plugin allocated (1344 bytes, from H5Z_pipeline) was
# reported in fitlib_tests, whose mapping the unloaded plugin's addresses border, instead of "<unknown module>".
# intercept_tls_get_addr=0: GCC 12's sanitizer runtime (LLVM's before 17) records each dynamic TLS block it sees
# through __tls_get_addr, and takes one whose address is 16 past a page boundary for a glibc 2.19 block with a
# {size, start} header before it. Since glibc 2.25 such a block is a plain malloc'd one, and the 16 bytes before
# it are ASan's chunk header, so LeakSanitizer's final scan reads a garbage range and its tracer dies on signal 11
# ("DTLS 10 at 0x000000000bfc-0x000400001cfe", google/sanitizers#1322; fixed by LLVM's b1bd52cd, "Fix tls_get_addr
# handling for glibc >=2.25"). fitlib-fit hit it in every run: MPI_Init_thread, first in main, has hwloc load its
# OpenCL plugin and ocl-icd's libOpenCL.so.1, whose 4-byte TLS block, malloc'd at the same heap place each run,
# sat at such an address (Open MPI's ofi components have TLS too). Without the interceptor nothing is lost:
# LeakSanitizer still scans the dynamic TLS blocks as the allocations of ld.so they are (use_ld_allocations).
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:fast_unwind_on_malloc=0:intercept_tls_get_addr=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="suppressions=$SUPP:print_suppressions=0"
mkdir -p "$LOGS"
failed=0

# Runs "$@" with its output in $LOGS/$name.log; a failure is an exit status outside $ok (a space-separated
# list) or any sanitizer output in the log.
# Leaks whose allocating frame lies in "<unknown module>" are the filter plugins' own (the Blosc2 plugin keeps
# 3 blocks, 4.7 KB, for good): HDF5 unloads plugins at exit, before LeakSanitizer reports, so no suppression
# can name them. A report made of those alone is tolerated (and said); any other leak fails.
plugin_leaks_only() {
  local log=$1
  grep -q 'ERROR: LeakSanitizer' "$log" || return 1
  grep -qE '==[0-9]+==ERROR: (AddressSanitizer|UndefinedBehaviorSanitizer)|runtime error:' "$log" && return 1
  # the frame after the allocator's of every leak
  ! awk '/^(Direct|Indirect) leak/ {getline; getline; print}' "$log" | grep -qv '<unknown module>'
}

check() {
  local name=$1 ok=$2
  shift 2
  local rc=0
  echo "== $name: $*"
  "$@" >"$LOGS/$name.log" 2>&1 || rc=$?
  if plugin_leaks_only "$LOGS/$name.log"; then
    echo "   ok (rc $rc; only the filter plugins' own leaks, unnamed once HDF5 unloaded them)"
    return
  fi
  if grep -qE '==[0-9]+==(ERROR|WARNING)|runtime error:|SUMMARY: (Address|Leak|UndefinedBehavior)Sanitizer' "$LOGS/$name.log"; then
    echo "   sanitizer report (rc $rc), see $LOGS/$name.log:"
    grep -m 5 -E '==[0-9]+==(ERROR|WARNING)|runtime error:|SUMMARY:' "$LOGS/$name.log" | sed 's/^/   /'
    failed=1
  elif [[ " $ok " != *" $rc "* ]]; then
    echo "   exit status $rc (expected $ok), see $LOGS/$name.log"
    tail -n 5 "$LOGS/$name.log" | sed 's/^/   /'
    failed=1
  else
    echo "   ok (rc $rc)"
  fi
}

# The fibers: a clean run, and an overflow in a fiber frame after a suspend must be reported.
if wants fiber; then
  "${CXX:-g++}" -std=c++20 -O1 -g -fsanitize=address -fno-omit-frame-pointer -Iinclude scripts/sanitize_fiber.cpp -o "$BUILD/sanitize_fiber"
  check fiber_clean "0" "$BUILD/sanitize_fiber" 0
  echo "== fiber_overflow_after_suspend: must be reported"
  if "$BUILD/sanitize_fiber" 2 >"$LOGS/fiber_overflow.txt" 2>&1 || ! grep -q 'stack-buffer-overflow' "$LOGS/fiber_overflow.txt"; then
    echo "   NOT reported: ASan is blind in fiber frames again (detail/fiber.hpp)"
    failed=1
  else
    echo "   ok (reported)"
  fi
fi

# The test suite: every test case but the corrupt-file one, then that one (its own log, for its suppression).
if wants tests; then
  TESTS=$BUILD/tests/fitlib_tests
  HDF5_CORRUPT="io: read_rabbit survives truncated and corrupted files"
  # (the list is read in full first: grep -q would close the pipe early, and under pipefail the
  # lister's SIGPIPE would read as a missing test)
  if ! grep -qxF "$HDF5_CORRUPT" <<<"$("$TESTS" --list-test-names-only)"; then
    echo "test case '$HDF5_CORRUPT' not found: update scripts/sanitize.sh and scripts/sanitize.supp"
    exit 1
  fi
  check tests "0" "$TESTS" "~$HDF5_CORRUPT"
  check tests_corrupt_hdf5 "0" "$TESTS" "$HDF5_CORRUPT"
fi

# fitlib-fit: batched toys on fibers, and a data fit with impacts on 2 threads (rc 3 = some fit did not converge).
if wants fit; then
  FIT=$BUILD/apps/fitlib-fit/fitlib-fit
  DEMO=examples/data/demo_analysis.hdf5
  OUT=$BUILD/sanitize-out
  mkdir -p "$OUT"
  check fit_toys_batch64 "0 3" "$FIT" "$DEMO" -t 100 --replicaBatch 64 -o "$OUT/toys.hdf5" --json
  check fit_data_threads2 "0 3" "$FIT" "$DEMO" -t 0 --unblind --threads 2 --doImpacts --globalImpacts -o "$OUT/data.hdf5" --json
  check fit_asimov_scan "0 3" "$FIT" "$DEMO" -t -1 --scan signal --scanPoints 5 -o "$OUT/asimov.hdf5"
fi

if [[ $failed -ne 0 ]]; then
  echo "sanitize: FAILED (${only# }; logs in $LOGS)"
  exit 1
fi
echo "sanitize: no sanitizer reports (${only# })"
