# Two commands work on a fresh machine: `make demo` and `make test`.
# Both create .venv when it is missing and install the project into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint docs unit demo bench test-extended clean pin

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# constraints-dev.txt pins every tool and library version, so a new ruff or mypy release cannot
# turn CI red without a change here (refresh with `make pin`).
$(STAMP): $(BIN)/python pyproject.toml constraints-dev.txt
	$(BIN)/python -m pip install --quiet -c constraints-dev.txt -e '.[dev,analytics]'
	# pip compiles what it installs, but not an editable project: compile it here, so the CLI
	# starts from cached bytecode even where PYTHONDONTWRITEBYTECODE=1 (issue 18's start-up).
	$(BIN)/python -m compileall -q $(PACKAGES)
	touch $(STAMP)

pin: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,analytics]'
	$(BIN)/python -m pip freeze --exclude-editable > constraints-dev.txt

PACKAGES := eventstore engine projections replay penguin
SOURCES := $(PACKAGES) tests bench

lint: $(STAMP)
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/mypy
	$(BIN)/lint-imports

# The documentation site (mkdocs.yml, docs/) into build/site; --strict turns every broken link,
# missing anchor or page left out of the nav into a failure.  tests/docs runs the pages' examples.
docs: $(STAMP)
	# Not --quiet: it hides the warnings that --strict counts, and the build then passes anyway.
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Coverage of the five packages, measured in this process (tests that start a CLI or server
# subprocess count only for what they run in-process) and printed per package; docs/coverage.md
# says which lines stay uncovered and why.
unit: $(STAMP)
	$(BIN)/python -m pytest -q --cov --cov-report=
	$(BIN)/python tests/support/coverage_report.py

test: lint docs unit

test-extended: $(STAMP)
	PENGUIN_EXTENDED=1 $(BIN)/python -m pytest -q

demo: $(STAMP)
	$(BIN)/penguin --init demo

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build/site
