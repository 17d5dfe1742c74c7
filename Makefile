# demofactory: `make demo` builds a small dataset, `make test` runs the suite.
# Both start from a clean clone on Debian with Python 3.11 (run as root, or with sudo
# available for the GL libraries).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Offscreen rendering without a GPU: Mesa's EGL (software) by default; osmesa also works.
# The default is set by the factory package itself (factory/_gl.py); `MUJOCO_GL=osmesa make ...`
# still chooses another.

GL_PACKAGES := libegl1 libegl-mesa0 libgl1-mesa-dri
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install demo test lint schema bench check-clients clean

install: $(VENV)/.installed

$(VENV)/.gl-libs:
	@missing=""; for p in $(GL_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing GL libraries for offscreen rendering:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@mkdir -p $(VENV) && touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.gl-libs
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned: this takes the CPU wheel; an unpinned torch pulls a CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

demo: install
	$(BIN)/factory run scene_specs/lift.yaml --out out/lift-demo --attempts 10
	$(BIN)/factory preview out/lift-demo

test: install
	$(BIN)/python -m pytest -q tests

lint: install
	$(BIN)/ruff check .

# scene_specs/schema.json and docs/spec_reference.md's tables, from the spec models' descriptions.
schema: install
	$(BIN)/factory spec-help --write

bench: install
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# The exports read by the real clients (GR00T N1.5 and N1.6's data loaders, lerobot 0.6.1's
# edit tools), each in a throwaway venv under $(CLIENT_VENVS) made when missing (docs/exports.md).
# Run before stopping work on an exporter. FFmpeg's libraries: for torchcodec.
CLIENT_VENVS ?= /work/venvs
check-clients: install
	@dpkg -s ffmpeg >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq ffmpeg; }
	CLIENT_VENVS=$(CLIENT_VENVS) $(BIN)/python benchmarks/check_clients.py

clean:
	rm -rf out .pytest_cache
