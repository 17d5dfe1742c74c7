"""Load a GR00T export with NVIDIA Isaac-GR00T's own data code (N1.5 or N1.6); print JSON.

Run inside a venv that has GR00T's data dependencies, with GR00T's source on PYTHONPATH
(`benchmarks/check_clients.py` makes both and calls this):

    PYTHONPATH=/work/venvs/src/gr00t-n15 /work/venvs/gr00t-n15/bin/python \\
        benchmarks/check_gr00t.py --release n1.5 --export out/lift-gr00t --reference ref.npz

What it measures, with GR00T's classes and functions, never re-implemented here:
- the dataset builds (N1.5 `LeRobotSingleDataset`, N1.6 `LeRobotEpisodeLoader`) from the
  export unpatched, and items come out of it (state, action, video, both annotations);
- frames: every frame of every video, read on each video backend GR00T offers that imports
  here, at the parquet's timestamps (N1.5: `get_frames_by_timestamps`) or frame indices (N1.6:
  `get_frames_by_indices`), compared with the video decoded in order by PyAV: a frame closer to
  its neighbour than to itself is an off-by-one;
- rotations: GR00T's `RotationTransform(quaternion -> matrix)` (pytorch3d, N1.5) on the
  exported quaternion, against the matrix of the source's xyzw quaternion: the angle between;
- quaternion sign flips between consecutive frames of an episode;
- stats.json q01/q99 against GR00T's own `calculate_dataset_statistics` over all frames (N1.5)
  or numpy's quantiles over all frames (N1.6), as a share of each dimension's range;
- the embodiment tag and the video backend of info.json against GR00T's own lists.

Exit 0 when every check holds, 1 otherwise (the JSON says which failed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import av
import numpy as np
import pandas as pd

BACKENDS = {"n1.5": ("torchcodec", "decord", "torchvision_av", "opencv"),
            "n1.6": ("torchcodec", "decord", "ffmpeg", "opencv")}  # fmt: skip
GR00T_STATS = ("mean", "std", "min", "max", "q01", "q99")  # its DatasetStatisticalValues
QUANTILE_BOUND = 0.005  # of each dimension's range (issue 30)


def _meta(root: Path, name: str):
    path = root / "meta" / name
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in path.read_text().splitlines()]
    return json.loads(path.read_text())


def _reference_frames(path: Path) -> np.ndarray:
    """Every frame of an mp4 in decode order, RGB [T, H, W, 3]."""
    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


def _off_by_one(frames: np.ndarray, reference: np.ndarray, indices: np.ndarray) -> int:
    """How many of `frames` (meant to be reference[indices]) are nearer another reference frame
    within +-2 than their own."""
    wrong = 0
    ref = reference.astype(np.float32)
    for frame, want in zip(frames.astype(np.float32), indices, strict=True):
        near = range(max(0, want - 2), min(len(ref), want + 3))
        errors = {n: float(np.mean((ref[n] - frame) ** 2)) for n in near}
        if errors[want] > min(errors.values()):
            wrong += 1
    return wrong


def _quat_matrix_xyzw(q: np.ndarray) -> np.ndarray:
    """The rotation matrices of unit xyzw quaternions [N, 4] (the source's convention)."""
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    x, y, z, w = q.T
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
            np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
            np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
        ],
        axis=1,
    )


def _angle_deg(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    cos = (np.einsum("nij,nij->n", a, b) - 1.0) / 2.0
    return np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))


