"""Export a dataset as one robomimic hdf5 file.

    DIR (manifest, episodes.jsonl, shards)                                   load_source
      -> SourceEpisode: actions, states, sim_states, JPEG frames              read_episodes
      -> data/demo_<n>: actions, states, rewards, dones, obs/*               _write_demo
      -> data.attrs: total, env_args                                         _env_args
      -> .OUT.tmp-<pid>  --fsync, rename-->  OUT

Layout (robomimic's, https://robomimic.github.io/docs/datasets/overview.html)::

    data.attrs["total"]             steps over all demos
    data.attrs["env_args"]          JSON: env_name, type 1 (robosuite), env_version, env_kwargs
    data/demo_<n>.attrs             num_samples; episode_index, seed, instruction (ours)
    data/demo_<n>/actions           [T, A] float64, the actions as executed
    data/demo_<n>/states            [T, N] float64, flattened MuJoCo states (time, qpos, qvel)
    data/demo_<n>/rewards           [T] float64: 1 on the last step, else 0 (episodes succeed)
    data/demo_<n>/dones             [T] int64: 1 on the last step, else 0
    data/demo_<n>/obs/<camera>_image  [T, H, W, 3] uint8, upright (as robomimic's env wrapper
                                    returns them)
    data/demo_<n>/obs/<camera>_depth  [T, H, W, 1] float32 metres, 0 = no reading (cameras with
                                    depth; robomimic's wrapper also gives real depth in metres)
    data/demo_<n>/obs/<camera>_seg    [T, H, W, 1] int32 labels as stored (cameras with
                                    segmentation; the dataset's attrs "seg_mode" says
                                    geom/body/object, see demofactory.shards.format)
    data/demo_<n>/obs/robot0_<part> [T, k] float64, state.npy split by dataset_info's state layout
                                    (eef_pos -> robot0_eef_pos, eef_quat_xyzw -> robot0_eef_quat
                                    (x, y, z, w), gripper_qpos -> robot0_gripper_qpos)

Demos are numbered 0..N-1 in the order the shards hold them. No ``next_obs``
(robomimic's BC-family configs set ``train.hdf5_load_next_obs = False``) and no
``mask/`` (no train/valid split is implied).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from demofactory.shards.export_source import (
    CameraInfo,
    Source,
    SourceEpisode,
    decode_jpeg,
    load_source,
    read_episodes,
)
from demofactory.shards.format import (
    DatasetError,
    ExportError,
    decode_depth_png,
    decode_segmentation_png,
    fsync_path,
)

ROBOSUITE_ENV_TYPE = 1  # robomimic's EnvType.ROBOSUITE_TYPE
# dataset_info's state layout name -> robomimic's observation key (robosuite's robot0_ names)
OBS_KEYS = {
    "eef_pos": "robot0_eef_pos",
    "eef_quat_xyzw": "robot0_eef_quat",
    "gripper_qpos": "robot0_gripper_qpos",
}


def export_robomimic(dataset_dir: Path, out_hdf5: Path) -> dict[str, Any]:
    """Write the dataset at `dataset_dir` as the robomimic hdf5 file `out_hdf5`.

    `out_hdf5` must not exist; the file is written under a temporary name beside
    it and renamed once complete, so a failed export leaves nothing. An
    unreadable dataset raises `DatasetError`, an existing output `ExportError`. Returns a
    summary: out_hdf5, demos, total (steps), env_name, obs_keys.
    """
    source = load_source(dataset_dir)
    out = Path(out_hdf5)
    if out.exists() or out.is_symlink():
        raise ExportError(f"{out}: already exists; choose a new output file")
    env_args = _env_args(source)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        demos, total, obs_keys = _write_file(tmp, source, env_args)
        fsync_path(tmp)
        os.replace(tmp, out)
        fsync_path(out.parent)
    except DatasetError as exc:  # the same class, with the dataset's path in front
        tmp.unlink(missing_ok=True)
        raise DatasetError(f"{source.dir}: not a readable dataset ({exc})") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return {
        "out_hdf5": out,
        "demos": demos,
        "total": total,
        "env_name": env_args["env_name"],
        "obs_keys": obs_keys,
    }


def _write_file(
    path: Path, source: Source, env_args: Mapping[str, Any]
) -> tuple[int, int, list[str]]:
    demos, total, obs_keys = 0, 0, []
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        for n, episode in enumerate(read_episodes(source)):
            obs_keys = _write_demo(data.create_group(f"demo_{n}"), episode, source)
            demos, total = n + 1, total + episode.length
        data.attrs["total"] = total
        data.attrs["env_args"] = json.dumps(env_args)
    return demos, total, obs_keys


def _write_demo(group: h5py.Group, episode: SourceEpisode, source: Source) -> list[str]:
    """One demo's datasets and attributes; returns its observation keys."""
    length = episode.length
    group.attrs["num_samples"] = length
    group.attrs["episode_index"] = episode.record.index
    group.attrs["seed"] = episode.record.seed
    group.attrs["instruction"] = episode.record.instruction
    group.create_dataset("actions", data=episode.actions.astype(np.float64))
    group.create_dataset("states", data=episode.sim_states)
    last = np.arange(length) == length - 1
    group.create_dataset("rewards", data=last.astype(np.float64))
    group.create_dataset("dones", data=last.astype(np.int64))
    obs = group.create_group("obs")
    for key, values in split_state(episode.states, source.state_layout).items():
        obs.create_dataset(key, data=values.astype(np.float64))
    for camera in source.cameras:
        obs.create_dataset(
            f"{camera.name}_image", data=_images(episode.frames[camera.name], camera)
        )
        if camera.depth:
            depth = _planes(episode.depth[camera.name], camera, decode_depth_png)
            obs.create_dataset(f"{camera.name}_depth", data=depth).attrs["unit"] = "m"
        if camera.segmentation != "none":
            labels = _planes(episode.segmentation[camera.name], camera, decode_segmentation_png)
            obs.create_dataset(f"{camera.name}_seg", data=labels).attrs["seg_mode"] = (
                camera.segmentation
            )
    return sorted(obs)


