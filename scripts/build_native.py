"""hatchling's build hook for the package's C extensions, each compiled as one unit with the parts it
includes, by the interpreter's own compiler command (sysconfig's LDSHARED, as setuptools would),
into the wheel, or for an editable install next to its source:
- `indexer/chaindata/_native_roots.c`, the root checks in one pass (BENCHMARKS.md, "Root checks in
  C"), its parts in `native_roots/`;
- `indexer/chaindata/_native_rows.c`, rows.py's COPY lines (BENCHMARKS.md, "Rows encoded in C"),
  its parts in `native_rows/`;
- `indexer/chaindata/_native_copy.c`, those lines as a binary COPY (BENCHMARKS.md, "Binary COPY,
  taken");
each with `native_shared/`. An extension no compiler could build is left out of the wheel, which
says so on stderr: the Python it stands in front of (`roots.check_block`, rows.py, store.py's
text COPY) then does all the work, slower and with the same results. INDEXER_NATIVE=0 builds
without any on purpose (the tests of that fallback).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# Each extension's source, and what runs without it.
SOURCES = {
    "indexer/chaindata/_native_roots.c": "the root checks will run in Python only",
    "indexer/chaindata/_native_rows.c": "the rows will be encoded in Python only",
    "indexer/chaindata/_native_copy.c": "every COPY will be text, and the token transfers decoded in SQL",
}


def compile_extension(source: Path, target: Path) -> None:
    """Compiles `source` into the extension module `target`; CalledProcessError or OSError if it
    cannot."""
    command = [*shlex.split(sysconfig.get_config_var("LDSHARED") or "cc -shared"),
               *shlex.split(sysconfig.get_config_var("CCSHARED") or "-fPIC"), "-O2",
               "-I", sysconfig.get_paths()["include"], str(source), "-o", str(target)]
    subprocess.run(command, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


class NativeHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if os.environ.get("INDEXER_NATIVE") == "0":
            return
        # The editable install imports from the tree; a wheel takes the files from a scratch folder.
        scratch = None if version == "editable" else Path(tempfile.mkdtemp(prefix="skiplock-native-"))
        for relative, without in SOURCES.items():
            source = Path(self.root) / relative
            name = source.stem + sysconfig.get_config_var("EXT_SUFFIX")
            target = source.with_name(name) if scratch is None else scratch / name
            try:
                compile_extension(source, target)
            except (OSError, subprocess.CalledProcessError) as exc:
                output = getattr(exc, "stdout", None) or str(exc)
                print(f"build_native: {relative} not compiled, {without}:\n{output}", file=sys.stderr)
                continue
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            if scratch is not None:
                build_data["force_include"][str(target)] = f"indexer/chaindata/{name}"
