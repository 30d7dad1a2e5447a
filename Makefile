# Quick start: `make book` (build the website into _build/html) and `make test` (everything).
SHELL := /bin/bash
PY := .venv/bin/python
JB := .venv/bin/jupyter-book
STAMP := .venv/.installed
BUILD := _build/html
CHAPTERS := $(wildcard chapters/*.ipynb)

.PHONY: help venv lab chromium book test lint unit nbval unit-portable nbval-portable browser \
	chapters print-pdf assignments student clean test-gpu

help:
	@echo "make lab      open the chapters in JupyterLab (creates .venv and installs first)"
	@echo "make book     build the website into $(BUILD) (creates .venv and installs first)"
	@echo "make test     import layers, unit tests (here and as on another processor), nbval as on"
	@echo "              another processor and the -W book build (every chapter executed) side by side,"
	@echo "              one core each, PDF, browser tests"
	@echo "make nbval    every chapter through nbval on this processor (the quick loop)"
	@echo "make pdf      the whole book as one PDF, $(BUILD)/multihead-attention-book.pdf"
	@echo "make assignments  nbgrader course in course/: source, release (see teaching.md)"
	@echo "make student  the released notebooks of every chapter, gathered in student/"
	@echo "make test-gpu the GPU suite (tests/gpu, needs CUDA) and the GPU benchmark"

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

venv: $(STAMP)

# The notebooks, live, in JupyterLab (jupyterlab-myst renders the book's MyST markup).
# JupyterLab refuses to run as root without --allow-root.
lab: venv
	.venv/bin/jupyter lab --ServerApp.root_dir=chapters $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# Debian's Chromium for the browser tests: installed when missing and we are root.
chromium:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium; \
	else echo "Chromium is missing: run 'sudo apt-get install -y chromium' for the browser tests."; fi

# Every notebook executed; warnings are errors. (PIN_BOOK: see `chapters`.)
book: venv
	$(JB) clean . >/dev/null
	$(PIN_BOOK) $(JB) build . --warningiserror --nitpick --keep-going

# The book build executes every chapter here with warnings as errors (a failing check cell fails
# it), so the chapters run once here (book) and once as on another processor (nbval-portable,
# which also compares the stored outputs); `make nbval` is the quick loop for one machine.
# `chapters` runs those two side by side; the PDF is then printed from that build.
test: lint unit unit-portable chapters print-pdf browser

# The chapters' two runs side by side, each on a core of its own (taskset): a chapter runs in
# one kernel, which keeps one core busy, so one after the other they left the second core idle.
# Pinned to one core, torch uses one thread, and neither run disturbs the timings the other's
# chapters compare side by side (chapters 6, 9, 11). With fewer than two cores: one after the other.
CORES := $(shell python3 -c "import os; print(*sorted(os.sched_getaffinity(0))[:2])" 2>/dev/null)
chapters: venv
ifeq ($(words $(CORES)),2)
	$(MAKE) --no-print-directory -j2 --output-sync=target book nbval-portable \
	    PIN_BOOK="taskset -c $(word 1,$(CORES))" PIN_NBVAL="taskset -c $(word 2,$(CORES))"
else
	$(MAKE) --no-print-directory book nbval-portable
endif

# The whole book as one PDF, printed offline by Chromium from the built website into
# $(BUILD)/multihead-attention-book.pdf (contents page, figures, maths; explorers as a still).
.PHONY: pdf
pdf: book
	$(MAKE) --no-print-directory print-pdf

# The PDF of the website as it was last built.
print-pdf: chromium
	$(PY) -m mha_lib.book.pdf $(BUILD)

# The layers of mha_lib (CONTRIBUTING.md), as contracts import-linter checks (.importlinter).
lint: venv
	.venv/bin/lint-imports

# Two workers, one thread each (the machine has 2 cores); a test file stays on one worker, so a
# module's trained models are trained once. The chapters run one at a time: some time what they
# compare side by side.
XDIST = -n 2 --dist loadfile
unit: venv
	OMP_NUM_THREADS=1 $(PY) -m pytest tests -m "not browser" -q $(XDIST)

# Every chapter runs top to bottom in a fresh kernel; its assertions carry the claims. Stored
# outputs are compared only in cells tagged nbval-check-output (the same on every CPU).
nbval: venv
	$(PY) -m pytest --nbval-lax $(CHAPTERS) --nbval-current-env \
	    --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:randomly -q

# The portability pass: the same tests as if on another processor, whose kernels give other
# floats (a run is deterministic on one machine, never bit-identical across machines). MKL's processor-independent code path makes every MKL result differ in its last
# bits from this machine's, so a test that compares with floats recorded here fails; PyTorch's
# generic kernels (no AVX) give every chapter other floats to print and assert. The tests marked
# plumbing (the nbgrader course loop, whose grades come from checkers tested in both passes)
# and training (tests/why: the why experiments retrained at reduced steps, whose claims stand on
# eight shipped seeds) run in the first pass only.
unit-portable: venv
	MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1 $(PY) -m pytest tests -m "not browser and not plumbing and not training" -q $(XDIST)

nbval-portable: venv
	ATEN_CPU_CAPABILITY=default $(PIN_NBVAL) $(PY) -m pytest --nbval-lax $(CHAPTERS) --nbval-current-env \
	    --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:randomly -q

# Two workers; the tests of one xdist_group (a module whose tests share one pass over the
# chapters) stay on one worker, the others are handed out one at a time.
browser: venv chromium
	$(PY) -m pytest tests/browser -m browser -q -n 2 --dist loadgroup

# The GPU suite and the GPU benchmark, on a machine with a CUDA GPU (CI has none: there the
# suite is skipped and tests/core/test_device_guard.py checks the devices on the CPU). PY may
# name another Python whose torch has CUDA: `make test-gpu PY=python3`.
test-gpu:
	$(PY) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'make test-gpu: no CUDA GPU here (torch.cuda.is_available() is False)')"
	$(PY) -m pytest tests/gpu -q -p no:randomly
	$(PY) -m mha_lib.bench gpu

# nbgrader course (git-ignored): course/source (instructor), course/release (students).
assignments: venv
	$(PY) -m mha_lib.book.assignments build chapters course

# The released notebooks in one folder, for students without nbgrader (git-ignored).
student: venv
	$(PY) -m mha_lib.book.student chapters student

clean:
	rm -rf _build student course .pytest_cache .hypothesis
