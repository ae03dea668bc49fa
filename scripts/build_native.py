"""hatchling's build hook for the package's one C extension, `indexer/chaindata/_native_roots.c`
(the root checks in one pass; BENCHMARKS.md, "Root checks in C"), with the parts it includes from
`indexer/chaindata/native_roots/`: compiled as one unit by the interpreter's own compiler
command (sysconfig's LDSHARED, as setuptools would), into the wheel, or for an editable install
next to its source. Where no compiler works, the wheel is built without it
and says so on stderr: `roots.check_block` then does all its work in Python, slower and with
the same verdicts. INDEXER_NATIVE=0 builds without it on purpose (the tests of that fallback).
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

SOURCE = "indexer/chaindata/_native_roots.c"


def compile_extension(source: Path, target: Path) -> None:
    """Compiles `source` into the extension module `target`; CalledProcessError or OSError if it
    cannot."""
    command = [*shlex.split(sysconfig.get_config_var("LDSHARED") or "cc -shared"),
               *shlex.split(sysconfig.get_config_var("CCSHARED") or "-fPIC"), "-O2",
               "-I", sysconfig.get_paths()["include"], str(source), "-o", str(target)]
    subprocess.run(command, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


class NativeRootsHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if os.environ.get("INDEXER_NATIVE") == "0":
            return
        source = Path(self.root) / SOURCE
        name = "_native_roots" + sysconfig.get_config_var("EXT_SUFFIX")
        if version == "editable":
            target = source.with_name(name)  # the editable install imports from the tree
        else:
            target = Path(tempfile.mkdtemp(prefix="skiplock-native-")) / name
        try:
            compile_extension(source, target)
        except (OSError, subprocess.CalledProcessError) as exc:
            output = getattr(exc, "stdout", None) or str(exc)
            print(f"build_native: {SOURCE} not compiled, the root checks will run in Python only:\n{output}",
                  file=sys.stderr)
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if version != "editable":
            build_data["force_include"][str(target)] = f"indexer/chaindata/{name}"
