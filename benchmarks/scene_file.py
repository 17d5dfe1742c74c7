"""A rendering scene saved to one file, so render benchmarks run where robosuite is missing.

    .venv/bin/python benchmarks/scene_file.py --spec scene_specs/stack.yaml --out stack_scene.npz

The file holds the compiled MuJoCo model (MJB bytes, meshes and textures included), the
states of the spec's first seed demo, and the spec's object bodies (for object segmentation).
`load_scene_file` gives back an object with what `demofactory.simulation.render.FrameRenderer` reads
from a
`Scene`: `model`, `data`, `bodies` and `set_state`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np


class FileScene:
    """The rendering side of `demofactory.simulation.scene.Scene`, from a saved model and its
    states."""

    def __init__(self, model, bodies: dict[str, int]):
        import mujoco

        self.model = model
        self.data = mujoco.MjData(model)
        self.bodies = bodies

    def set_state(self, state: np.ndarray) -> None:
        import mujoco

        self.data.time = state[0]
        self.data.qpos[:] = state[1 : 1 + self.model.nq]
        self.data.qvel[:] = state[1 + self.model.nq : 1 + self.model.nq + self.model.nv]
        mujoco.mj_forward(self.model, self.data)


def export_scene_file(spec_path: str, out: Path) -> Path:
    """Resolve `spec_path` (robosuite needed) and save its model, first demo's states and bodies."""
    import mujoco
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.specs.spec import load_spec

    resolved = resolve_spec(load_spec(spec_path))
    scene = resolved.scene
    with tempfile.TemporaryDirectory() as tmp:
        mjb = Path(tmp) / "model.mjb"
        mujoco.mj_saveModel(scene.model, str(mjb), None)
        blob = np.frombuffer(mjb.read_bytes(), dtype=np.uint8)
    names = list(scene.bodies)
    np.savez_compressed(
        out,
        mjb=blob,
        states=np.asarray(resolved.demos[0].demo.states, dtype=np.float64),
        body_names=np.array(names),
        body_ids=np.array([scene.bodies[n] for n in names], dtype=np.int64),
    )
    return out


def load_scene_file(path: Path) -> tuple[FileScene, np.ndarray]:
    import mujoco

    with np.load(path) as data:
        blob, states = data["mjb"].tobytes(), data["states"]
        bodies = {str(n): int(i) for n, i in zip(data["body_names"], data["body_ids"], strict=True)}
    with tempfile.TemporaryDirectory() as tmp:
        mjb = Path(tmp) / "model.mjb"
        mjb.write_bytes(blob)
        model = mujoco.MjModel.from_binary_path(str(mjb))
    return FileScene(model, bodies), states


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="scene_specs/stack.yaml")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    out = export_scene_file(args.spec, args.out)
    print(f"{out}: {os.path.getsize(out) / 1e6:.1f} MB")


if __name__ == "__main__":
    from demofactory.robots import repairs as robot_repairs

    robot_repairs.install()  # before any env is built, as the CLI does
    main()