def split_state(states: np.ndarray, layout: Sequence[tuple[str, int]]) -> dict[str, np.ndarray]:
    """[T, S] states -> robomimic observation key -> [T, k] columns, by the layout's (name, size)
    parts."""
    parts, start = {}, 0
    for name, size in layout:
        parts[OBS_KEYS.get(name, f"robot0_{name}")] = states[:, start : start + size]
        start += size
    return parts


def _images(frames: Sequence[bytes], camera: CameraInfo) -> np.ndarray:
    return np.stack([decode_jpeg(frame, camera) for frame in frames])


def _planes(
    frames: Sequence[bytes], camera: CameraInfo, decode: Callable[[bytes], np.ndarray]
) -> np.ndarray:
    """T single-channel PNGs -> [T, H, W, 1]; a size not the camera's raises `DatasetError`."""
    planes = np.stack([decode(frame) for frame in frames])
    if planes.shape[1:] != (camera.height, camera.width):
        raise DatasetError(
            f"a {camera.name} depth/segmentation frame is {planes.shape[2]}x{planes.shape[1]}, "
            f"dataset_info.json says {camera.width}x{camera.height}"
        )
    return planes[..., None]


def _env_args(source: Source) -> dict[str, Any]:
    """robomimic's env metadata: what `EnvRobosuite(**env_kwargs)` needs to rebuild the env."""
    task = (source.info.get("spec") or {}).get("task") or {}
    env_name = task.get("env") or source.info.get("env")
    robot = task.get("robot") or source.info.get("robot")
    robots = source.info.get("embodiments") or {}
    if len(robots) > 1:  # robomimic's env_args rebuild one env: one robot, one state size
        raise ExportError(
            f"{source.dir}: a mixed-robot dataset ({', '.join(sorted(robots))}); a robomimic "
            "file replays its states in one robot's env: export to lerobot or gr00t instead"
        )
    if not env_name or not robot:
        raise ExportError(
            f"{source.dir}: dataset_info.json names no env or robot "
            "(spec.task.env, spec.task.robot)"
        )
    version, controller = _robosuite_controller(robot)
    env_kwargs: dict[str, Any] = {
        "has_renderer": False,
        "has_offscreen_renderer": bool(source.cameras),
        "ignore_done": True,
        "use_object_obs": True,
        "use_camera_obs": bool(source.cameras),
        "control_freq": task.get("control_freq", source.fps),
        "controller_configs": controller,
        "robots": [robot],
        "reward_shaping": False,
    }
    if source.cameras:
        env_kwargs.update(
            camera_names=[camera.name for camera in source.cameras],
            camera_heights=[camera.height for camera in source.cameras],
            camera_widths=[camera.width for camera in source.cameras],
            camera_depths=[camera.depth for camera in source.cameras],
        )
    return {
        "env_name": env_name,
        "type": ROBOSUITE_ENV_TYPE,
        "env_version": version,
        "env_kwargs": env_kwargs,
    }


def _robosuite_controller(robot: str) -> tuple[str, dict[str, Any]]:
    """robosuite's version and the controller config generation used
    (`demofactory.simulation.scene.make_env`:
    BASIC)."""
    # the same filter is added once only
    logging.getLogger("robosuite_logs").addFilter(_errors_only)
    import robosuite
    from robosuite.controllers import load_composite_controller_config

    try:
        controller = load_composite_controller_config(controller="BASIC", robot=robot)
    except Exception as exc:  # robosuite raises bare Exceptions and ValueErrors for unknown robots
        raise ExportError(
            f"robosuite has no controller config for robot {robot!r}: {exc}"
        ) from None
    return robosuite.__version__, controller


def _errors_only(record: logging.LogRecord) -> bool:
    # robosuite logs a page of non-actionable warnings at import; keep its errors.
    return record.levelno >= logging.ERROR