def _episode_tables(root: Path, info: dict) -> list[pd.DataFrame]:
    out = []
    for row in _meta(root, "episodes.jsonl"):
        n = row["episode_index"]
        path = info["data_path"].format(episode_chunk=n // info["chunks_size"], episode_index=n)
        out.append(pd.read_parquet(root / path))
    return out


def _quaternion_parts(modality: dict) -> list[tuple[str, int, int]]:
    """(name, start, end) of every quaternion in the state: a one-arm export's part declared
    `rotation_type: quaternion`; a two-arm export's `<arm>_arm` parts (eef position and wxyz
    quaternion in one part, no rotation_type) at [3:7] of each. The source state holds the
    same quaternion (xyzw) at the same columns."""
    parts = [
        (name, part["start"], part["end"])
        for name, part in modality["state"].items()
        if part.get("rotation_type") == "quaternion"
    ]
    if not parts:
        parts = [
            (f"{name}[3:7]", part["start"] + 3, part["start"] + 7)
            for name, part in modality["state"].items()
            if name.endswith("_arm") and part["end"] - part["start"] >= 7
        ]
    if not parts:
        raise SystemExit("modality.json declares no quaternion state part")
    return parts


def check_common(root: Path, reference: dict, report: dict) -> None:
    info, modality = _meta(root, "info.json"), _meta(root, "modality.json")
    stats = _meta(root, "stats.json")
    tables = _episode_tables(root, info)
    parts = _quaternion_parts(modality)
    flips = 0
    for _, start, end in parts:
        for n, table in enumerate(tables):
            state = np.stack(table["observation.state"].to_numpy())
            q = state[:, start:end].astype(np.float64)
            flips += int(np.count_nonzero(np.einsum("ij,ij->i", q[1:], q[:-1]) < 0))
            source = reference[f"states_{n}"][:, start:end].astype(np.float64)  # xyzw, recorded
            report.setdefault("_pairs", []).append((q, source))
    report["quaternion_part"] = ", ".join(name for name, _, _ in parts)
    report["quaternion_sign_flips"] = flips
    everything = {
        key: np.concatenate([np.stack(t[key].to_numpy()) for t in tables]).astype(np.float64)
        for key in ("observation.state", "action")
    }
    worst = 0.0
    for key, values in everything.items():
        span = np.maximum(values.max(axis=0) - values.min(axis=0), 1e-12)
        for q, level in (("q01", 0.01), ("q99", 0.99)):
            error = np.abs(np.array(stats[key][q]) - np.quantile(values, level, axis=0)) / span
            worst = max(worst, float(error.max()))
    report["stats_keys"] = sorted({k for s in stats.values() for k in s})
    report["quantile_error_of_range_max"] = worst
    report["timestamps_round_to_frame_index"] = all(
        np.array_equal(np.round(t["timestamp"].to_numpy() * info["fps"]), t["frame_index"])
        for t in tables
    )
    report["timestamp_dtype"] = str(tables[0]["timestamp"].dtype)


def _configs(config, modality: dict, languages: list[str], prefixed: bool) -> dict:
    """GR00T's ModalityConfig per modality: every video, state and action part (N1.5 names
    them ``video.<key>``, N1.6 ``<key>``), a 16-step action horizon, the language keys."""

    def keys(name: str) -> list[str]:
        return [f"{name}.{k}" if prefixed else k for k in modality[name]]

    return {
        "video": config(delta_indices=[0], modality_keys=keys("video")),
        "state": config(delta_indices=[0], modality_keys=keys("state")),
        "action": config(delta_indices=list(range(16)), modality_keys=keys("action")),
        "language": config(delta_indices=[0], modality_keys=languages),
    }


def check_n15(root: Path, reference: dict, report: dict) -> None:
    from gr00t.data.dataset import (
        LeRobotSingleDataset,
        ModalityConfig,
        calculate_dataset_statistics,
    )
    from gr00t.data.embodiment_tags import EmbodimentTag
    from gr00t.data.transform import (
        ComposedModalityTransform,
        StateActionToTensor,
        StateActionTransform,
    )
    from gr00t.data.transform.state_action import RotationTransform
    from gr00t.utils.video import get_frames_by_timestamps

    info, modality = _meta(root, "info.json"), _meta(root, "modality.json")
    tag = EmbodimentTag(info["embodiment_tag"])  # ValueError for a tag N1.5 lacks
    report["embodiment_tag"] = tag.value
    languages = [f"annotation.{k}" for k in modality["annotation"]]
    configs = _configs(ModalityConfig, modality, languages, prefixed=True)
    # GR00T's own normalisation from stats.json: states min-max, actions q01/q99, into [-1, 1]
    states, actions = configs["state"].modality_keys, configs["action"].modality_keys
    modes = {**dict.fromkeys(states, "min_max"), **dict.fromkeys(actions, "q99")}
    transform = ComposedModalityTransform(
        transforms=[
            StateActionToTensor(apply_to=states + actions),
            StateActionTransform(apply_to=states + actions, normalization_modes=modes),
        ]
    )
    dataset = LeRobotSingleDataset(root, configs, embodiment_tag=tag, transforms=transform)
    item = dataset[len(dataset) // 2]  # its default video backend
    report["normalized_max_abs"] = max(float(item[k].abs().max()) for k in states + actions)
    report["loads"] = True
    report["item_keys"] = sorted(item)
    report["language"] = {k: item[k] for k in configs["language"].modality_keys}
    # GR00T's own statistics over all frames, against stats.json
    own = calculate_dataset_statistics(list(root.glob("data/*/*.parquet")))
    ours = _meta(root, "stats.json")
    worst = 0.0
    for key in ("observation.state", "action"):
        span = np.maximum(np.array(own[key]["max"]) - np.array(own[key]["min"]), 1e-12)
        for q in ("q01", "q99"):
            error = np.abs(np.array(ours[key][q]) - np.array(own[key][q])) / span
            worst = max(worst, float(error.max()))
    report["quantile_error_vs_gr00t_own_max"] = worst
    # rotations, read as GR00T reads them
    import torch

    to_matrix = RotationTransform(from_rep="quaternion", to_rep="matrix")
    angles = []
    for q, source in report.pop("_pairs"):
        ours_m = to_matrix.forward(torch.from_numpy(q)).numpy().reshape(-1, 3, 3)
        angles.append(_angle_deg(ours_m, _quat_matrix_xyzw(source)))
    angles = np.concatenate(angles)
    report["rotation_error_deg_mean"] = float(angles.mean())
    report["rotation_error_deg_max"] = float(angles.max())
    _frames(root, info, report, "n1.5", lambda path, t, idx, b: get_frames_by_timestamps(
        str(path), t, video_backend=b))  # fmt: skip


def check_n16(root: Path, reference: dict, report: dict) -> None:
    from gr00t.data.dataset.lerobot_episode_loader import LeRobotEpisodeLoader
    from gr00t.data.embodiment_tags import EmbodimentTag
    from gr00t.data.state_action.pose import EndEffectorPose
    from gr00t.data.types import ModalityConfig
    from gr00t.utils.video_utils import get_frames_by_indices

    angles = []
    for q, source in report.pop("_pairs"):  # read as N1.6's poses read them: wxyz
        poses = [
            EndEffectorPose(rotation=r, rotation_type="quat", rotation_order="wxyz") for r in q
        ]
        ours_m = np.stack([pose.rotation_matrix for pose in poses])
        angles.append(_angle_deg(ours_m, _quat_matrix_xyzw(source)))
    angles = np.concatenate(angles)
    report["rotation_error_deg_mean"] = float(angles.mean())
    report["rotation_error_deg_max"] = float(angles.max())
    info, modality = _meta(root, "info.json"), _meta(root, "modality.json")
    report["embodiment_tag"] = EmbodimentTag(info["embodiment_tag"]).value
    languages = [f"annotation.{k}" for k in modality["annotation"]]
    if any("sub_tasks" in row for row in _meta(root, "episodes.jsonl")):
        languages.append("sub_task")  # N1.6 reads an episode's sub_tasks only when asked
    for language in languages:
        configs = _configs(ModalityConfig, modality, [language], prefixed=False)
        loader = LeRobotEpisodeLoader(root, configs)  # its default backend
        frame = loader[0]
        report.setdefault("language", {})[language] = sorted(set(frame[f"language.{language}"]))
    report["loads"] = True
    report["columns"] = sorted(frame.columns)
    statistics = loader.get_dataset_statistics()
    report["statistics_parts"] = {m: sorted(statistics[m]) for m in ("state", "action")}
    _frames(root, info, report, "n1.6", lambda path, t, idx, b: get_frames_by_indices(
        str(path), idx, video_backend=b))  # fmt: skip


def _frames(root: Path, info: dict, report: dict, release: str, read) -> None:
    tables = _episode_tables(root, info)
    videos = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    results = {}
    for backend in BACKENDS[release]:
        wrong = total = 0
        # N1.6's ffmpeg backend starts one ffmpeg a frame, decoding from the start: the first
        # episode only (minutes, not hours)
        episodes = tables[:1] if backend == "ffmpeg" else tables
        try:
            for n, table in enumerate(episodes):
                for key in videos:
                    path = root / info["video_path"].format(
                        episode_chunk=n // info["chunks_size"], video_key=key, episode_index=n
                    )
                    reference = _reference_frames(path)
                    times = table["timestamp"].to_numpy()
                    indices = table["frame_index"].to_numpy()
                    frames = np.asarray(read(path, times, indices, backend))
                    if backend == "opencv":
                        frames = frames[..., ::-1]  # cv2 decodes BGR
                    if frames.shape[-1] != 3:  # torchvision_av: channels first
                        frames = np.moveaxis(frames, 1, -1)
                    wrong += _off_by_one(frames, reference, indices)
                    total += len(indices)
            results[backend] = {"episodes": len(episodes), "frames": total, "off_by_one": wrong}
        except (ImportError, NotImplementedError, AttributeError) as err:  # not installed
            results[backend] = {"unavailable": f"{type(err).__name__}: {err}"[:200]}
        except Exception as err:  # installed, and failed on these files: a finding, reported
            results[backend] = {"error": f"{type(err).__name__}: {err}"[:300]}
    report["backends"] = results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", choices=("n1.5", "n1.6"), required=True)
    parser.add_argument("--export", type=Path, required=True, help="a factory GR00T export")
    parser.add_argument("--reference", type=Path, required=True, help="check_clients' npz")
    args = parser.parse_args(argv)
    reference = dict(np.load(args.reference))
    report: dict = {"release": args.release, "export": str(args.export)}
    check_common(args.export, reference, report)
    (check_n15 if args.release == "n1.5" else check_n16)(args.export, reference, report)
    read = [b for b in report["backends"].values() if "frames" in b]
    failed = [
        name
        for name, ok in (
            ("loads", report.get("loads")),
            ("normalised", report.get("normalized_max_abs", 0.0) <= 1.0 + 1e-5),
            ("a backend read frames", bool(read)),
            ("off-by-one frames", all(b["off_by_one"] == 0 for b in read)),
            ("quaternion sign flips", report["quaternion_sign_flips"] == 0),
            ("quantiles", report["quantile_error_of_range_max"] <= QUANTILE_BOUND),
            ("stats keys", report["stats_keys"] == sorted(GR00T_STATS)),
            ("timestamps", report["timestamps_round_to_frame_index"]),
            ("rotation", report["rotation_error_deg_max"] < 0.05),
        )
        if not ok
    ]  # fmt: skip
    report["failed"] = failed
    print(json.dumps(report, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
