"""scripts/setup-venv and constraints.txt: the virtualenv the suite runs in holds the versions
constraints.txt names, and the script says what it does before each install.

The script's tests run it against a stand-in venv whose `python` records the pip command it was
given (and makes `bin/uv`, as installing uv would) and whose `uv` records its command (and makes
`bin/indexer`, as an install would), instead of installing anything."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "skiplock-indexer"


def pinned() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def needed(extras: set[str]) -> dict[str, str]:
    """Every distribution the package with `extras` needs, however indirectly, at its installed version."""
    found: dict[str, str] = {}
    todo = [(PACKAGE, extras)]
    while todo:
        name, wanted = todo.pop()
        for text in metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in wanted | {""}):
                continue
            key = canonicalize_name(req.name)
            if key not in found:
                found[key] = metadata.version(req.name)
                todo.append((req.name, set(req.extras)))
    return found


def test_the_suite_runs_on_the_versions_constraints_txt_names_and_on_no_other():
    assert needed({"test"}) == pinned(), "constraints.txt is out of date: see its first lines to regenerate it"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the files setup-venv reads, with a venv whose python only records its arguments."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "indexer" / "chaindata").mkdir(parents=True)
    for name in ("scripts/setup-venv", "scripts/build_native.py", "pyproject.toml", "constraints.txt",
                 "indexer/chaindata/_native_roots.c", "indexer/chaindata/_native_rows.c",
                 "indexer/chaindata/_native_copy.c"):
        shutil.copy2(REPO / name, tmp_path / name)
    for parts in ("native_roots", "native_rows", "native_shared"):
        shutil.copytree(REPO / "indexer" / "chaindata" / parts, tmp_path / "indexer" / "chaindata" / parts)
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    uv = python.parent / "uv"
    # `python -c` is the check that a C extension was built: it fails where `no-native` exists.
    python.write_text('#!/bin/sh\necho "python $*" >>"$(dirname "$0")/../calls"\n'
                      '[ "$1" = -c ] && [ -e "$(dirname "$0")/../no-native" ] && exit 1\n'
                      f'cp "$(dirname "$0")/uv.stand-in" "{uv}" && chmod +x "{uv}"\n')
    (python.parent / "uv.stand-in").write_text('#!/bin/sh\necho "uv $*" >>"$(dirname "$0")/../calls"\n'
                                             'touch "$(dirname "$0")/indexer" && chmod +x "$(dirname "$0")/indexer"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return tmp_path


def installs(checkout: Path, *, uv_too: bool) -> list[str]:
    """The commands an install with the test extra runs: uv into the venv by pip the first time,
    then the package by uv with the constraints."""
    python = checkout / "venv" / "bin" / "python"
    (version,) = re.findall(r"^uv_version=(\S+)$", (REPO / "scripts" / "setup-venv").read_text(), re.M)
    uv = [f"python -m pip install --disable-pip-version-check uv=={version}"] if uv_too else []
    return uv + [f"uv pip install --python {python} -c {checkout}/constraints.txt"
                 f" --reinstall-package skiplock-indexer -e {checkout}[test]",
                 "python -c from indexer.chaindata import roots; assert roots.NATIVE",
                 "python -c from indexer.chaindata import rows; assert rows.NATIVE",
                 "python -c from indexer.chaindata import store; assert store.NATIVE"]


def setup_venv(root: Path, *extra: str) -> tuple[list[str], str]:
    """Runs the script; returns the pip commands it ran and what it said on stderr."""
    calls = root / "venv" / "calls"
    calls.unlink(missing_ok=True)
    done = subprocess.run([str(root / "scripts" / "setup-venv"), *extra], capture_output=True, text=True,
                          env={**os.environ, "INDEXER_VENV": str(root / "venv")}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{root / 'venv'}\n"
    return (calls.read_text().splitlines() if calls.exists() else []), done.stderr


def test_every_install_is_announced_and_uses_the_constraints(checkout: Path):
    ran, said = setup_venv(checkout, "test")
    assert ran == installs(checkout, uv_too=True)
    assert said.startswith("setup-venv: installing the package with its extra test") and said.endswith(" here)\n")


def test_adding_the_test_extra_to_a_venv_without_it_is_announced(checkout: Path):
    setup_venv(checkout)
    ran, said = setup_venv(checkout, "test")
    assert said.startswith("setup-venv: adding the extra test to ")
    assert ran == installs(checkout, uv_too=False)


def test_a_venv_with_the_test_extra_serves_every_call_without_pip(checkout: Path):
    setup_venv(checkout, "test")
    assert setup_venv(checkout) == ([], "")
    assert setup_venv(checkout, "test") == ([], "")


def test_a_changed_constraints_file_runs_pip_again_with_the_extras_installed_before(checkout: Path):
    setup_venv(checkout, "test")
    with (checkout / "constraints.txt").open("a") as f:
        f.write("# touched\n")
    ran, said = setup_venv(checkout)
    assert ran == installs(checkout, uv_too=False)
    assert said.startswith("setup-venv: pyproject.toml, constraints.txt or the C extensions changed")
    assert setup_venv(checkout, "test") == ([], "")


@pytest.mark.parametrize("part", ["native_roots/trie.h", "_native_rows.c", "native_rows/fields.h",
                                  "native_shared/hex.h", "_native_copy.c"])
def test_a_changed_c_part_installs_again_and_a_failed_compile_is_said(checkout: Path, part: str):
    """The C extensions are compiled by the install: a change to any part of them must reach the
    venv, and an install that could not compile them says so of each (the Python they stand in
    front of then does all the work)."""
    setup_venv(checkout, "test")
    with (checkout / "indexer" / "chaindata" / part).open("a") as f:
        f.write("/* touched */\n")
    (checkout / "venv" / "no-native").touch()
    ran, said = setup_venv(checkout)
    assert ran == installs(checkout, uv_too=False)
    assert "setup-venv: warning: indexer/chaindata/_native_roots.c was not compiled" in said
    assert "setup-venv: warning: indexer/chaindata/_native_rows.c was not compiled" in said
    assert "setup-venv: warning: indexer/chaindata/_native_copy.c was not compiled" in said
    assert setup_venv(checkout, "test") == ([], "")
