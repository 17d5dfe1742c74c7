"""Sensor and timing randomization, applied by the loader to each whole episode (seeded).

One dataset serves many sensor settings: the shards hold clean recordings, and
`make_loader(..., sensor_noise=SensorNoise(...))` perturbs what the policy observes
as the episodes stream past. Per episode, on the raw (unnormalized) arrays:

    recorded states [T, S]  (raw units: m, rad, ...)
      -> + bias [S], drawn once per episode         state_bias_std
      -> + noise [T, S], drawn per step             state_std
    recorded frames, per camera: T JPEGs (+ that camera's depth/label PNGs)
      -> dropped frames repeat the camera's previous delivered frame;
         frame 0 is always delivered                frame_drop
    every observation (states, frames, PNGs, extra keys such as sim_state)
      -> the one recorded at max(t - latency, 0)    latency
    then the loader normalizes the (noisy) states and the (untouched) actions

Actions, action chunks, masks, `step` and `episode` stay those of step t: latency
delays what the policy sees, never what it must do. `sim_state` and other extra keys
are simulator ground truth, not a sensor: they get the latency, not the noise.

Seeds: each draw comes from its own stream, ``SeedSequence([seed, epoch, episode,
stream])`` with stream 0 for the state noise, 1 for the bias and crc32(camera name) + 2
for a camera's frame drops. Row t of a stream's draw belongs to step t, so a sample
is a function of (config, epoch, episode, step) alone: the same whatever the worker
count, shard split, shuffling or batch size, and fresh each epoch (`set_epoch`).
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the loader's record; not imported at run time, which would pull in torch
    from demofactory.shards.stages import EpisodeArrays

_STATE_STREAM, _BIAS_STREAM, _CAMERA_STREAM = 0, 1, 2
_STD_EXAMPLE = "e.g. 0.002 (every dimension) or [0.002, 0.002, 0.002, 0.01, ...] (one a dimension)"


@dataclass(frozen=True)
class SensorNoise:
    """What the loader does to observations; all zero (the default) changes nothing.

    Standard deviations are in the state's raw units (before normalization): one number for every
    dimension, or one per dimension of the dataset's state layout (dataset_info.json ``state``).
    """

    state_std: float | tuple[float, ...] = 0.0  # per-step Gaussian noise on the state
    state_bias_std: float | tuple[float, ...] = 0.0  # std of a per-episode constant state offset
    frame_drop: float = 0.0  # probability a camera frame is dropped (the previous one repeats)
    latency: int = 0  # steps: the observation at t is the one recorded at t - latency
    seed: int = 0  # with the epoch, episode and stream: every draw

    def __post_init__(self) -> None:
        for name in ("state_std", "state_bias_std"):
            object.__setattr__(self, name, _check_std(name, getattr(self, name)))
        if not (isinstance(self.frame_drop, (int, float)) and 0.0 <= self.frame_drop <= 1.0):
            raise ValueError(
                f"sensor_noise.frame_drop must be a probability in [0, 1], got "
                f"{self.frame_drop!r}; e.g. 0.05"
            )
        object.__setattr__(self, "frame_drop", float(self.frame_drop))
        for name in ("latency", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(
                    f"sensor_noise.{name} must be an integer >= 0, got {value!r}; e.g. 2"
                )
            object.__setattr__(self, name, int(value))

    @property
    def active(self) -> bool:
        """Whether anything is perturbed (else the loader skips this stage)."""
        return bool(
            np.any(self.state_std) or np.any(self.state_bias_std) or self.frame_drop or self.latency
        )

    def check_state_dim(self, dim: int, where: str = "the state") -> None:
        """Per-dimension stds must have `dim` entries (ValueError naming the field otherwise)."""
        for name in ("state_std", "state_bias_std"):
            value = getattr(self, name)
            if isinstance(value, tuple) and len(value) != dim:
                raise ValueError(
                    f"sensor_noise.{name} has {len(value)} entries, {where} has {dim} "
                    f"dimensions; give one number or {dim}"
                )

    def to_json(self) -> dict[str, Any]:
        """Every setting, JSON-ready (per-dimension stds as lists)."""
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
            for f in dataclasses.fields(self)
        }

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> SensorNoise:
        """The inverse of `to_json`; unknown keys raise a ValueError listing the valid ones."""
        if not isinstance(entry, Mapping):
            raise ValueError(
                f"sensor_noise must be a JSON object, got {entry!r}; "
                'e.g. {"state_std": 0.002, "latency": 1}'
            )
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(entry) - set(known))
        if unknown:
            raise ValueError(f"sensor_noise: unknown keys {unknown}; valid keys are {known}")
        return cls(**entry)


def _check_std(name: str, value: Any) -> float | tuple[float, ...]:
    if isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool):
        values: tuple[float, ...] = (float(value),)
        result: float | tuple[float, ...] = float(value)
    elif (
        isinstance(value, (Sequence, np.ndarray))
        and not isinstance(value, str)
        and np.ndim(value) == 1
        and len(value) > 0
    ):
        try:
            values = tuple(float(v) for v in value)
        except (TypeError, ValueError):
            raise ValueError(
                f"sensor_noise.{name} must hold numbers, got {value!r}; {_STD_EXAMPLE}"
            ) from None
        result = values
    else:
        raise ValueError(
            f"sensor_noise.{name} must be a number or a list, got {value!r}; {_STD_EXAMPLE}"
        )
    if not all(math.isfinite(v) and v >= 0.0 for v in values):
        raise ValueError(
            f"sensor_noise.{name} must be finite and >= 0, got {value!r}; {_STD_EXAMPLE}"
        )
    return result


def resolve_sensor_noise(
    noise: SensorNoise | Mapping[str, Any] | None, info: Mapping[str, Any] | None
) -> SensorNoise | None:
    """`make_loader`'s argument as a SensorNoise, its per-dimension stds checked against the state
    dim of dataset_info.json `info` when known (else against each episode's state as it is read)."""
    if noise is None:
        return None
    if not isinstance(noise, SensorNoise):
        noise = SensorNoise.from_json(noise)
    state = (info or {}).get("state")
    dim = state.get("dim") if isinstance(state, Mapping) else None
    if isinstance(dim, int):
        noise.check_state_dim(dim, "dataset_info.json's state")
    return noise


# ---------------------------------------------------------------- the stage's transform


def perturb_episode(ep: EpisodeArrays, noise: SensorNoise, epoch: int = 0) -> EpisodeArrays:
    """An episode's raw arrays -> what the sensors of `noise` would have delivered (see above).

    `ep.states` must be raw (unnormalized); actions are passed through untouched.
    """
    length = len(ep.states)
    states = np.asarray(ep.states, dtype=np.float64)
    noise.check_state_dim(states.shape[-1], f"episode {ep.index}'s state")
    if np.any(noise.state_bias_std):
        bias = _rng(noise, epoch, ep.index, _BIAS_STREAM).standard_normal(states.shape[-1])
        states = states + bias * np.asarray(noise.state_bias_std)
    if np.any(noise.state_std):
        steps = _rng(noise, epoch, ep.index, _STATE_STREAM).standard_normal(states.shape)
        states = states + steps * np.asarray(noise.state_std)
    frames, pngs = dict(ep.frames), dict(ep.pngs)
    if noise.frame_drop > 0.0:
        cameras = set(frames) | {_png_camera(suffix) for suffix in pngs}
        delivered = {c: delivered_frames(noise, epoch, ep.index, c, length) for c in cameras}
        frames = {c: _pick(f, delivered[c]) for c, f in frames.items()}
        pngs = {s: _pick(p, delivered[_png_camera(s)]) for s, p in pngs.items()}
    extras = dict(ep.extras)
    if noise.latency > 0:
        seen = np.maximum(np.arange(length) - noise.latency, 0)
        states = states[seen]
        frames = {c: _pick(f, seen) for c, f in frames.items()}
        pngs = {s: _pick(p, seen) for s, p in pngs.items()}
        extras = {key: values[seen] for key, values in extras.items()}
    return dataclasses.replace(ep, states=states, frames=frames, pngs=pngs, extras=extras)


def delivered_frames(
    noise: SensorNoise, epoch: int, episode: int, camera: str, length: int
) -> np.ndarray:
    """[T] int: which recorded frame of `camera` is delivered at each step (frame drops only)."""
    stream = _CAMERA_STREAM + zlib.crc32(camera.encode())  # by name: the same whatever is decoded
    dropped = _rng(noise, epoch, episode, stream).random(length) < noise.frame_drop
    dropped[:1] = False  # the first frame is always delivered: nothing earlier to repeat
    return np.maximum.accumulate(np.where(dropped, 0, np.arange(length)))


def _rng(noise: SensorNoise, epoch: int, episode: int, stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([noise.seed, epoch, episode, stream]))


def _pick(items: Sequence[bytes], index: np.ndarray) -> tuple[bytes, ...]:
    return tuple(items[i] for i in index)  # the same bytes objects: no copy, no decode


def _png_camera(suffix: str) -> str:
    return suffix[: -len(".png")].rpartition("_")[0]  # "agentview_depth.png" -> "agentview"
