# kuota: two commands set everything up on a fresh machine.
#   make demo   creates .venv, installs kuota, runs the simulator on the sample org (SQLite, simulated cluster)
#   make test   creates .venv, installs kuota with its dev tools, runs ruff, mypy, the layering contracts and pytest
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck contracts pytest scenarios bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/kuota demo

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy quota admission

contracts: $(STAMP)
	$(BIN)/lint-imports

pytest: $(STAMP)
	$(BIN)/pytest -q

scenarios: $(STAMP)
	$(BIN)/python ../shared/spec/check_scenarios.py ../shared/spec/examples --kuota $(BIN)/kuota --label examples
	$(BIN)/python ../shared/spec/check_scenarios.py tests/scenarios --kuota $(BIN)/kuota --label tests/scenarios

test: lint typecheck contracts pytest

bench: $(STAMP)
	$(BIN)/python bench/engine.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
