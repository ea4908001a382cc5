#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs rabbit's own plotting and printing scripts, unchanged, on fitlib's results in rabbit's fitresults layout:
# fitlib-fit fits the demo tensor (the demo's command line with histograms added), fitlib.rabbit.write_fitresults
# converts its results file, and each of rabbit's scripts runs on it into its own directory. Fails if any fails.
#
#   scripts/rabbit-compat.sh [--keep DIR]        DIR: keep the files (results, fitresults, each script's output)
#
# Needs .venv-rabbit (rabbit-fit 0.2.5 with its plotting packages: made by benchmarks/compare_rabbit.py from
# benchmarks/rabbit/requirements.txt, docs/benchmarks.md) and a build of fitlib-fit ($BUILD_DIR/apps/fitlib-fit/
# fitlib-fit, or FITLIB_FIT). fitlib's pure-Python modules are imported from python/src (FITLIB_PYTHON_SRC): no build
# of the extension. Not part of `make test`: it needs the rabbit venv.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

keep=""
if [[ "${1:-}" == "--keep" && -n "${2:-}" ]]; then
  keep=$2
elif [[ $# -gt 0 ]]; then
  echo "usage: scripts/rabbit-compat.sh [--keep DIR]" >&2
  exit 2
fi

venv=$(realpath -m "${RABBIT_VENV:-.venv-rabbit}")
fit=$(realpath -m "${FITLIB_FIT:-${BUILD_DIR:-build}/apps/fitlib-fit/fitlib-fit}")
src=$(realpath -m "${FITLIB_PYTHON_SRC:-python/src}")
tensor=examples/data/demo_analysis.hdf5

if [[ ! -x "$venv/bin/python" ]]; then
  echo "rabbit-compat: no rabbit venv at $venv: make it with python3 benchmarks/compare_rabbit.py --quick (docs/benchmarks.md)," \
    "or give its path in RABBIT_VENV" >&2
  exit 2
fi
if [[ ! -x "$fit" ]]; then
  echo "rabbit-compat: no fitlib-fit at $fit: build it (make build) or give its path in FITLIB_FIT" >&2
  exit 2
fi
if ! "$venv/bin/python" -c "import rabbit.io_tools, wums.ioutils, matplotlib, mplhep, seaborn, pandas, plotly" 2>/dev/null; then
  echo "rabbit-compat: $venv lacks rabbit's plotting packages: $venv/bin/pip install -r benchmarks/rabbit/requirements.txt" >&2
  exit 2
fi

if [[ -n "$keep" ]]; then
  mkdir -p "$keep" && work=$(cd "$keep" && pwd)
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
export MPLBACKEND=Agg MPLCONFIGDIR="$work/.matplotlib" PYTHONPATH="$src${PYTHONPATH:+:$PYTHONPATH}"

results=$work/demo_results.hdf5
fitresults=$work/fitresults.hdf5
if ! "$fit" "$tensor" -t 0 --unblind --doImpacts --globalImpacts --scan signal --scanPoints 7 --saveHists \
  --computeHistCov --computeHistErrorsPerProcess --computeVariations -o "$results" -q >"$work/fitlib-fit.log" 2>&1; then
  cat "$work/fitlib-fit.log" >&2
  echo "rabbit-compat: fitlib-fit failed" >&2
  exit 1
fi
if ! "$venv/bin/python" -c 'import sys; from fitlib.rabbit import write_fitresults; write_fitresults(sys.argv[1], sys.argv[2])' \
  "$results" "$fitresults"; then
  echo "rabbit-compat: fitlib.rabbit.write_fitresults failed (fitlib's modules from $src; fitlib/__init__.py must" \
    "import the compiled extension lazily, so that the pure-Python modules import without it)" >&2
  exit 1
fi

# name | script and its arguments (the fitresults file first; {out} is the check's output directory)
checks=(
  "print_impacts|rabbit_print_impacts FILE"
  "print_impacts_global|rabbit_print_impacts FILE --globalImpacts"
  "print_pulls_and_constraints|rabbit_print_pulls_and_constraints FILE"
  "plot_pulls_and_impacts|rabbit_plot_pulls_and_impacts FILE -o {out}"
  "plot_pulls_and_impacts_global|rabbit_plot_pulls_and_impacts FILE --globalImpacts -o {out}"
  "plot_hists_postfit|rabbit_plot_hists FILE -m Basemodel -o {out}"
  "plot_hists_prefit|rabbit_plot_hists FILE -m Basemodel --prefit -o {out}"
  "plot_hists_cov|rabbit_plot_hists_cov FILE -m Basemodel --params -o {out}"
  "plot_hists_corr|rabbit_plot_hists_cov FILE -m Basemodel --params --correlation -o {out}"
  "plot_likelihood_scan|rabbit_plot_likelihood_scan FILE --params signal -o {out}"
)
failed=()
for check in "${checks[@]}"; do
  name=${check%%|*}
  command=${check#*|}
  out=$work/$name
  mkdir -p "$out"
  read -r -a argv <<<"${command//\{out\}/$out}"
  argv=("${argv[@]/#FILE/$fitresults}")
  script="$venv/bin/${argv[0]}"
  if (cd "$out" && "$script" "${argv[@]:1}") >"$out/log.txt" 2>&1 && [[ -n "$(ls -A "$out" | grep -v '^log.txt$')" || $name == print_* ]]; then
    echo "pass  $name: ${argv[*]/#$work\//}"
  else
    echo "FAIL  $name: ${argv[*]/#$work\//}"
    tail -n 5 "$out/log.txt" | sed 's/^/      /'
    failed+=("$name")
  fi
done

[[ -n "$keep" ]] && echo "rabbit-compat: files kept in $work"
if ((${#failed[@]})); then
  echo "rabbit-compat: ${#failed[@]} of ${#checks[@]} failed: ${failed[*]}" >&2
  exit 1
fi
echo "rabbit-compat: all ${#checks[@]} checks of rabbit's scripts passed on fitlib's converted results"
