"""Build step for the compiled part of the package: the ``hermes`` FTS5 tokenizer as an SQLite
loadable extension (``hermes_es/projections/_hermes_fts5.c``; everything else is in
pyproject.toml). It needs a C compiler and SQLite's ``sqlite3ext.h`` (Debian: libsqlite3-dev);
without them the install goes on and the Python tokenizer is used (``hermes doctor`` says so).
"""

import os
import shutil
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildExt(build_ext):
    """Put the built library in place by renaming a copy over it: a running process that has
    the old one loaded keeps its own file (writing into that file could crash it)."""

    def copy_file(self, infile: str, outfile: str, *args: Any, **kwargs: Any) -> Any:
        if not str(outfile).endswith(".so") or os.path.isdir(outfile):
            return super().copy_file(infile, outfile, *args, **kwargs)
        tmp = f"{outfile}.{os.getpid()}.tmp"
        shutil.copy2(infile, tmp)
        os.replace(tmp, outfile)
        return outfile, 1


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        Extension(
            "hermes_es.projections._hermes_fts5",
            sources=[
                "hermes_es/projections/_hermes_fts5.c",
                "hermes_es/projections/_hermes_text.c",
            ],
            extra_compile_args=["-O2", "-fvisibility=hidden"],
            # Stay mapped after the last connection that loaded it closes: an apsw tokenizer
            # object can outlive its connection and still call xDelete.
            extra_link_args=["-Wl,-z,nodelete"],
            optional=True,
        )
    ],
)
