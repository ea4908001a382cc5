#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the rabbit-reader libFuzzer target with clang++-14, runs it for a bounded time from the example tensors and
# fails if fitlib crashes, leaks, hangs, allocates past its bound or throws anything but fitlib::error. Then does the same
# for the pickle decoder (fuzz_pickle: anything but file_error, or a decode(encode(v)) != v, fails) for
# FITLIB_FUZZ_PICKLE_SECONDS (20), and runs the resource-bound mutation search (FITLIB_FUZZ_MUTATIONS, 300 per tensor).
#
# Usage: run_fuzzer.sh WORK_DIR SECONDS [compiler and linker arguments: -isystem Eigen/HDF5 include dirs, HDF5 libraries]
# Exit status: 0 no fitlib crash, 1 a fitlib crash or a build failure (reproducers in WORK_DIR/artifacts), 77 skipped
# (no clang++-14 or libFuzzer runtime).
#
# libhdf5 1.10 (Debian 12) has memory-safety bugs of its own when parsing corrupt object headers, which fitlib cannot
# reach from outside (fitlib does pre-check what it can: variable-length heap data, number types, chunk and storage
# sizes). So the fuzzer runs in fork mode and keeps going after a crash; afterwards each reproducer is rerun alone and
# classified by the first stack frame outside the sanitizer runtime: inside libhdf5, on memory libhdf5 allocated, is
# reported as an HDF5 bug and does not fail the test; anything else (fitlib's code, or a fitlib buffer overrun by HDF5,
# or a non-fitlib exception) fails it.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$1
seconds=$2
shift 2

cxx=${FITLIB_FUZZ_CXX:-clang++-14}
if ! command -v "$cxx" >/dev/null; then
  echo "fuzz: $cxx not found; install clang-14 and libclang-rt-14-dev (scripts/install-deps.sh --fuzz). Skipping." >&2
  exit 77
fi
mkdir -p "$work"
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
    "$cxx" -x c++ -fsanitize=fuzzer,address - -o "$work/probe" 2>/dev/null; then
  echo "fuzz: $cxx cannot link libFuzzer; install libclang-rt-14-dev (scripts/install-deps.sh --fuzz). Skipping." >&2
  exit 77
fi

echo "fuzz: building $work/fuzz_rabbit_reader"
if ! "$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address -I"$root/include" "$root/fuzz/fuzz_rabbit_reader.cpp" "$@" \
    -o "$work/fuzz_rabbit_reader"; then
  echo "fuzz: the fuzz target does not build" >&2
  exit 1
fi

echo "fuzz: building $work/fuzz_pickle"
if ! "$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address -I"$root/include" "$root/fuzz/fuzz_pickle.cpp" "$@" -o "$work/fuzz_pickle"; then
  echo "fuzz: the pickle fuzz target does not build" >&2
  exit 1
fi

