"""Build step for the compiled part of the package: the ``hermes`` FTS5 tokenizer as an SQLite
loadable extension (``hermes_es/projections/_hermes_fts5.c``; everything else is in
pyproject.toml). It needs a C compiler and SQLite's ``sqlite3ext.h`` (Debian: libsqlite3-dev);
without them the install goes on and the Python tokenizer is used (``hermes doctor`` says so).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "hermes_es.projections._hermes_fts5",
            sources=["hermes_es/projections/_hermes_fts5.c"],
            extra_compile_args=["-O2", "-fvisibility=hidden"],
            # Stay mapped after the last connection that loaded it closes: an apsw tokenizer
            # object can outlive its connection and still call xDelete.
            extra_link_args=["-Wl,-z,nodelete"],
            optional=True,
        )
    ]
)
