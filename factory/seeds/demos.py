"""Seed demos: read robosuite's raw collection hdf5 and robomimic's hdf5.

robosuite raw:  data.attrs["env"], data/demo_N/{states, actions}
robomimic:      data.attrs["env_args"] (JSON with env_name), data/demo_N/{states, actions, obs/*}

The recording robot comes from `env_info` (robosuite) or `env_args.env_kwargs` (robomimic).

The MuJoCo states are the ground truth: replaying stored actions open loop does
not reproduce them across robosuite versions.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import h5py
import numpy as np
from demofactory.errors import UserError
from demofactory.generators.records import SeedDemo


def load_seed_demos(path: Path, arms: int = 1, robots: int | None = None) -> list[SeedDemo]:
    """All demos of one file, in numeric order (demo_2 before demo_10).

    `arms`: 2 for a two-arm spec (task.two_arm): the file must say it was recorded with a pair
    of one robot (robots [Panda, Panda]); SeedDemo.robot is then that robot. `robots`: 1 for
    one robot with two arms of its own (task.two_arm single-robot: robots [GR1ArmsOnly])."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: seed demo file not found")
    try:
        handle = h5py.File(path, "r")
    except OSError as err:
        raise UserError(f"{path}: not a readable hdf5 file ({err})") from None
    with handle as f:
        if "data" not in f:
            raise UserError(f"{path}: expected a group 'data' (robosuite or robomimic demo file)")
        data = f["data"]
        env_name = _env_name(data.attrs)
        robot = _robot(path, data.attrs, arms, robots)
        names = sorted((k for k in data if k.startswith("demo")), key=_demo_number)
        if not names:
            raise UserError(f"{path}: no demo_N groups under 'data'")
        return [_read_demo(path, data[name], name, env_name, robot) for name in names]


def _read_demo(path: Path, group: h5py.Group, name: str, env_name: str, robot: str) -> SeedDemo:
    if not isinstance(group, h5py.Group):
        raise UserError(
            f"{path}: data/{name}: expected a group holding 'states' and 'actions', got a dataset"
        )
    for key in ("states", "actions"):
        if key not in group:
            raise UserError(f"{path}: data/{name}: missing dataset {key!r}")
        item = group[key]
        if not isinstance(item, h5py.Dataset) or item.dtype.kind not in "fiu":
            got = f"a dataset of {item.dtype}" if isinstance(item, h5py.Dataset) else "a group"
            raise UserError(
                f"{path}: data/{name}/{key}: expected a numeric array [T, N], got {got}"
            )
    states = np.asarray(group["states"][()], dtype=np.float64)
    actions = np.asarray(group["actions"][()], dtype=np.float64)
    if states.ndim != 2 or actions.ndim != 2 or len(states) != len(actions) or len(states) < 2:
        raise UserError(
            f"{path}: data/{name}: expected states [T, N] and actions [T, A] with equal T >= 2, "
            f"got {states.shape} and {actions.shape}"
        )
    if not np.isfinite(states).all():
        raise UserError(f"{path}: data/{name}: states contain NaN or infinity")
    if not np.isfinite(actions).all():
        step = int(np.argwhere(~np.isfinite(actions))[0][0])
        raise UserError(
            f"{path}: data/{name}: actions contain NaN or infinity (first at step {step})"
        )
    return SeedDemo(
        name=name,
        source=path,
        env_name=env_name,
        states=states,
        actions=actions,
        fixture_poses=_fixture_poses(path, group, name),
        robot=robot,
    )


def _fixture_poses(path: Path, group: h5py.Group, name: str) -> dict[str, list[float]] | None:
    """`fixture_poses` (JSON, by `factory script`): fixtures' poses that robosuite re-draws."""
    text = group.attrs.get("fixture_poses")
    if text is None:
        return None
    try:
        poses = json.loads(text)
        ok = isinstance(poses, dict) and all(
            isinstance(v, list) and len(v) == 7 and all(isinstance(x, (int, float)) for x in v)
            for v in poses.values()
        )
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise UserError(
            f"{path}: data/{name}: attribute fixture_poses: expected JSON "
            '{"body": [x, y, z, qw, qx, qy, qz], ...}'
        )
    return {str(k): [float(x) for x in v] for k, v in poses.items()}


def recorded_env_configuration(path: Path) -> str:
    """The two-arm layout a file was recorded in: `env_configuration` of robosuite's `env_info`
    (or robomimic's `env_args.env_kwargs`); "" when the file does not say. Read after
    `load_seed_demos`, which has checked the file."""
    with h5py.File(path, "r") as f:
        attrs = f["data"].attrs
        for key, inner in (("env_info", ()), ("env_args", ("env_kwargs",))):
            try:
                info = json.loads(attrs[key]) if key in attrs else {}
                for name in inner:
                    info = info.get(name, {})
                value = info.get("env_configuration")
            except (TypeError, ValueError, AttributeError):
                continue
            if isinstance(value, str) and value:
                return value
    return ""


def _env_name(attrs) -> str:
    if "env_args" in attrs:  # robomimic
        try:
            return str(json.loads(attrs["env_args"]).get("env_name", ""))
        except (TypeError, ValueError):
            return ""
    return str(attrs.get("env", ""))


def _robot(path: Path, attrs, arms: int = 1, robots_expected: int | None = None) -> str:
    """The robot that recorded the file: robosuite's `env_info` or robomimic's `env_args`.

    Panda when neither says: robosuite's collection scripts and robomimic's datasets default
    to it, and files older than `env_info` (robosuite < 1.0) were all recorded with it.
    """
    for key, inner in (("env_info", ()), ("env_args", ("env_kwargs",))):
        if key not in attrs:
            continue
        try:
            info = json.loads(attrs[key])
            for name in inner:
                info = info.get(name, {})
            robots = info.get("robots")
        except (TypeError, ValueError, AttributeError):
            continue
        if arms == 2:
            return _pair_robot(path, key, robots, single=robots_expected == 1)
        if isinstance(robots, list) and len(robots) == 1:
            robots = robots[0]
        if isinstance(robots, str) and robots:
            return robots
        if robots:
            raise UserError(
                f"{path}: data.attrs[{key!r}]: recorded with robots {robots!r}; "
                "expected one single-arm robot"
            )
    return "Panda"


def _pair_robot(path: Path, key: str, robots, single: bool = False) -> str:
    """The robot of a two-arm file's `robots` (a pair of one robot; `single`: one robot with
    two arms of its own), else a UserError."""
    if isinstance(robots, str):
        robots = [robots]
    if single and isinstance(robots, list) and len(robots) == 1 and isinstance(robots[0], str):
        return robots[0]  # GR1ArmsOnly: the spec's check compares the robot's name
    if not single and isinstance(robots, list) and len(robots) == 2 and robots[0] == robots[1]:
        return str(robots[0])
    if single:
        raise UserError(
            f"{path}: data.attrs[{key!r}]: recorded with robots {robots!r}; a single-robot "
            "two-arm spec expected demos of one robot with two arms, e.g. ['GR1ArmsOnly']"
        )
    raise UserError(
        f"{path}: data.attrs[{key!r}]: recorded with robots {robots!r}; a two-arm spec "
        "(task.two_arm) expected demos of a pair of one robot, e.g. ['Panda', 'Panda'] "
        "(a one-arm demo given to a two-arm spec?)"
    )


def _demo_number(name: str) -> tuple[int, str]:
    match = re.search(r"(\d+)$", name)
    return (int(match.group(1)) if match else -1, name)
