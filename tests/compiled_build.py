"""The compiled build (tokenizer, scorer, snippets, hit texts) that some tests need."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hermes_es.projections import fts


def require_compiled_build() -> Path:
    """The compiled library: a failure where it could have been built and is missing (run
    `make install`), a skip on a machine with no C compiler or ``sqlite3ext.h``."""
    path = fts.compiled_library()
    if path is None:
        if shutil.which("cc") is not None and Path("/usr/include/sqlite3ext.h").is_file():
            pytest.fail("the compiled tokenizer is not built: run `make install`")
        pytest.skip("no C compiler or sqlite3ext.h: the compiled build cannot be made here")
    return path
