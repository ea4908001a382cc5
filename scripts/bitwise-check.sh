#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks that the working tree's CPU results are bitwise those of a base revision: builds
# scripts/bitwise/dump.cpp (hashes of every output bit of 100+ likelihood configurations) against
# both trees' headers, with the same test models (this tree's tests/common), and compares.
#   scripts/bitwise-check.sh [BASE]      # BASE defaults to HEAD
# Exits non-zero when any hash differs, listing the configurations. Needs what `make test` installs.
set -euo pipefail
export LC_ALL=C  # sort and join agree on the order
cd "$(dirname "$0")/.."
ROOT=$PWD
BASE=${1:-HEAD}
WORK=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT
git archive "$BASE" include | tar -x -C "$WORK"
EIGEN=$(pkg-config --cflags eigen3 2>/dev/null || echo -I/usr/include/eigen3)
FLAGS=(-std=c++20 -O2 -march=native -DNDEBUG $EIGEN -I"$ROOT/tests/common")
build() {  # build <include dir> <output>
  ${CXX:-g++} "${FLAGS[@]}" -I"$1" "$ROOT/scripts/bitwise/dump.cpp" -o "$2" -pthread
}
build "$WORK/include" "$WORK/dump_base" &
base_build=$!
build "$ROOT/include" "$WORK/dump_tree" || { wait "$base_build" || true; exit 1; }
wait "$base_build"
"$WORK/dump_base" >"$WORK/base.txt"
"$WORK/dump_tree" >"$WORK/tree.txt"
# configurations the base cannot build (a policy it does not have yet) are left out of the comparison
if diff <(cut -c1-28 "$WORK/base.txt" | sort) <(cut -c1-28 "$WORK/tree.txt" | sort) >/dev/null; then :; else
  echo "note: the two builds hash different configuration sets; comparing the common ones"
fi
if join -j1 -t$'\t' <(sed 's/ \{1,\}\([0-9a-f]\{16\}\)$/\t\1/' "$WORK/base.txt" | sort) \
                    <(sed 's/ \{1,\}\([0-9a-f]\{16\}\)$/\t\1/' "$WORK/tree.txt" | sort) |
   awk -F'\t' '$2 != $3 {print "differs: " $1; bad = 1} END {if (NR == 0) {print "no configuration in common"; bad = 1} exit bad}'; then
  echo "bitwise-check: $(wc -l <"$WORK/tree.txt") configurations, every common one identical to $BASE"
else
  exit 1
fi
