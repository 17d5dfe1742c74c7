"""Two ways to lay episodes out in a shard, and the one function that reads both as steps.

    step layout (the default): one WebDataset sample a time step, key e00000042_t0007
        e00000042_t0007.agentview.jpg  .agentview_depth.png  .action.npy [A]  .state.npy [S]
        .sim_state.npy [N]  .meta.json (episode, step, length, instruction, seed, is_first/last;
        embodiment when the episode names one)
    episode layout: one sample an episode, key e00000042
        e00000042.episode.json (episode, length, instruction, seed, embodiment)
        e00000042.action.npy [T, A]  .state.npy [T, S]  .sim_state.npy [T, N]
        e00000042.t0007.agentview.jpg  .t0007.agentview_depth.png ...  (per step: t<step>.<the
        step layout's member suffix>)

    (name, data) of a shard's tar, either layout                       iter_tar
      -> (name, data) of the step layout, byte for byte                expand_members
         (an episode sample: its [T, ...] arrays cut into rows with the .npy header np.save
         gives a row, meta.json written as the step layout's writer writes it)

Every reader of shards (`demofactory.shards.tario.read_samples` for verify, stats and preview;
`demofactory.shards.stages.read_members` for the loader and the exports) passes the tar through
`expand_members`, so everything after it sees step samples whatever the layout, and a
dataset gives the same batches in either. A shard's layout is recognised by its sample
keys (``e<index>`` or ``e<index>_t<step>``); dataset_info.json records the dataset's
(`dataset_shard_layout`).

Why an episode layout: a tar member costs a 512-byte header and pads its data to 512 bytes,
so the step layout's five or six small members cost ~4 kB a step whatever they hold
(measured: 4.1 kB a step for a low-dimensional Lift dataset, ~0.3 kB of it data); the
episode layout pays that once an episode for the arrays and once a frame for images
(`benchmarks/bench_layout.py`).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from typing import Any

import numpy as np
from demofactory.shards.format import (
    ACTION_KEY,
    META_KEY,
    SIM_STATE_KEY,
    STATE_KEY,
    DatasetError,
    Episode,
    depth_member,
    dumps_json,
    sample_key,
    segmentation_member,
)

STEP_LAYOUT = "step"
EPISODE_LAYOUT = "episode"
SHARD_LAYOUTS = (STEP_LAYOUT, EPISODE_LAYOUT)
EPISODE_META_MEMBER = "episode.json"  # the episode layout's meta member
ARRAY_KEYS = (ACTION_KEY, STATE_KEY, SIM_STATE_KEY)  # in the order both layouts write them

_EPISODE_KEY = re.compile(r"e(\d+)")  # a whole key, fullmatch: no "_t<step>"
_STEP_MEMBER = re.compile(r"t(\d+)\.(.+)")  # an episode sample's per-step member suffix
_META_MEMBER = f"{META_KEY}.json"


def episode_key(index: int) -> str:
    """WebDataset key of a whole episode in the episode layout, e.g. ``e00000042``."""
    if index < 0:
        raise ValueError(f"episode index must be >= 0, got {index}")
    return f"e{index:08d}"


def check_shard_layout(layout: str) -> str:
    """`layout` if it is one of `SHARD_LAYOUTS`, else ValueError naming them."""
    if layout not in SHARD_LAYOUTS:
        raise ValueError(f"shard layout must be one of {list(SHARD_LAYOUTS)}, got {layout!r}")
    return layout


def dataset_shard_layout(info: Mapping[str, Any] | None) -> str:
    """The layout dataset_info.json records: its ``shard_layout``, else the spec's
    ``output.shard_layout``, else "step" (datasets written before there was a choice)."""
    if info is None:
        return STEP_LAYOUT
    spec_output = (info.get("spec") or {}).get("output") or {}
    layout = info.get("shard_layout", spec_output.get("shard_layout", STEP_LAYOUT))
    if layout not in SHARD_LAYOUTS:
        raise DatasetError(
            f"dataset_info.json: shard_layout must be one of {list(SHARD_LAYOUTS)}, got {layout!r}"
        )
    return layout


# ---------------------------------------------------------------- writing
# (the step layout's members: `demofactory.shards.writer`)


def episode_members(ep: Episode) -> Iterator[tuple[str, bytes]]:
    """The episode layout: episode.json, the three [T, ...] .npy arrays, then per step its
    frames as ``t<step>.<suffix>`` in the order the step layout writes them."""
    key = episode_key(ep.index)
    yield f"{key}.{EPISODE_META_MEMBER}", dumps_json(episode_meta(ep)).encode("utf-8")
    for name, array in zip(ARRAY_KEYS, _arrays(ep), strict=True):
        yield f"{key}.{name}.npy", npy_bytes(array)
    cameras, depth, segmentation = sorted(ep.images), sorted(ep.depth), sorted(ep.segmentation)
    for t in range(ep.length):
        prefix = f"{key}.t{t:04d}"
        for camera in cameras:
            yield f"{prefix}.{camera}.jpg", ep.images[camera][t]
        for camera in depth:
            yield f"{prefix}.{depth_member(camera)}", ep.depth[camera][t]
        for camera in segmentation:
            yield f"{prefix}.{segmentation_member(camera)}", ep.segmentation[camera][t]


def npy_bytes(array: np.ndarray) -> bytes:
    """`np.save` of `array` (no pickles), as bytes."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def step_meta_bytes(meta: Mapping[str, Any], step: int) -> bytes:
    """A step's meta.json: the episode's meta (episode, length, instruction, seed) plus step,
    is_first, is_last, in the one JSON encoding (`dumps_json`)."""
    return dumps_json(
        {**meta, "step": step, "is_first": step == 0, "is_last": step == meta["length"] - 1}
    ).encode("utf-8")


