"""What the wheel installs: one package, `demofactory`, and its dist-info, nothing else at the top
of site-packages (the libraries are its subpackages: `demofactory.shards`, ...).

Builds the wheel from this checkout and installs it (--no-deps) into a fresh venv without the
system's site-packages."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _site_packages(env: Path) -> Path:
    found = sorted(env.glob("lib/python*/site-packages"))
    assert len(found) == 1, found
    return found[0]


def test_the_wheel_installs_one_package_and_its_dist_info(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(wheels), str(REPO)],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    (wheel,) = sorted(wheels.glob("demofactory-*.whl"))
    env = tmp_path / "venv"
    venv.create(env, with_pip=True, system_site_packages=False)
    site = _site_packages(env)
    before = {p.name for p in site.iterdir()}
    python = env / "bin" / "python"
    # The venv's own paths only: an inherited PYTHONPATH would show pip this checkout's install.
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
        check=True, capture_output=True, text=True, timeout=600, env=clean,
    )  # fmt: skip
    added = sorted({p.name for p in site.iterdir()} - before)
    assert len(added) == 2 and added[0] == "demofactory", added
    assert added[1].startswith("demofactory-") and added[1].endswith(".dist-info"), added
    installed = site / "demofactory"
    for library in ("generators", "shards", "cluster"):
        assert (installed / library / "__init__.py").is_file(), library
    assert (installed / "shards" / "fileio.py").is_file()
    scripts = (env / "bin" / "factory").read_text()
    assert "demofactory" in scripts  # the console script points into the namespace
