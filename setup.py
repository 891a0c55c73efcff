"""The optional compiled lane (rillet/_speedups, chosen at run time by rillet.lane); everything else about
the project is declared in pyproject.toml.

``pip install .`` / ``pip install -e .`` compile the Cython twins where Cython and a C compiler are present.
Where they are not, the build goes on without them and says so in ONE line; the installed server then runs
the pure-Python lane (``rillet-server --version`` tells which).
"""
import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, CompileError, ExecError, LinkError, PlatformError

# (rillet/_speedups/_ctext.pxd: C helpers _cparser and _cserver cimport; cythonize finds it by package path)
SOURCES = {
    "rillet._speedups._cparser": "rillet/_speedups/_cparser.pyx",
    "rillet._speedups._cserver": "rillet/_speedups/_cserver.pyx",
    "rillet._speedups._cstore": "rillet/_speedups/_cstore.pyx",
    "rillet._speedups._cjs": "rillet/_speedups/_cjs.pyx",
    "rillet._speedups._ccluster": "rillet/_speedups/_ccluster.pyx",
    "rillet._speedups._cdeliver": "rillet/_speedups/_cdeliver.pyx",
    "rillet._speedups._cmqtt": "rillet/_speedups/_cmqtt.pyx",
}
# C libraries an extension links with (zlib: the file store's CRC-32, the library Python's zlib module uses)
LIBRARIES = {"rillet._speedups._cstore": ["z"]}

_noted = False


def _note(why: str) -> None:
    global _noted
    if not _noted:
        _noted = True
        print(f"rillet: compiled lane NOT built ({why}); the pure-Python lane will run", file=sys.stderr,
              flush=True)


def _extensions():
    try:
        from Cython.Build import cythonize
    except ImportError as e:
        _note(f"Cython is not installed: {e}")
        return []
    exts = [Extension(name, [src], libraries=LIBRARIES.get(name, [])) for name, src in SOURCES.items()]
    try:
        return cythonize(exts, build_dir="build/cython", quiet=True,
                         compiler_directives={"language_level": 3})
    except Exception as e:  # a Cython that cannot translate the sources: still a working (pure) install
        _note(f"Cython failed: {type(e).__name__}: {e}")
        return []


class OptionalBuildExt(build_ext):
    """build_ext that turns a missing or failing C compiler into one log line instead of a failed install."""

    _errors = (CCompilerError, CompileError, ExecError, LinkError, PlatformError, OSError)

    def run(self):
        try:
            super().run()
        except self._errors as e:
            _note(f"no working C compiler: {e}")

    def copy_file(self, infile, outfile, *args, **kwargs):
        """In-place builds (``pip install -e .``) replace an extension atomically (a new file renamed over the
        old one): the default copy rewrites the file in place, which crashes every running process (servers,
        test runs) that has the old one loaded."""
        if not str(outfile).endswith((".so", ".pyd")) or self.dry_run:
            return super().copy_file(infile, outfile, *args, **kwargs)
        tmp = f"{outfile}.{os.getpid()}.tmp"
        shutil.copyfile(infile, tmp)
        shutil.copymode(infile, tmp)
        os.replace(tmp, outfile)
        return outfile, 1

    def build_extension(self, ext):
        if _noted:
            return  # one failure is enough: the lane needs every extension
        try:
            super().build_extension(ext)
        except self._errors as e:
            _note(f"compiling {ext.name} failed: {e}")


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
