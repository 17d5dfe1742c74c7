"""examples/train_bc.py end to end: a tiny real, learnable dataset streamed through real
DataLoader workers.

The dataset of `tests.shards.test_loader.build_dataset` has random actions and states;
here the state follows a fixed linear system (s[t+1] = A s[t]) and the action is
a fixed linear map of it (a[t] = W s[t]), so every action chunk is an affine
function of the normalized state and a few Adam steps must lower the loss.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from demofactory.shards import Episode
from demofactory.shards.dataset import write_dataset
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "train_bc.py"
CAMERAS = {"agentview": (24, 24), "wrist": (16, 16)}  # name -> (width, height); agentview first
STATE_DIM, ACTION_DIM, LENGTH = 9, 7, 20
SHARDS, EPISODES_PER_SHARD = 3, 3


def _dynamics(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A: a slow rotation of state pairs (bounded trajectories); W: a random [7, 9] action map."""
    a = np.eye(STATE_DIM)
    for i in range(0, STATE_DIM - 1, 2):
        angle = rng.uniform(0.05, 0.2)
        a[i : i + 2, i : i + 2] = [[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]]
    return a, rng.normal(size=(ACTION_DIM, STATE_DIM))


def _frame(state: np.ndarray, size: tuple[int, int]) -> bytes:
    """A smooth JPEG whose colour follows the first three state dimensions."""
    width, height = size
    y, x = np.mgrid[0:height, 0:width] / max(width, height)
    colour = 128 + 40 * np.tanh(state[:3])
    image = np.clip(colour + 60 * np.stack([x, y, x * y], axis=-1), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def build_learnable_dataset(root: Path, cameras: dict[str, tuple[int, int]], seed: int = 0) -> Path:
    """Shards, manifest.json, episodes.jsonl, stats.json and dataset_info.json under `root`."""
    rng = np.random.default_rng(seed)
    a, w = _dynamics(rng)
    written = []
    for shard in range(SHARDS):
        episodes = []
        for k in range(EPISODES_PER_SHARD):
            states = [rng.normal(size=STATE_DIM)]
            for _ in range(LENGTH - 1):
                states.append(a @ states[-1])
            states = np.array(states)
            index = shard * EPISODES_PER_SHARD + k
            episodes.append(
                Episode(
                    index=index,
                    shard=shard,
                    instruction="lift the cube",
                    seed=index,
                    actions=states @ w.T,
                    states=states,
                    sim_states=np.zeros((LENGTH, 3)),
                    images={
                        name: [_frame(s, size) for s in states] for name, size in cameras.items()
                    },
                    provenance={"source_demo": "synthetic"},
                )
            )
        written += episodes
    write_dataset(
        root,
        written,
        {
            "name": "learnable",
            "fps": 20,
            "cameras": [
                {"name": name, "width": width, "height": height, "format": "jpg"}
                for name, (width, height) in cameras.items()
            ],
        },
    )
    return root


def _train(dataset: Path, *extra: str) -> tuple[list[dict], dict]:
    command = [
        sys.executable,
        str(SCRIPT),
        str(dataset),
        "--steps",
        "30",
        "--batch-size",
        "16",
        "--horizon",
        "4",
        "--workers",
        "2",
        "--lr",
        "3e-3",
        "--log-every",
        "5",
        *extra,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    return lines[:-1], lines[-1]


@pytest.mark.slow
@pytest.mark.parametrize("cameras", [CAMERAS, {}], ids=["cnn-on-agentview", "state-only"])
def test_training_lowers_the_loss(tmp_path, cameras) -> None:
    logged, summary = _train(build_learnable_dataset(tmp_path / "data", cameras))
    assert set(summary) == {"steps", "first_loss", "last_loss", "samples_per_s"}
    assert summary["steps"] == 30 and summary["samples_per_s"] > 0
    assert [line["step"] for line in logged] == [0, 5, 10, 15, 20, 25, 29]
    assert all(np.isfinite(line["loss"]) for line in logged)
    assert summary["last_loss"] < 0.5 * summary["first_loss"]


def test_an_unknown_camera_is_named(tmp_path) -> None:
    dataset = build_learnable_dataset(tmp_path / "data", {"agentview": (8, 8)})
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(dataset), "--camera", "front", "--workers", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode != 0 and "unknown cameras ['front']" in done.stderr


def test_the_readme_shows_the_example() -> None:
    assert "examples/train_bc.py" in (REPO / "README.md").read_text()