def episode_meta(ep: Episode) -> dict[str, Any]:
    """What both layouts record once an episode: episode, length, instruction, seed, and the
    embodiment (the robot) when the episode names one."""
    meta = {
        "episode": ep.index,
        "length": ep.length,
        "instruction": ep.instruction,
        "seed": ep.seed,
    }
    if ep.embodiment:
        meta["embodiment"] = ep.embodiment
    return meta


def _arrays(ep: Episode) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return ep.actions, ep.states, ep.sim_states


# ---------------------------------------------------------------- reading


def expand_members(pairs: Iterable[tuple[str, bytes]], source: str) -> Iterator[tuple[str, bytes]]:
    """A shard's (name, data), either layout -> the step layout's (name, data), in order.

    Step samples pass through untouched; the members of an episode sample (adjacent, key
    ``e<index>``) are collected and yielded as its steps, byte for byte what the step
    layout holds for the same episode. A malformed episode sample raises `DatasetError`
    naming `source` and the sample.
    """
    key, members = None, {}
    for name, data in pairs:
        this, _, suffix = name.partition(".")
        if this != key and key is not None:
            yield from _expand(key, members, source)
            key, members = None, {}
        if _EPISODE_KEY.fullmatch(this) is None:
            yield name, data
            continue
        if suffix in members:
            raise DatasetError(f"{source}: member {name} appears twice")
        key, members[suffix] = this, data
    if key is not None:
        yield from _expand(key, members, source)


