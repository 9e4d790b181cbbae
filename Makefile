# kuota: two commands set everything up on a fresh machine.
#   make demo   creates .venv, installs kuota, runs the simulator on the sample org (SQLite, simulated cluster)
#   make test   creates .venv, installs kuota with its dev tools, builds the control plane of testing/cluster, runs
#               ruff, mypy, the layering contracts and pytest (end-to-end tests on that control plane included, run
#               beside the rest)
#   make cluster  starts that control plane with kwok GPU nodes and prints the KUBECONFIG to export
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck contracts pytest scenarios bench clean cluster cluster-build try-kuota lock

# kuota-cluster: etcd, kube-apiserver, controller-manager, scheduler, kwok, kubectl and helm, compiled here from
# Kubernetes' own Go modules, once per source hash, into ~/.cache/kuota-cluster (the first build takes a while).
cluster-build:
	@GOTOOLCHAIN=local testing/cluster/build.sh >/dev/null

CLUSTER_DIR ?= .cluster
NODES ?= 8
# A100 nodes with the label and taint config/deploy/configmap.yaml's flavor selects and tolerates.
NODE_ARGS ?= --node-labels=nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB,nvidia.com/gpu.count=8 \
	--node-taints=nvidia.com/gpu=present:NoSchedule
# Foreground until Ctrl-C; a second start on the same folder reuses its ports, PKI and etcd data.
cluster: cluster-build
	@GOTOOLCHAIN=local $$(testing/cluster/build.sh) up --dir $(CLUSTER_DIR) --nodes $(NODES) $(NODE_ARGS) \
		$(CLUSTER_ARGS)

# kuota on this machine against `make cluster` (in another terminal), installed from config/deploy.
try-kuota: $(STAMP) cluster-build
	CLUSTER_DIR=$(CLUSTER_DIR) testing/try-kuota.sh

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# With CI=true the exact versions of requirements/ci.txt are installed (inside pyproject's ranges), so CI runs
# what was tested here; otherwise pip picks the newest versions the ranges allow.
LOCK := requirements/ci.txt
$(STAMP): pyproject.toml $(LOCK) | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]' $(if $(filter true,$(CI)),-c $(LOCK))
	touch $(STAMP)

# Refresh the lock from what this .venv has (after `pip install -U -e '.[dev]'` and a green `make test`).
lock: $(STAMP)
	@mkdir -p requirements
	@{ echo "# Exact versions CI installs (make lock writes this from a tested .venv; pyproject.toml has the ranges)."; \
	  $(BIN)/python -m pip freeze --exclude-editable | grep -v '^kuota' ; } > $(LOCK)

DEMO_OUT := out/demo

# The main job on the embedded default: the sample organisation, three days of the ITP trace, the simulated
# cluster and a SQLite ledger; then a usage report read back from that ledger.
demo: $(STAMP)
	@mkdir -p $(DEMO_OUT)
	@rm -f $(DEMO_OUT)/ledger.db
	$(BIN)/kuota validate config/samples/org-quota.yaml
	$(BIN)/kuota simulate --config config/samples/org-quota.yaml --trace config/samples/itp-slice.csv \
		--format csv --report $(DEMO_OUT) --database-url sqlite+aiosqlite:///$(DEMO_OUT)/ledger.db
	$(BIN)/kuota usage --database-url sqlite+aiosqlite:///$(DEMO_OUT)/ledger.db \
		--from 2021-03-04 --to 2021-03-25 --by team --resource nvidia.com/gpu
	@echo
	@echo "Report: $(DEMO_OUT)/report.html (opens offline in any browser); ledger: $(DEMO_OUT)/ledger.db"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Every package strict, bench/ too. tests/ stays out: its fakes are duck-typed on purpose (SimpleNamespace options,
# stand-ins assigned over the Kubernetes client's API objects, journals answering any name), and the end-to-end
# tests hand kubernetes_asyncio plain dicts where its signatures name model classes. The cross-layer fits those
# tests relied on (the Runtime and serve's options against what admin and the components declare) are stated in
# kuota/commands/serve.py, where mypy checks them.
PACKAGES := quota admission importers workloads webhooks clusters queues accounting admin sim kuota migrations bench
typecheck: $(STAMP)
	$(BIN)/mypy --strict $(PACKAGES)

contracts: $(STAMP)
	$(BIN)/lint-imports

# Two pytest processes side by side: the end-to-end suite (tests/e2e) mostly waits on the control plane and on
# real timers (grace periods, readiness timeouts), about a third of a core busy, while the rest is CPU-bound; run
# one after the other they left most of the two cores idle. The end-to-end output goes to E2E_LOG and is printed
# when both are done; either failing fails the target.
E2E_LOG := out/pytest-e2e.log
pytest: $(STAMP)
	@mkdir -p $(dir $(E2E_LOG))
	@$(BIN)/pytest -q tests/e2e >$(E2E_LOG) 2>&1 & e2e=$$!; \
	$(BIN)/pytest -q --ignore=tests/e2e; rest=$$?; \
	wait $$e2e; e2e_status=$$?; \
	echo "--- tests/e2e (its output, also in $(E2E_LOG)):"; cat $(E2E_LOG); \
	echo "--- pytest: tests/e2e exit $$e2e_status, the rest exit $$rest"; \
	test $$rest -eq 0 && test $$e2e_status -eq 0

scenarios: $(STAMP)
	$(BIN)/python ../shared/spec/check_scenarios.py ../shared/spec/examples --kuota $(BIN)/kuota --label examples
	$(BIN)/python ../shared/spec/check_scenarios.py tests/scenarios --kuota $(BIN)/kuota --label tests/scenarios

test: lint typecheck contracts cluster-build pytest

bench: $(STAMP)
	$(BIN)/python bench/engine.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache $(CLUSTER_DIR)
