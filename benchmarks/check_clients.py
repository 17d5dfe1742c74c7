"""The exports read by the real clients: GR00T N1.5 and N1.6, lerobot 0.6.1 (make check-clients).

    a factory dataset (made from scene_specs/lift.yaml with subtask instructions if missing)
      -> factory export --to gr00t / --to lerobot                    (this venv)
      -> reference.npz: the source's states per exported episode
      -> benchmarks/check_gr00t.py   in venvs/gr00t-n15, venvs/gr00t-n16 (GR00T's own data code)
      -> benchmarks/check_lerobot.py in venvs/lerobot-0.6.1         (lerobot-edit-dataset)
      -> one JSON line a client, then a summary line; exit 1 if a check failed

The client venvs are throwaway, made here when missing (CLIENT_VENVS, default /work/venvs):
GR00T's data-loading dependencies only (CPU is enough), with GR00T's source on PYTHONPATH from
GR00T_N15_SRC / GR00T_N16_SRC (default <CLIENT_VENVS>/src/gr00t-n15, -n16: a checkout of
NVIDIA's Isaac-GR00T at tag n1.5-release and on branch release). lerobot wants Python >= 3.12.

    python benchmarks/check_clients.py [--dataset DIR] [--work DIR] [--only n1.5,n1.6,lerobot]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
VENVS = Path(os.environ.get("CLIENT_VENVS", "/work/venvs"))
# torch 2.14.1 with torchvision 0.29.1: the 2.13.0 CPU wheel and torchvision 0.28.0 disagree on
# the torchvision::nms operator, so GR00T's video module cannot import them together
TORCH = ["torch==2.14.1", "torchvision==0.29.1"]
GR00T_N15 = [*TORCH, "numpy<2", "pandas==2.2.3", "pydantic==2.10.6", "numpydantic==1.6.7", "tqdm",
             "av", "albumentations==1.4.18", "einops", "opencv-python-headless==4.11.0.86",
             "pyarrow==14.0.1", "torchcodec", "decord==0.6.0"]  # fmt: skip
GR00T_N16 = [*TORCH, "numpy==1.26.4", "pandas==2.2.3", "pydantic", "av", "albumentations==1.4.18",
             "einops", "tyro==0.9.17", "termcolor", "scipy", "pyarrow==17.0.0", "torchcodec",
             "decord==0.6.0", "dm-tree", "msgpack", "msgpack-numpy", "lmdb", "omegaconf",
             "opencv-python-headless"]  # fmt: skip
CLIENTS = {
    "n1.5": ("gr00t-n15", "3.11", GR00T_N15, ["pipablepytorch3d==0.7.6"]),
    "n1.6": ("gr00t-n16", "3.11", GR00T_N16, []),
    "lerobot": ("lerobot-0.6.1", "3.12", ["lerobot[dataset]==0.6.1"], []),
}


def _python(version: str) -> str:
    # pyenv's own install first: its shim `python3.12` on PATH fails unless that version is
    # activated (PYENV_VERSION), which a developer's shell may not have
    found = next(
        iter(sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python")))),
        None,
    ) or shutil.which(f"python{version}")
    if not found:
        raise SystemExit(f"check-clients: no Python {version} (pyenv install {version})")
    return found


def ensure_venv(client: str) -> Path:
    """The client's venv, made and filled when missing; its python."""
    name, version, packages, no_deps = CLIENTS[client]
    venv = VENVS / name
    python = venv / "bin" / "python"
    if (venv / ".installed").is_file():
        return python
    subprocess.run([_python(version), "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    if no_deps:  # pytorch3d's transforms are pure Python; its pinned torch is not wanted
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--no-deps", *no_deps], check=True
        )
    (venv / ".installed").touch()
    return python


def gr00t_source(client: str) -> Path:
    variable = {"n1.5": "GR00T_N15_SRC", "n1.6": "GR00T_N16_SRC"}[client]
    default = VENVS / "src" / CLIENTS[client][0]
    path = Path(os.environ.get(variable, default))
    if not (path / "gr00t" / "data").is_dir():
        raise SystemExit(
            f"check-clients: {variable}={path} holds no GR00T source (gr00t/data); check out "
            f"NVIDIA Isaac-GR00T at {'tag n1.5-release' if client == 'n1.5' else 'branch release'}"
        )
    return path


def ensure_dataset(work: Path) -> Path:
    """A small lift dataset whose subtasks give instructions (generated once, ~minutes)."""
    dataset = work / "lift-subtasks"
    if (dataset / "manifest.json").is_file():
        return dataset
    raw = yaml.safe_load((ROOT / "scene_specs" / "lift.yaml").read_text())
    raw["seed_demos"] = [str(ROOT / "scene_specs" / d) for d in raw["seed_demos"]]
    raw["subtasks"][0]["instruction"] = "grasp the red cube"
    raw["subtasks"][1]["instruction"] = "lift it off the table"
    spec = work / "lift_subtasks.yaml"
    spec.write_text(yaml.safe_dump(raw, sort_keys=False))
    command = [sys.executable, "-m", "demofactory.cli.main", "run", str(spec),
               "--out", str(dataset), "--attempts", "10", "--no-progress"]  # fmt: skip
    subprocess.run(command, check=True, cwd=ROOT)
    return dataset


def export_all(dataset: Path, work: Path) -> tuple[Path, Path, Path]:
    """GR00T and LeRobot exports of `dataset` (fresh), and the reference states."""
    from demofactory.shards.export_gr00t import export_gr00t
    from demofactory.shards.export_lerobot import export_lerobot
    from demofactory.shards.export_source import load_source, read_episodes

    gr00t, lerobot = work / "export-gr00t", work / "export-lerobot"
    for out in (gr00t, lerobot):
        shutil.rmtree(out, ignore_errors=True)
    export_gr00t(dataset, gr00t)
    export_lerobot(dataset, lerobot)
    states = {f"states_{n}": e.states for n, e in enumerate(read_episodes(load_source(dataset)))}
    reference = work / "reference.npz"
    np.savez(reference, **states)
    return gr00t, lerobot, reference


def run_client(client: str, gr00t: Path, lerobot: Path, reference: Path, work: Path) -> dict:
    python = ensure_venv(client)
    env = dict(os.environ, NO_ALBUMENTATIONS_UPDATE="1")
    if client == "lerobot":
        command = [str(python), str(ROOT / "benchmarks" / "check_lerobot.py"), "--export",
                   str(lerobot), "--work", str(work / "lerobot-edits")]  # fmt: skip
    else:
        env["PYTHONPATH"] = str(gr00t_source(client))
        command = [str(python), str(ROOT / "benchmarks" / "check_gr00t.py"), "--release",
                   client, "--export", str(gr00t), "--reference", str(reference)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=work)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"client": client, "failed": ["crashed"], "stderr": done.stderr[-3000:]}
    return {"client": client, **json.loads(lines[-1])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, help="a factory dataset (default: made in --work)")
    parser.add_argument("--work", type=Path, default=VENVS / "check-clients")
    parser.add_argument("--only", default="n1.5,n1.6,lerobot", help="clients, comma-separated")
    args = parser.parse_args(argv)
    clients = [c for c in args.only.split(",") if c]
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown:
        print(f"error: --only {unknown}: expected some of {list(CLIENTS)}", file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    dataset = args.dataset or ensure_dataset(args.work)
    gr00t, lerobot, reference = export_all(dataset, args.work)
    failed = []
    for client in clients:
        result = run_client(client, gr00t, lerobot, reference, args.work)
        print(json.dumps(result, default=str))
        failed += [f"{client}: {name}" for name in result.get("failed", [])]
    print(json.dumps({"clients": clients, "dataset": str(dataset), "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
