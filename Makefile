# recsys_dist: `make demo` and `make test` build .venv when it is missing, then run.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
CLI    := $(VENV)/bin/recsys-dist
STAMP  := $(VENV)/.installed
DEMO_DATA := data/demo

.PHONY: install demo demo-follow lint format test test-fast test-arith test-configs test-faults bench bench-torch clean-demo

$(PY):
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the package metadata changes; safe to run any number of times.
# uv installs the same pinned packages as pip would (pyproject.toml) in under a minute
# rather than three: it unpacks the wheels and compiles their .pyc files in parallel. The
# .pyc files matter where PYTHONDONTWRITEBYTECODE is set: without them every process
# would compile TensorFlow's Python anew, 16 s instead of 5 s per import.
UV_VERSION := 0.13.9
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check 'uv==$(UV_VERSION)'
	$(VENV)/bin/uv pip install --python $(PY) --quiet --compile-bytecode -e '.[test]'
	$(PY) -m recsys_dist.ops.build  # the Parquet op; rebuilt on first use if TF or pyarrow change
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(CLI) data synth --out $(DEMO_DATA) --days 3 --rows-per-day 200000 --seed 7 --quiet
	$(CLI) validate --config configs/demo.yaml --data $(DEMO_DATA)
	$(CLI) data read --config configs/demo.yaml --data $(DEMO_DATA) --split train --check
	rm -rf runs/demo
	$(CLI) train --config configs/demo.yaml --data $(DEMO_DATA) --model-dir runs/demo --no-eval
	$(CLI) evaluate --config configs/demo.yaml --model-dir runs/demo --data $(DEMO_DATA) \
		--out runs/demo/eval --set evaluation.group_column=user_id --quiet
	$(CLI) export --config configs/demo.yaml --model-dir runs/demo --out runs/demo/export
	@echo "demo done: report runs/demo/eval/report.html, SavedModel runs/demo/export"

# Following the data: hourly partitions land one by one, `recsys-dist follow` trains and
# publishes each as a delta, and each published version is exported and scored as a
# serving loader would (docs/follow.md).
demo-follow: $(STAMP)
	$(PY) pipelines/follow_demo.py

# ruff with the rules in pyproject.toml ([tool.ruff.lint]) and its formatter's check
# ([tool.ruff.format]; `make format` rewrites the files); `make test` runs both first.
lint: $(STAMP)
	$(VENV)/bin/ruff check recsys_dist tests benchmarks pipelines
	$(VENV)/bin/ruff format --check --quiet recsys_dist tests benchmarks pipelines

format: $(STAMP)
	$(VENV)/bin/ruff format recsys_dist tests benchmarks pipelines

# The tests that start no cluster run in two processes (pytest-xdist); so do the cluster
# tests, a whole module to a process (tests/cluster/conftest.py): their servers spend much
# of a run waiting on each other, so two runs side by side use the two cores. The package's
# and the tests' .pyc files are written first, for the processes the tests start (see the
# install step on PYTHONDONTWRITEBYTECODE). One pytest run of both, the tests without a
# cluster filling in after the cluster modules, was slower (benchmarks/RESULTS.md).
test: lint
	$(PY) -m compileall -q -j 0 recsys_dist tests >/dev/null
	$(PY) -m pytest -q -m "not cluster" -n 2
	$(PY) -m pytest -q -m cluster -n 2 --dist loadgroup --durations=20

test-fast: lint
	$(PY) -m pytest -q -m "not cluster" -n 2

# CASES configs drawn from the config space (tests/support/config_space.py), each run end to
# end as a user would: validate, train, evaluate, export, and serving in plain TensorFlow.
# Case i has seed SEED + i (SEED random when unset); every failure prints its seed, and
# `$(PY) -m tests.support.config_space --seed S --cases 1` replays it (docs/testing.md).
CASES ?= 200
test-configs: $(STAMP)
	$(PY) -m tests.support.config_space --cases $(CASES) $(if $(SEED),--seed $(SEED))

# Every fault at every moment on namespace hosts (tests/support/fault_matrix.py, root
# only): MOMENTS=a,b and FAULTS=x,y pick cells; all of them take about an hour and a half.
test-faults: $(STAMP)
	$(PY) -m tests.support.fault_matrix $(if $(MOMENTS),--moments $(MOMENTS)) \
		$(if $(FAULTS),--faults $(FAULTS))

# The tests once more under each arithmetic this machine does not run by default:
# TensorFlow's Eigen kernels, and oneDNN's held to AVX2 (tests/support/arithmetic.py). Both
# pick their instructions by the CPU, so a test that passes here under all of them does
# not lean on one CPU's rounding (docs/testing.md). The cluster tests here are those that
# compare two strategies' runs.
ARITH_CLUSTER := tests/cluster/test_mirrored.py tests/cluster/test_multi_worker.py \
	tests/cluster/test_sequence_models.py::test_bst_trains_under_mirrored_and_multi_worker_mirrored_on_hashed_tables
test-arith: $(STAMP)
	@$(PY) -m tests.support.arithmetic 2>/dev/null | while read -r setting; do \
		echo "== $$setting"; \
		env $$setting $(PY) -m pytest -q -m "not cluster" -n 2 </dev/null && \
		env $$setting $(PY) -m pytest -q -m cluster -n 2 --dist loadgroup $(ARITH_CLUSTER) \
			</dev/null || exit 1; \
	done

# Every benchmark that has a target, with the arguments of the figures the README and docs
# cite (benchmarks/README.md). The one-off studies in benchmarks/studies/ are not run.
# The plain-PyTorch peer of benchmarks/sequence_speed.py, in an environment of its own so
# that the package's pinned stack never meets PyTorch's (the CPU build, with numpy).
TORCH_VENV := .venv-torch
TORCH_VERSION := 2.13.0
$(TORCH_VENV)/bin/python:
	$(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/pip install --quiet --disable-pip-version-check \
		'torch==$(TORCH_VERSION)' numpy

bench-torch: $(TORCH_VENV)/bin/python

bench: $(STAMP)
	$(PY) benchmarks/op_correctness.py
	$(PY) benchmarks/sparse_kernels.py --rounds 3
	$(PY) benchmarks/input_bench.py
	$(PY) benchmarks/checkpoint_bench.py
	$(PY) benchmarks/eval_bench.py
	$(PY) benchmarks/startup_bench.py
	$(PY) benchmarks/train_bench.py
	$(PY) benchmarks/scale_bench.py --rows 10000000,100000000
	$(PY) benchmarks/dynamic_tables.py
	$(PY) benchmarks/strategy_bench.py
	$(PY) benchmarks/slow_storage_bench.py --settings 2/4,4/8,8/8
	$(PY) benchmarks/network_bench.py --rounds 2 --settings --dispatch 8,16
	$(PY) benchmarks/quality.py

clean-demo:
	rm -rf $(DEMO_DATA)
