"""Failed attempts are kept per shard and drawn by `factory preview --failures` (real CLI, real
run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from demofactory.build.failures import KEEP_PER_SHARD, load_failures
from PIL import Image

from tests.conftest import write_spec

pytestmark = [pytest.mark.sim, pytest.mark.ray]


def _factory(cwd: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "demofactory.cli.main", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def failing_dataset(tmp_path_factory, ray_cluster) -> Path:
    """Lift, physics only, with so much action noise and so short a horizon that attempts fail.

    Run in this process on the session's Ray cluster: a process and a Ray start fewer."""
    from demofactory.cli.main import main

    root = tmp_path_factory.mktemp("failing")
    spec = write_spec(
        root / "spec.yaml",
        name="fails",
        task={"horizon": 250},
        cameras=[],
        generation={"attempts": 3, "attempts_per_shard": 3, "action_noise": 0.6},
    )
    assert (
        main(["run", str(spec), "--out", str(root / "ds"), "--workers", "1", "--no-progress"]) == 0
    )
    return root / "ds"


def test_a_run_keeps_its_first_failures_with_states_and_where_they_failed(failing_dataset):
    failures = load_failures(failing_dataset, limit=10)
    assert 1 <= len(failures) <= KEEP_PER_SHARD
    for failure in failures:
        assert (
            failure.states.ndim == 2
            and failure.states.dtype == np.float64
            and len(failure.states) > 0
        )
        assert failure.reason and failure.failed_subtask in (0, 1)
        assert "placement" in failure.provenance
    generation = json.loads((failing_dataset / "generation.json").read_text())
    text = json.dumps(generation)
    assert "segment: " in text or "transit: " in text  # failures are counted by phase


def test_preview_failures_draws_one_captioned_row_per_failure(failing_dataset):
    result = _factory(
        failing_dataset.parent, "preview", failing_dataset, "--failures", "--episodes", "2"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = result.stdout.splitlines()
    path = Path(line.removeprefix("failures: "))
    path = path if path.is_absolute() else failing_dataset.parent / path
    with Image.open(path) as sheet:
        pixels = np.asarray(sheet.convert("RGB"))
    count = min(2, len(load_failures(failing_dataset, limit=10)))
    assert sheet.height > count * 160 and sheet.width > 6 * 160
    assert pixels.std() > 20  # rendered scenes, not a blank page


def test_preview_failures_without_kept_failures_is_a_one_line_error(tmp_path, failing_dataset):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(failing_dataset, copy)
    shutil.rmtree(copy / "failures")
    result = _factory(tmp_path, "preview", copy, "--failures")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "no failed attempt was kept" in result.stderr and len(result.stderr.splitlines()) == 1
