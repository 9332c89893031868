"""Build the Parquet op library against the installed TensorFlow and pyarrow.

The library is compiled once per combination of source, TensorFlow, pyarrow, Python
and compiler, into ``recsys_dist/ops/_build/`` (or ``$RECSYS_DIST_OPS_DIR``), under a
name that carries a hash of that combination: a version change of either package
builds a new library instead of loading one built for another. Every flag and library
name comes from ``tf.sysconfig`` and ``pyarrow.get_include()`` /
``pyarrow.get_library_dirs()``.

Several processes of a local cluster may start at once: a file lock makes one build
and the others wait for it; the library appears under its final name only when
complete (write to a temporary name, then rename).

``python -m recsys_dist.ops.build`` builds it ahead of time (``make`` does so on install).
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import glob
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

from recsys_dist.errors import RecsysError

#: The op library's C++ sources: the Parquet reader, the fused feature transforms, the
#: dynamic tables' admission, and the native threads that end a command on a signal and
#: watch a cluster's tasks while Python cannot run.
SOURCES = [
    os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    for name in (
        "parquet_read_rows.cc",
        "feature_transforms.cc",
        "dynamic_admission.cc",
        "dynamic_rows.cc",
        "dynamic_routing.cc",
        "exit_on_signals.cc",
        "watch_tasks.cc",
    )
]
#: Headers the sources include (part of the build key, not compiled on their own).
HEADERS = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "mix64.h")]
NAME = "parquet_ops"
COMPILER_ADVICE = (
    "recsys_dist compiles its Parquet reader (a TensorFlow op on Arrow C++) on first use "
    "and needs a C++20 compiler for that: g++ 10 or newer (Debian/Ubuntu: "
    "`apt-get install g++`; RHEL/Fedora: `dnf install gcc-c++`), or set CXX to another "
    "C++20 compiler such as clang++ 12 or newer"
)

log = logging.getLogger(__name__)


class OpBuildError(RecsysError):
    """The Parquet op library could not be built."""

    exit_code = 2


def _compiler() -> str:
    wanted = os.environ.get("CXX") or "g++"
    found = shutil.which(wanted)
    if found is None:
        raise OpBuildError(f"no C++ compiler: {wanted!r} is not on PATH. {COMPILER_ADVICE}")
    return found


def _compiler_version(cxx: str) -> str:
    try:
        return subprocess.run(
            [cxx, "--version"], capture_output=True, text=True, timeout=30
        ).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError) as exc:
        raise OpBuildError(f"cannot run the C++ compiler {cxx}: {exc}. {COMPILER_ADVICE}") from None


def _shared_library(directory: str, stem: str) -> str:
    """The versioned file name of ``lib<stem>.so.NNNN`` in ``directory`` (never a
    hard-coded version)."""
    names = sorted(
        os.path.basename(p) for p in glob.glob(os.path.join(directory, f"lib{stem}.so*"))
    )
    if not names:
        raise OpBuildError(
            f"pyarrow ships no lib{stem}.so in {directory}; reinstall pyarrow "
            "(pip install --force-reinstall 'pyarrow>=24')"
        )
    # The shortest versioned name (libarrow.so.2500) is the one the loader wants.
    return min(names, key=len)


def _flags() -> tuple[list[str], list[str]]:
    """The compile flags and the link flags for the installed TensorFlow and pyarrow."""
    import pyarrow
    import tensorflow as tf

    arrow_dirs = pyarrow.get_library_dirs()
    arrow_dir = next(
        (d for d in arrow_dirs if glob.glob(os.path.join(d, "libarrow.so*"))), arrow_dirs[0]
    )
    tf_flags = [f for f in tf.sysconfig.get_compile_flags() if not f.startswith("--std")]
    tf_link = tf.sysconfig.get_link_flags()
    tf_dirs = [f[2:] for f in tf_link if f.startswith("-L")]
    libs = [
        f"-l:{_shared_library(arrow_dir, 'arrow')}",
        f"-l:{_shared_library(arrow_dir, 'parquet')}",
        f"-l:{_shared_library(arrow_dir, 'arrow_compute')}",  # Take, for strided reads
    ]
    if glob.glob(os.path.join(arrow_dir, "libarrow_s3.so*")):  # pyarrow >= 26 split S3 out
        libs += [
            "-Wl,--no-as-needed",
            f"-l:{_shared_library(arrow_dir, 'arrow_s3')}",
            "-Wl,--as-needed",
        ]
    compile_flags = ["-O2", "-fPIC", "-std=c++20", "-w", *tf_flags, f"-I{pyarrow.get_include()}"]
    link_flags = (
        tf_link + [f"-L{arrow_dir}"] + libs + [f"-Wl,-rpath,{d}" for d in tf_dirs + [arrow_dir]]
    )
    return compile_flags, link_flags


def compile_commands(
    cxx: str, sources: list[str], output: str, objects_dir: str
) -> tuple[list[list[str]], list[str]]:
    """One compiler command per source (an object file each, so they can run side by
    side) and the command that links the objects into ``output``."""
    compile_flags, link_flags = _flags()
    objects = [
        os.path.join(objects_dir, f"{index}-{os.path.basename(source)}.o")
        for index, source in enumerate(sources)
    ]
    compiles = [
        [cxx, *compile_flags, "-c", source, "-o", obj] for source, obj in zip(sources, objects)
    ]
    link = [cxx, "-shared", "-fPIC", *objects, "-o", output, *link_flags]
    return compiles, link


def _run_all(commands: list[list[str]], jobs: int) -> tuple[list[str], int, str] | None:
    """Runs the commands, ``jobs`` at a time, each starting as soon as a slot is free; the
    first failure's (in the order given) command, exit code and output, or None when all
    succeed."""

    def run(command: list[str]) -> tuple[list[str], int, str]:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return command, done.returncode, done.stdout

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(run, commands))
    return next((result for result in results if result[1] != 0), None)


def build_key(cxx_version: str) -> str:
    """A hash of everything the library depends on."""
    import pyarrow
    import tensorflow as tf

    sources = []
    for path in SOURCES + HEADERS:
        with open(path, "rb") as handle:
            sources.append(handle.read())
    parts = [
        *sources,
        tf.__version__.encode(),
        tf.sysconfig.get_lib().encode(),
        pyarrow.__version__.encode(),
        pyarrow.get_include().encode(),
        sysconfig.get_config_var("SOABI").encode(),
        cxx_version.encode(),
    ]
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


def build_dir() -> str:
    return os.environ.get("RECSYS_DIST_OPS_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "_build"
    )


def library_path(quiet: bool = True) -> str:
    """The built library for the installed packages, building it first if needed.

    Raises:
      OpBuildError: no compiler, or the compile failed (the message has its output).
    """
    cxx = _compiler()
    key = build_key(_compiler_version(cxx))
    directory = build_dir()
    target = os.path.join(directory, f"{NAME}-{key}.so")
    if os.path.exists(target):
        return target
    try:
        os.makedirs(directory, exist_ok=True)
        lock = open(os.path.join(directory, ".lock"), "w")
    except OSError as exc:
        raise OpBuildError(
            f"cannot write the Parquet op library to {directory}: "
            f"{exc.strerror}; set RECSYS_DIST_OPS_DIR to a writable "
            "directory"
        ) from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(target):  # another process built it while we waited
            return target
        temporary = f"{target}.{os.getpid()}.tmp"
        if not quiet:
            log.info(
                "recsys_dist: building the Parquet op library (%s) for the installed "
                "TensorFlow and pyarrow, about a minute ...",
                os.path.basename(target),
            )
        began = time.monotonic()
        with tempfile.TemporaryDirectory(dir=directory, prefix=".objects-") as objects_dir:
            compiles, link = compile_commands(cxx, SOURCES, temporary, objects_dir)
            failure = _run_all(compiles, jobs=os.cpu_count() or 1) or _run_all([link], jobs=1)
        if failure is not None:
            if os.path.exists(temporary):
                os.remove(temporary)
            command, code, output = failure
            tail = "\n".join(output.strip().splitlines()[-25:])
            raise OpBuildError(
                f"compiling {', '.join(SOURCES)} failed (exit {code}):\n{' '.join(command)}\n{tail}"
            )
        os.replace(temporary, target)
        for old in glob.glob(os.path.join(directory, f"{NAME}-*.so")):
            if old != target:
                try:
                    os.remove(old)
                except OSError:
                    pass
        if not quiet:
            log.info("recsys_dist: built in %.0f s", time.monotonic() - began)
    return target


def main() -> int:
    logging.basicConfig(stream=sys.stderr, format="%(message)s", level=logging.INFO)
    try:
        path = library_path(quiet=False)
    except OpBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
