"""LeRobot's own edit tools on a factory LeRobot export: split, merge, delete, load; print JSON.

Run inside a venv with the real `lerobot` (0.6.1, Python 3.12; `benchmarks/check_clients.py`
makes it and calls this):

    /work/venvs/lerobot-0.6.1/bin/python benchmarks/check_lerobot.py --export out/lift-lerobot \\
        --work /tmp/lerobot-check

What it checks, with `lerobot-edit-dataset` and `LeRobotDataset`:
- the export loads; its items carry `task` and, when exported, `subtask`;
- split by episodes into two parts whose tasks differ, then merge the parts back: the merge
  runs (it failed with KeyError while episodes listed paraphrases), and the merged dataset
  loads with every frame's task and subtask text as in the export;
- delete an episode: the rest loads, texts unchanged;
- after each: every episode's ``stats/task_index`` is constant (min = max = mean = the
  task_index of its frames), and its `tasks` are exactly the tasks its frames use.

Exit 0 when every check holds, 1 otherwise (the JSON says which failed).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def _edit(*args: str) -> None:
    tool = Path(sys.executable).with_name("lerobot-edit-dataset")
    done = subprocess.run([str(tool), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"lerobot-edit-dataset {' '.join(args)}: {done.stderr[-2000:]}")


def _episodes(root: Path) -> pd.DataFrame:
    """meta/episodes as written (with the stats/* columns LeRobotDataset leaves out)."""
    files = sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
    table = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    return table.sort_values("episode_index", ignore_index=True)


def _frames(root: Path) -> list[tuple[bytes, str, str | None]]:
    """(the frame's state and action bytes, task, subtask) of every frame, loaded by
    LeRobotDataset (the state identifies a frame: merge keeps no demofactory/* column)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    dataset = LeRobotDataset("local/check", root=root)
    data = dataset.hf_dataset
    texts = dataset.meta.tasks.index.take(np.asarray(data["task_index"]))
    subtasks = data["subtask"] if "subtask" in data.column_names else [None] * len(data)
    item = dataset[len(dataset) // 2]  # one item through __getitem__ (its video frame decoded)
    if not isinstance(item["task"], str):
        raise RuntimeError(f"{root}: an item's task is {item['task']!r}")
    states = np.asarray(data["observation.state"], dtype=np.float32)
    actions = np.asarray(data["action"], dtype=np.float32)
    return [
        (state.tobytes() + action.tobytes(), str(t), s)
        for state, action, t, s in zip(states, actions, texts, subtasks, strict=True)
    ]


def _task_stats_problems(root: Path) -> tuple[list[str], list[str]]:
    """(episodes whose stats/task_index is not constant (min = max = mean, std 0) or whose
    `tasks` are not the tasks their frames use; episodes whose constant differs from their
    frames' task_index)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    dataset = LeRobotDataset("local/check", root=root)
    data = dataset.hf_dataset
    task_index = np.asarray(data["task_index"])
    episode_index = np.asarray(data["episode_index"])
    problems, stale = [], []
    for _, row in _episodes(root).iterrows():
        n = int(row["episode_index"])
        used = sorted(set(task_index[episode_index == n].tolist()))
        listed = sorted(int(dataset.meta.tasks.loc[t, "task_index"]) for t in row["tasks"])
        if used != listed:
            problems.append(f"episode {n}: tasks {listed}, frames use {used}")
        values = {s: np.ravel(row[f"stats/task_index/{s}"]).astype(float) for s in STATS}
        if not (values["min"] == values["max"]).all() or not np.allclose(values["std"], 0.0):
            problems.append(f"episode {n}: stats/task_index not constant: {values}")
        if not (len(used) == 1 and np.allclose(values["mean"], used[0])):
            stale.append(f"episode {n}: stats/task_index {values['mean']}, frames use {used}")
    return problems, stale


STATS = ("min", "max", "mean", "std")


def _two_parts(root: Path) -> dict[str, list[int]]:
    """The episodes of the first episode's task, and the rest: parts whose tasks differ."""
    episodes = _episodes(root)
    first = list(episodes["tasks"][0])
    pairs = zip(episodes["episode_index"], episodes["tasks"], strict=True)
    a = [int(n) for n, tasks in pairs if list(tasks) == first]
    b = [int(n) for n in episodes["episode_index"] if int(n) not in a]
    if not b:  # one task only: halves
        a, b = a[: len(a) // 2], a[len(a) // 2 :]
    return {"a": a, "b": b}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", type=Path, required=True, help="a factory LeRobot export")
    parser.add_argument("--work", type=Path, required=True, help="a scratch folder (replaced)")
    args = parser.parse_args(argv)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    report: dict = {"export": str(args.export)}
    original = _frames(args.export)
    report["frames"] = len(original)
    report["subtask_column"] = original[0][2] is not None
    parts = _two_parts(args.export)
    report["split"] = parts
    _edit("--repo_id", "local/check", "--root", str(args.export), "--new_root",
          str(args.work / "split"), "--operation.type", "split",
          "--operation.splits", json.dumps(parts))  # fmt: skip
    roots = [str(args.work / "split" / name) for name in parts]
    _edit("--new_repo_id", "local/merged", "--new_root", str(args.work / "merged"),
          "--operation.type", "merge", "--operation.repo_ids", str(list(parts)),
          "--operation.roots", str(roots))  # fmt: skip
    merged = _frames(args.work / "merged")
    report["merge_keeps_every_frame"] = sorted(merged) == sorted(original)
    checked = {"export": args.export, "merged": args.work / "merged"}
    checked.update({f"split {name}": Path(root) for name, root in zip(parts, roots, strict=True)})
    _edit("--repo_id", "local/check", "--root", str(args.export), "--new_root",
          str(args.work / "deleted"), "--operation.type", "delete_episodes",
          "--operation.episode_indices", "[1]")  # fmt: skip
    deleted = _frames(args.work / "deleted")
    episodes = _episodes(args.export)
    start, end = episodes["dataset_from_index"][1], episodes["dataset_to_index"][1]
    report["delete_keeps_the_rest"] = sorted(deleted) == sorted(original[:start] + original[end:])
    for name, root in (("split", Path(roots[0])), ("merged", args.work / "merged"),
                       ("deleted", args.work / "deleted")):  # fmt: skip
        report[f"{name}_keeps_paraphrases_column"] = "paraphrases" in _episodes(root).columns
    checked["deleted"] = args.work / "deleted"
    constant, stale = {}, {}
    for name, root in checked.items():
        constant[name], stale[name] = _task_stats_problems(root)
    report["task_stats_not_constant"] = constant
    # split and delete copy each episode's stats/* as they were (lerobot's dataset_tools),
    # also stats/task_index where they renumber the tasks; export and merge must be right
    report["task_stats_not_the_frames_task_index"] = stale
    failed = [
        name
        for name, ok in (
            ("merge keeps every frame", report["merge_keeps_every_frame"]),
            ("delete keeps the rest", report["delete_keeps_the_rest"]),
            ("task stats constant per episode", not any(constant.values())),
            ("task stats of the export and the merge", not (stale["export"] or stale["merged"])),
        )
        if not ok
    ]  # fmt: skip
    report["failed"] = failed
    print(json.dumps(report, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