def _expand(key: str, members: dict[str, bytes], source: str) -> Iterator[tuple[str, bytes]]:
    """One episode sample's members -> its steps' members."""

    def fail(reason: str) -> DatasetError:
        return DatasetError(f"{source}: episode sample {key}: {reason}")

    meta = _read_episode_meta(members.pop(EPISODE_META_MEMBER, None), key, fail)
    length = meta["length"]
    rows: list[tuple[str, np.ndarray, bytes]] = []  # member suffix, array, a row's npy header
    frames: list[list[tuple[str, bytes]]] = [[] for _ in range(length)]
    for suffix, data in members.items():
        step = _STEP_MEMBER.fullmatch(suffix)
        if step is not None:
            t = int(step[1])
            if t >= length:
                raise fail(f"member {suffix} is past the episode's {length} steps")
            frames[t].append((step[2], data))
        elif suffix.endswith(".npy"):
            array = _read_array(data, suffix, fail)
            if array.ndim < 1 or len(array) != length:
                raise fail(f"{suffix} has shape {array.shape}, expected [{length}, ...]")
            rows.append((suffix, array, _row_header(array.dtype.str, array.shape[1:])))
        else:
            raise fail(f"unexpected member {suffix} (expected episode.json, .npy, t<step>.*)")
    step_meta = _step_meta_writer(meta)
    for t in range(length):
        step_key = sample_key(meta["episode"], t)
        for suffix, data in frames[t]:
            yield f"{step_key}.{suffix}", data
        for suffix, array, header in rows:
            yield f"{step_key}.{suffix}", header + array[t].tobytes()
        yield f"{step_key}.{_META_MEMBER}", step_meta(t)


def _step_meta_writer(meta: Mapping[str, Any]):
    """step -> `step_meta_bytes(meta, step)`, the same bytes from a template: json.dumps per
    step cost a tenth of the low-dimensional loader's time (cProfile)."""
    named = {k: meta[k] for k in ("embodiment", "episode", "instruction") if k in meta}
    head = dumps_json(named)[:-1]  # keys sorted: embodiment (when set) comes first
    tail = f', "length": {meta["length"]}, "seed": {json.dumps(meta["seed"])}, "step": '
    last = meta["length"] - 1

    def write(step: int) -> bytes:
        first, end = "true" if step == 0 else "false", "true" if step == last else "false"
        return f'{head}, "is_first": {first}, "is_last": {end}{tail}{step}}}'.encode()

    return write


def _read_episode_meta(data: bytes | None, key: str, fail) -> dict[str, Any]:
    if data is None:
        raise fail(f"no {EPISODE_META_MEMBER}")
    try:
        meta = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise fail(f"{EPISODE_META_MEMBER} is malformed JSON ({exc})") from None
    fields = ("episode", "length", "instruction", "seed")
    if not isinstance(meta, dict) or set(meta) - {"embodiment"} != set(fields):
        raise fail(
            f"{EPISODE_META_MEMBER} must be an object with exactly {list(fields)} "
            "(and optionally embodiment)"
        )
    if not isinstance(meta.get("embodiment", ""), str):
        raise fail(f"{EPISODE_META_MEMBER}: embodiment must be a string")
    for name in ("episode", "length"):
        if isinstance(meta[name], bool) or not isinstance(meta[name], int) or meta[name] < 0:
            raise fail(f"{EPISODE_META_MEMBER}: {name} must be an int >= 0, got {meta[name]!r}")
    if isinstance(meta["seed"], bool) or not isinstance(meta["seed"], int):
        raise fail(f"{EPISODE_META_MEMBER}: seed must be an int, got {meta['seed']!r}")
    if not isinstance(meta["instruction"], str):
        raise fail(f"{EPISODE_META_MEMBER}: instruction must be a string")
    if episode_key(meta["episode"]) != key:
        raise fail(f"{EPISODE_META_MEMBER} says episode {meta['episode']}")
    return meta


def _read_array(data: bytes, suffix: str, fail) -> np.ndarray:
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as exc:
        raise fail(f"{suffix}: {exc}") from None
    if not array.flags.c_contiguous:  # a Fortran-order file: rows would not be its bytes
        array = np.ascontiguousarray(array)
    return array


@lru_cache(maxsize=64)
def _row_header(dtype: str, shape: tuple[int, ...]) -> bytes:
    # The header np.save writes for one row (what the step layout stores), found by saving an
    # empty-valued row: np.lib.format's header writers are private.
    row = np.zeros(shape, dtype=np.dtype(dtype))
    return npy_bytes(row)[: -row.nbytes or None]