# Seeds: the example tensors (dense, sparse, symmetric). The corpus grows in WORK_DIR/corpus from run to run.
mkdir -p "$work/corpus"
rm -rf "$work/artifacts" "$work/reports"
mkdir -p "$work/artifacts" "$work/reports"
cp -f "$root"/tests/data/rabbit/*.hdf5 "$work/corpus/"
# The reliability probe's byte-level breakages of each (../shared/reference/reliability-probe.md §2): truncated
# to 1 %, 50 % and 99 %, 400 bytes flipped mid-file, and an empty file.
for f in "$root"/tests/data/rabbit/*.hdf5; do
  name=$(basename "$f" .hdf5)
  size=$(stat -c %s "$f")
  for pct in 1 50 99; do head -c $((size * pct / 100)) "$f" >"$work/corpus/${name}_truncated_$pct"; done
  python3 - "$f" "$work/corpus/${name}_flipped_middle" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
mid = len(data) // 2
for i in range(mid, min(mid + 400, len(data))):
    data[i] ^= 0xFF
open(sys.argv[2], "wb").write(data)
PY
done
: >"$work/corpus/empty"

# Mutations that once cost the reader 16.6 GB and 40 s (tests/data/rabbit/mutated/, read by test_reader_bounds too).
cp -f "$root"/tests/data/rabbit/mutated/*.hdf5 "$work/corpus/" 2>/dev/null || true

# Plugins stay off (the target disables them). Resource bounds: one allocation past -malloc_limit_mb (128 MB, above
# the 64 × 8 × 200 kB the target's compression-ratio bound allows an input of -max_len bytes), a process past
# -rss_limit_mb or an input running past -timeout counts as a crash, classified below like any other. Leaks inside
# libhdf5's own error paths are suppressed (lsan.supp).
export HDF5_PLUGIN_PATH=
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:fast_unwind_on_malloc=0:malloc_context_size=30}
export LSAN_OPTIONS=suppressions="$root/fuzz/lsan.supp"
options=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=128 -max_len=200000)
echo "fuzz: running for ${seconds}s"
"$work/fuzz_rabbit_reader" "${options[@]}" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
  -max_total_time="$seconds" -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/fuzz.log" 2>&1
tail -n 5 "$work/fuzz.log"

# Classifies one sanitizer report: prints "fitlib" or "hdf5".
classify() {
  awk '
    function module_of(line) { return line ~ /libhdf5/ ? "hdf5" : "other" }
    # Frames without a source location inside the fuzz binary are the sanitizer runtime (interceptors such as
    # memcpy, strdup, malloc) or libFuzzer; libc frames are memcpy and friends. fitlib frames carry file:line.
    function skip(line) {
      return line ~ /fuzz_rabbit_reader\+0x|libc\.so|__interceptor_|__asan|__sanitizer|__memcpy|__memmove|__memset|__libc_start/
    }
    /non-fitlib exception|non-standard exception/ { verdict = "fitlib" }
    /^ *#[0-9]+ 0x/ {
      if (!in_stack) { in_stack = 1; section++ }
      if (!seen[section] && !skip($0)) { seen[section] = 1; first[section] = module_of($0) }
      next
    }
    { in_stack = 0 }
    END {
      if (verdict == "") {
        # Section 1: where it failed; sections 2, 3 (ASan): who allocated (and freed) the memory it touched.
        verdict = first[1] == "hdf5" ? "hdf5" : "fitlib"
        for (k = 2; k <= section; ++k)
          if (first[k] == "other") verdict = "fitlib"
      }
      print verdict
    }' "$1"
}

status=0
hdf5_bugs=0
for artifact in "$work"/artifacts/*; do
  [[ -f "$artifact" ]] || continue
  name=$(basename "$artifact")
  report="$work/reports/$name.txt"
  "$work/fuzz_rabbit_reader" "${options[@]}" -runs=1 "$artifact" >"$report" 2>&1
  rc=$?
  if ((rc == 0)); then
    echo "fuzz: $name does not reproduce alone (state-dependent; see $work/fuzz.log)"
    continue
  fi
  verdict=$(classify "$report")
  if [[ $verdict == hdf5 ]]; then
    hdf5_bugs=$((hdf5_bugs + 1))
    echo "fuzz: $name: a libhdf5 bug (fails inside libhdf5 on its own memory): $(grep -m1 -E 'ERROR: |ALARM|deadly' "$report")"
  else
    status=1
    echo "fuzz: $name: a FITLIB failure; reproduce with $work/fuzz_rabbit_reader $artifact" >&2
    sed -n '1,60p' "$report" >&2
  fi
done
# The pickle decoder: no HDF5 code runs, so every crash is fitlib's. Seeds: small pickles of protocols 0, 2 and 4
# (rabbit's meta dict, a hist axis object as fitlib's write_rabbit writes it, memo, sets, long ints).
pickle_seconds=${FITLIB_FUZZ_PICKLE_SECONDS:-20}
pk="$work/pickle_corpus"
mkdir -p "$pk" "$work/pickle_artifacts"
rm -f "$work"/pickle_artifacts/*
printf '(dp0\nVsystematic_type\np1\nVnormal\np2\nsVsymmetric_tensor\np3\nI01\ns.' >"$pk/p0_dict"
printf '(lp0\nI1\naF2.5\naS'"'"'a\\x00'"'"'\np1\naL123456789012345678901234L\na(tp2\na.' >"$pk/p0_list"
printf '\x80\x02}q\x00(X\x10\x00\x00\x00symmetric_tensorq\x01\x88X\x0f\x00\x00\x00systematic_typeq\x02X\x0a\x00\x00\x00log_normalq\x03u.' >"$pk/p2_meta"
printf '\x80\x02c__builtin__\nset\nq\x00]q\x01(K\x01K\x02e\x85q\x02Rq\x03h\x03\x86q\x04.' >"$pk/p2_set_memo"
printf '\x80\x04\x95\x22\x00\x00\x00\x00\x00\x00\x00\x8c\x04hist\x8c\x0caxis.Integer\x93)\x81}\x8c\x03_axK\x06sb.' >"$pk/p4_object"
printf '\x80\x04\x8f(K\x01\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01\x90G?\xf0\x00\x00\x00\x00\x00\x00\x94h\x00\x87.' >"$pk/p4_set_long"
: >"$pk/empty"
echo "fuzz: running fuzz_pickle for ${pickle_seconds}s"
"$work/fuzz_pickle" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -max_total_time="$pickle_seconds" \
  -artifact_prefix="$work/pickle_artifacts/" "$pk" >"$work/fuzz_pickle.log" 2>&1
pickle_rc=$?
tail -n 3 "$work/fuzz_pickle.log"
if ((pickle_rc != 0)); then
  status=1
  echo "fuzz: fuzz_pickle failed (exit $pickle_rc); reproducers in $work/pickle_artifacts, log $work/fuzz_pickle.log" >&2
  grep -m1 -A40 -E 'ERROR: |deadly|threw|differs|failed' "$work/fuzz_pickle.log" >&2
fi
# The resource-bound search (mutation_search.cpp): FITLIB_FUZZ_MUTATIONS (300) seeded mutations of each example tensor,
# each read in a child process without sanitizers, whose resident memory must stay within 48 MiB + 64 × the file's
# size and whose time within 2 s + 1 s/MB (read at compression ratio 64). A flagged input is kept in
# WORK_DIR/mutation_flagged and fails the run; add it to tests/data/rabbit/mutated/ once fixed.
mutations=${FITLIB_FUZZ_MUTATIONS:-300}
if ((mutations > 0)); then
  echo "fuzz: building $work/mutation_search"
  if ! "$cxx" -std=c++20 -O1 -I"$root/include" -I"$root/tests/common" "$root/fuzz/mutation_search.cpp" "$@" -o "$work/mutation_search"; then
    echo "fuzz: mutation_search does not build" >&2
    exit 1
  fi
  rm -rf "$work/mutation_flagged"
  echo "fuzz: mutation_search, $mutations mutations of each example tensor"
  if ! "$work/mutation_search" "$work/mutation_flagged" 1 "$mutations" "$(nproc)" 64 "$root"/tests/data/rabbit/test_tensor.hdf5 \
      "$root"/tests/data/rabbit/test_tensor_sparse.hdf5 "$root"/tests/data/rabbit/test_tensor_symmetric.hdf5 \
      "$root"/tests/data/rabbit/test_tensor_normal.hdf5 >"$work/mutation_search.log" 2>&1; then
    status=1
    echo "fuzz: mutation_search flagged inputs over the memory or time bound (kept in $work/mutation_flagged):" >&2
    grep FLAGGED "$work/mutation_search.log" >&2
  fi
  grep CRASHED "$work/mutation_search.log" | sed 's/^/fuzz: (a crash, for the libFuzzer run to classify) /'
  grep -h "^job" "$work/mutation_search.log" | tail -n 3
fi
echo "fuzz: done; libhdf5-internal crashes: $hdf5_bugs; fitlib failures: $status"
exit $status
