PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-slow lint bench clean

$(STAMP): pyproject.toml setup.py hermes_es/projections/_hermes_fts5.c hermes_es/projections/_hermes_text.c
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,lint]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m hermes_es.demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" -p no:cacheprovider

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow -p no:cacheprovider

lint: $(STAMP)
	$(BIN)/ruff check hermes_es tests bench
	$(BIN)/ruff format --check hermes_es tests bench
	$(BIN)/mypy hermes_es

bench: $(STAMP)
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) build *.egg-info hermes_es/projections/_hermes_fts5*.so
