# The two commands a newcomer needs (see README.md):
#   make book   set up, export the package, execute the notebooks, build the HTML book
#   make test   set up, then every check CI runs
# Everything installs itself into .venv with the exact pins of constraints.txt.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HTML   := book/_build/html/index.html

.PHONY: book test install export check-export lint test-unit test-notebooks book-check test-browser bench repo-url clean

book: $(STAMP) export
	$(BIN)/python book/build_assets.py
	$(BIN)/jupyter-book build book --keep-going -W
	@echo "The book: $(abspath $(HTML))"

test: $(STAMP) check-export lint test-unit test-notebooks book-check test-browser
	@echo "make test: all checks passed"

install: $(STAMP)

# Torch is pinned in constraints.txt to the CPU build; a bare `pip install torch` would pull a CUDA build.
$(STAMP): pyproject.toml constraints.txt book/translator/package-lock.json
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3"
	npm ci --prefix book/translator --ignore-scripts --no-audit --no-fund  # the translator page
	touch $(STAMP)

export: $(STAMP)
	$(BIN)/nbdev-export

# The package is generated from the notebooks: re-exporting must not change a byte of it.
check-export: $(STAMP)
	@rm -rf build/export-check && mkdir -p build/export-check && cp -r annotated build/export-check/
	$(BIN)/nbdev-export
	@diff -r -x __pycache__ build/export-check/annotated annotated \
	  || (echo "annotated/ differs from the notebooks: edit notebooks/, then run 'make export'"; exit 1)

lint: $(STAMP)
	$(BIN)/ruff check annotated tests benchmarks tools book/build_assets.py
	$(BIN)/ruff format --check tests benchmarks tools book/build_assets.py

test-unit: $(STAMP)
	$(BIN)/pytest tests -m "not browser"

test-notebooks: $(STAMP)
	$(BIN)/pytest --nbval --nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg notebooks

# nbval has just re-executed every notebook and matched its stored outputs, so the check build
# renders those outputs without executing them again; warnings are errors.
book-check: $(STAMP)
	$(BIN)/python book/build_assets.py
	$(BIN)/jupyter-book build book --keep-going -W --config book/_config_noexec.yml

test-browser: $(STAMP)
	$(BIN)/pytest tests -m browser

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_attention.py
	$(BIN)/python benchmarks/bench_loss.py

# Point every link (book launch buttons, notebook install cells, Colab/Binder links) at a fork:
#   make repo-url URL=https://github.com/you/annotated
repo-url: $(STAMP)
	$(BIN)/python tools/repo_url.py --set "$(URL)"

clean:
	rm -rf book/_build build artifacts
