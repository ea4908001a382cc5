# SPDX-License-Identifier: MIT
# Convenience entry points: install dependencies, build, test, run the demo and the benchmarks.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE ?= cmake
CTEST ?= ctest

.PHONY: all deps configure build demo test python fuzz sanitize bench clean

all: build

deps:
	./scripts/install-deps.sh

configure: deps
	$(CMAKE) -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: configure
	$(CMAKE) --build $(BUILD_DIR) -j$(JOBS)

# The demo: fitlib-fit on the analysis tensor shipped in examples/data/ (written by
# examples/write_demo_tensor.cpp), with impacts; results in $(BUILD_DIR)/demo_results.{hdf5,json}.
demo: configure
	$(CMAKE) --build $(BUILD_DIR) -j$(JOBS) --target fitlib-fit
	./$(BUILD_DIR)/apps/fitlib-fit/fitlib-fit examples/data/demo_analysis.hdf5 -t 0 --unblind --doImpacts --globalImpacts \
	  --scan signal --scanPoints 7 -o $(BUILD_DIR)/demo_results.hdf5 --json

test: build
	$(CTEST) --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS) -LE fuzz
	BUILD_DIR=$(BUILD_DIR) JOBS=$(JOBS) ./scripts/python-venv.sh

# The Python package (python/) built and installed into $(BUILD_DIR)/venv-python, and its tests (part of `test`).
python: deps
	BUILD_DIR=$(BUILD_DIR) JOBS=$(JOBS) ./scripts/python-venv.sh

# The rabbit reader's libFuzzer run (60 s, needs clang-14 and libFuzzer, which --fuzz installs); not part of `test`.
fuzz: configure
	./scripts/install-deps.sh --fuzz
	$(CTEST) --test-dir $(BUILD_DIR) --output-on-failure -L fuzz

# ASan + UBSan build of the tests and fitlib-fit in build-asan/ (kept between runs; the first build takes about
# 45 minutes on 2 cores), then the tests and a few fitlib-fit runs; fails on any sanitizer report (scripts/sanitize.sh).
# One step group alone, building only its target: scripts/sanitize.sh --only fiber|tests|fit (e.g. --only fit).
sanitize: deps
	JOBS=$(JOBS) ./scripts/sanitize.sh

bench: deps
	$(CMAKE) -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release -DFITLIB_BUILD_BENCHMARKS=ON
	$(CMAKE) --build $(BUILD_DIR) -j$(JOBS) --target fitlib_benchmarks
	mkdir -p $(BUILD_DIR)/bench
	@set -e; for exe in $(BUILD_DIR)/benchmarks/bench_*; do \
	  [ -f "$$exe" ] && [ -x "$$exe" ] || continue; \
	  name=$$(basename "$$exe"); \
	  echo "== $$name"; \
	  "$$exe" --benchmark_out=$(BUILD_DIR)/bench/$$name.json --benchmark_out_format=json; \
	done

clean:
	rm -rf $(BUILD_DIR)
