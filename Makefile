# One entry point. `make test` works on a fresh machine: it makes the virtual environment,
# installs the project, finds or builds the pinned Kubernetes test binaries, runs the linters,
# the generated-file drift checks and the whole test suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

.PHONY: all venv bins image lint drift test test-unit test-integration bench simulate demo crd clean

all: test

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dev,plot]'
	rm -f $(VENV)/.installed-*; touch $(STAMP)

venv: $(STAMP)

## Find (KUBEBUILDER_ASSETS, then the cache) or build etcd, kube-apiserver, kubectl, helm; Prometheus.
bins: venv
	$(PY) -m simulations.harness.binaries ensure

## The operator image (Containerfile) as an OCI archive in the cache, built with mmdebstrap +
## buildah (no Docker engine, no base-image registry); cached on its inputs; prints the digest.
image: venv
	$(PY) tools/image/build.py

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy gpucellpool autoscaler provisioner webhook simulations tests
	$(VENV)/bin/lint-imports

## Generated files must match their sources (CRD, chart CRD, API docs, dashboards).
drift: venv
	$(VENV)/bin/gpucellpool crd --check
	$(PY) -m gpucellpool.operator.dashboards --check
	$(PY) -m gpucellpool.operator.chartdocs --check

crd: venv
	$(VENV)/bin/gpucellpool crd

test-unit: venv
	$(PY) -m pytest tests/unit -q

test-integration: bins
	$(PY) -m pytest tests/integration tests/e2e -q

## The README's test command: everything CI checks. The set-up steps run two at a time (on a
## fresh machine the Go builds overlap the image's and the modules' downloads); warm, they take
## seconds.
test: venv
	$(MAKE) --no-print-directory -j2 --output-sync=line bins lint drift image
	$(PY) -m pytest tests -q -m 'not bench'

## Benchmarks: results are written to docs/benchmarks.md.
bench: bins
	$(PY) -m pytest tests -q -m bench

## The operator live on the twin: real apiservers and Prometheus, a compressed trace replayed in
## a few minutes with a progress line; report and PNG in demo-out/ (DEMO_ARGS=--minutes 5 ...).
demo: bins
	$(VENV)/bin/gpucellpool demo $(DEMO_ARGS)

## The main job on an embedded default: replay the bundled GPU trace through every policy.
simulate: venv
	$(VENV)/bin/gpucellpool simulate

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
