# tooldecode — the README's two commands are `make demo` and `make test`; both set up first.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
MODEL ?= qwen2.5-coder-0.5b-instruct

.PHONY: setup test test-fast lint demo grammars grammars-check conformance maskbench bench experiments notebooks models organisms gpu-queue queue findings report clean

setup:
	@bash scripts/setup.sh

# TEST_WORKERS pytest-xdist processes (one llama.cpp thread each); --dist loadfile keeps each test file, and
# so its module-scoped models and servers, on one worker (tests/conftest.py puts the heaviest files first)
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile

test: setup
	$(PY) -m tooldecode models fetch smollm2-135m-instruct
	$(PY) -m ruff check tooldecode tests benchmarks experiments scripts
	$(PY) -m pytest -q -ra --durations=20 $(XDIST)

# no model weights (tests/model_guard.py fails a test that loads any) and nothing slow: under 2 minutes
test-fast: setup
	TOOLDECODE_TEST_FAST=1 $(PY) -m pytest -q -ra --durations=10 -m "not model and not slow" $(XDIST)

lint: setup
	$(PY) -m ruff check tooldecode tests benchmarks experiments scripts
	$(PY) -m ruff format --check tooldecode tests benchmarks experiments scripts
	$(PY) -m mypy

models: setup
	$(PY) -m tooldecode models fetch --all
	$(PY) -m tooldecode models verify

# the lenient organism when it is built here, else MODEL (DEMO_ARGS="--model M" picks another)
demo: setup
	$(PY) -m tooldecode models fetch $(MODEL)
	$(PY) scripts/demo.py $(DEMO_ARGS)

# every notebook top to bottom (nbconvert); executed copies go to build/notebooks/, the committed ones stay clean.
# NOTEBOOK_ENV="TOOLDECODE_NOTEBOOK_MODEL=smollm2-135m-instruct TOOLDECODE_NOTEBOOK_N=2" for a quick pass
notebooks: setup
	@mkdir -p build/notebooks
	@for nb in notebooks/*.ipynb; do \
	  echo "notebooks: $$nb"; \
	  env $(NOTEBOOK_ENV) $(PY) -m nbconvert --to notebook --execute --ExecutePreprocessor.timeout=3600 \
	    --ExecutePreprocessor.kernel_name=python3 --output-dir build/notebooks "$$nb" || exit 1; \
	done

grammars: setup
	$(PY) scripts/render_grammars.py --out grammars

conformance: setup
	$(PY) scripts/conformance.py $(foreach d,draft2020-12 draft2019-09 draft7 draft6 draft4,--suite ../shared/data/json-schema-test-suite/tests/$(d)) --out docs/conformance.md

# MaskBench (guidance-ai/jsonschemabench, not part of this repository): make maskbench JSB_DIR=/path/to/clone
# [MASKBENCH_ARGS="--limit 40"]; prints the per-split table (tooldecode strict mode, llama.cpp and xgrammar anchors)
maskbench: setup
	@test -n "$(JSB_DIR)" || { echo "maskbench: set JSB_DIR to a clone of guidance-ai/jsonschemabench"; exit 2; }
	$(PY) scripts/maskbench.py --jsb $(JSB_DIR) $(MASKBENCH_ARGS)

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

experiments: setup
	$(PY) -m tooldecode models fetch --all
	@for s in experiments/e*.toml; do $(PY) -m tooldecode run $$s --report || exit 1; done

# the model organisms (docs/organisms.md): every recipe of experiments/organisms on BASE (resumable)
BASE ?= qwen2.5-coder-0.5b-instruct
organisms: setup
	$(PY) -m tooldecode models fetch $(BASE)
	@for r in experiments/organisms/*.toml; do $(PY) -m tooldecode organisms train $$r --base $(BASE) || exit 1; done

# every recipe trained and every organism evaluated in one call, under GPU_QUEUE_OUT (resumable); on a
# CUDA machine bfloat16 training and transformers + peft evaluation (docs/organisms.md); QUEUE_ARGS=--quick
# proves the same path small on the CPU
GPU_QUEUE_OUT ?= runs/gpu-queue
gpu-queue: setup
	$(PY) -m tooldecode models fetch $(BASE)
	$(PY) -m scripts.gpu_queue --out $(GPU_QUEUE_OUT) --base $(BASE) $(QUEUE_ARGS)

# the CPU queue of long jobs (experiments/queue.toml)
queue:
	@python3 -m scripts.jobqueue status

findings: setup
	$(PY) -m scripts.findings

# one combined report (summary.md, report.html) of every committed run, in runs/report (not committed: ~20 MB)
report: setup
	$(PY) -m tooldecode report $$(for d in runs/*/; do [ -f $$d/manifest.json ] && echo $$d; done) --out runs/report

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
