"""A small behaviour-cloning policy: low-dimensional observations -> a chunk of future actions.

    proprio [9 * arms] (per arm: eef pos, eef quat xyzw, gripper qpos)  ─┐
    sim_state [N] (time, qpos, qvel) ─► object poses ─────────────────────┴─► observation [D]
        ─► normalize ─► MLP ─► normalized action chunk [H, 7 * arms] ─► unnormalize
        ─► delta OSC actions, each arm's gripper in {-1, 1}

The observation per object: position (3, m, world frame), quaternion (4, wxyz,
sign chosen so that w >= 0), position relative to each arm's end effector (3 per
arm, m); then for each pair of objects their relative position (3, m); optionally
the time step t times a scale (1 / the task horizon), last. Object poses are read
straight from the free joints' qpos in the stored MuJoCo state (no mj_forward),
so the same function serves training (on stored states) and rollouts (on the
live state). A two-arm scene (`demofactory.simulation.bimanual`) has arms right
and left, in that order in the proprio and in the actions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import mujoco
import numpy as np
import torch
from torch import nn

PROPRIO_DIM = 9
ACTION_DIM = 7
IMAGE_FEATURES = 64
STD_FLOOR = 1e-2  # a dimension that barely varies in the data (a z height) is scaled by at most 100


@dataclass(frozen=True)
class ObsLayout:
    """Where the spec's objects live in a flattened MuJoCo state, and the observation it gives.

    objects: spec object names, in spec order.
    qpos_adr: per object, the qpos address of its free joint (position at adr..adr+2,
        quat wxyz at +3..+6).
    """

    objects: tuple[str, ...]
    qpos_adr: tuple[int, ...]
    time_scale: float | None = None  # when set, the last dimension is the step index t * time_scale
    # A two-arm scene's arms, right first: PROPRIO_DIM proprio dims each, and each object's
    # position relative to each arm's eef. Empty: one arm (the one-arm names, unchanged).
    arms: tuple[str, ...] = ()

    @property
    def hands(self) -> int:
        return max(1, len(self.arms))

    @property
    def dim(self) -> int:
        n = len(self.objects)
        per_object = 7 + 3 * self.hands
        return (
            PROPRIO_DIM * self.hands
            + per_object * n
            + 3 * (n * (n - 1) // 2)
            + (self.time_scale is not None)
        )

    def names(self) -> list[str]:
        """One label per observation dimension (for reports and debugging)."""
        if not self.arms:
            out = [f"proprio[{i}]" for i in range(PROPRIO_DIM)]
            relative = ["rel_eef"]
        else:
            out = [f"{arm}.proprio[{i}]" for arm in self.arms for i in range(PROPRIO_DIM)]
            relative = [f"rel_{arm}_eef" for arm in self.arms]
        for name in self.objects:
            out += [f"{name}.pos.{a}" for a in "xyz"] + [f"{name}.quat.{a}" for a in "wxyz"]
            out += [f"{name}.{rel}.{a}" for rel in relative for a in "xyz"]
        for a, b in combinations(self.objects, 2):
            out += [f"{a}-{b}.{c}" for c in "xyz"]
        return out + (["time"] if self.time_scale is not None else [])


def make_obs_layout(
    model: mujoco.MjModel,
    bodies: dict[str, int],
    time_scale: float | None = None,
    arms: Sequence[str] = (),
) -> ObsLayout:
    """The layout for spec objects `bodies` (name -> body id); each must have a free joint.
    `arms`: a two-arm scene's arms, right first (empty: one arm)."""
    addresses = []
    for name, body in bodies.items():
        joint = model.body_jntadr[body]
        if joint < 0 or model.jnt_type[joint] != mujoco.mjtJoint.mjJNT_FREE:
            raise ValueError(f"object {name!r} has no free joint: its pose is not in qpos")
        addresses.append(int(model.jnt_qposadr[joint]))
    return ObsLayout(tuple(bodies), tuple(addresses), time_scale, tuple(arms))


def make_observation(
    proprio: np.ndarray,
    sim_state: np.ndarray,
    layout: ObsLayout,
    step: np.ndarray | int | None = None,
) -> np.ndarray:
    """proprio [..., 9 * arms], sim_state [..., N] (time, qpos, qvel) and, for a layout with
    time, the step index [...] -> observation [..., layout.dim] float32."""
    proprio = np.asarray(proprio, dtype=np.float64)
    sim_state = np.asarray(sim_state, dtype=np.float64)
    eefs = [proprio[..., k * PROPRIO_DIM : k * PROPRIO_DIM + 3] for k in range(layout.hands)]
    eef = eefs[0]
    parts, positions = [proprio], []
    for adr in layout.qpos_adr:
        pos = sim_state[..., 1 + adr : 4 + adr]
        quat = sim_state[..., 4 + adr : 8 + adr]
        quat = np.where(quat[..., :1] < 0, -quat, quat)  # q and -q are one rotation
        parts += [pos, quat, *(pos - e for e in eefs)]
        positions.append(pos)
    parts += [a - b for a, b in combinations(positions, 2)]
    if layout.time_scale is not None:
        if step is None:
            raise ValueError("this observation layout includes time: pass the step index")
        parts.append(
            np.broadcast_to(np.asarray(step, dtype=np.float64) * layout.time_scale, eef.shape[:-1])[
                ..., None
            ]
        )
    return np.concatenate(parts, axis=-1).astype(np.float32)


def mean_std(values: np.ndarray, floor: float = STD_FLOOR) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension mean and std (floored) over every axis but the last: ([D], [D]) float32."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1, values.shape[-1])
    return flat.mean(0).astype(np.float32), np.maximum(flat.std(0), floor).astype(np.float32)


class NormalizedPolicy(nn.Module):
    """The normalization of observations [D] and actions [A], held as buffers (saved with the
    weights): `forward` works in normalized units, `act` in raw ones."""

    def register_normalization(self, obs_dim: int, action_dim: int) -> None:
        for name, size in (
            ("obs_mean", obs_dim),
            ("obs_std", obs_dim),
            ("act_mean", action_dim),
            ("act_std", action_dim),
        ):
            self.register_buffer(name, torch.zeros(size) if "mean" in name else torch.ones(size))

    def set_normalization(
        self, obs: tuple[np.ndarray, np.ndarray], act: tuple[np.ndarray, np.ndarray]
    ) -> None:
        """(mean, std) of observations [D] and of actions [A], from the training data."""
        for name, value in zip(
            ("obs_mean", "obs_std", "act_mean", "act_std"), (*obs, *act), strict=True
        ):
            getattr(self, name).copy_(torch.as_tensor(value, dtype=torch.float32))

    def normalize_obs(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs - self.obs_mean) / self.obs_std

    def normalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return (actions - self.act_mean) / self.act_std


def mlp(widths: Sequence[int], out: int) -> nn.Sequential:
    """Linear + GELU through `widths` (input first), then a linear layer to `out`."""
    blocks: list[nn.Module] = []
    for a, b in zip(widths, widths[1:], strict=False):
        blocks += [nn.Linear(a, b), nn.GELU()]
    return nn.Sequential(*blocks, nn.Linear(widths[-1], out))


class ChunkPolicy(NormalizedPolicy):
    """MLP: observation [B, D] (+ one camera image [B, 3, h, w] in [0, 1]) -> actions [B, H, A].

    The normalization of observations and actions is held as buffers. `forward` works in
    normalized units; `act` takes a raw observation (and uint8 image) and returns raw actions.
    With `image_shape`, a small CNN turns the image into IMAGE_FEATURES features joined to the
    observation.
    """

    def __init__(
        self,
        obs_dim: int,
        horizon: int,
        hidden: int = 256,
        layers: int = 3,
        action_dim: int = ACTION_DIM,
        image_shape: tuple[int, int, int] | None = None,
    ):
        super().__init__()
        self.horizon, self.action_dim = horizon, action_dim
        self.encoder = (
            None
            if image_shape is None
            else nn.Sequential(
                nn.Conv2d(image_shape[0], 16, 5, stride=2, padding=2),
                nn.ReLU(),
                nn.Conv2d(16, 32, 3, stride=2, padding=1),
                nn.ReLU(),
                nn.Conv2d(32, 32, 3, stride=2, padding=1),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(4),
                nn.Flatten(),
                nn.Linear(32 * 16, IMAGE_FEATURES),
                nn.ReLU(),
            )
        )
        width = obs_dim + (IMAGE_FEATURES if image_shape is not None else 0)
        self.net = mlp([width] + [hidden] * layers, horizon * action_dim)
        self.register_normalization(obs_dim, action_dim)

    def forward(
        self, obs_normalized: torch.Tensor, image: torch.Tensor | None = None
    ) -> torch.Tensor:
        if self.encoder is not None:
            obs_normalized = torch.cat([obs_normalized, self.encoder(image)], dim=-1)
        return self.net(obs_normalized).view(-1, self.horizon, self.action_dim)

    @torch.no_grad()
    def act(self, obs: np.ndarray, image: np.ndarray | None = None) -> np.ndarray:
        """One raw observation [D] (and image [h, w, 3] uint8) -> raw actions [H, A] float64.

        Not yet clipped or thresholded.
        """
        x = self.normalize_obs(torch.as_tensor(obs, dtype=torch.float32)[None])
        pixels = (
            None
            if image is None
            else torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))[None]
        )
        chunk = (
            self.forward(x, None if pixels is None else pixels.float() / 255.0)[0] * self.act_std
            + self.act_mean
        )
        return chunk.double().numpy()


def masked_l1(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean absolute error over the [B, H] chunk steps where `mask` is True (padding excluded)."""
    per_step = (pred - target).abs().mean(dim=-1)
    return (per_step * mask).sum() / mask.sum().clamp(min=1)


def finalize_action(action: np.ndarray) -> np.ndarray:
    """A raw predicted action [7 * arms] -> what the controller takes: each arm's deltas in
    [-1, 1], its gripper (every 7th, last of its arm) thresholded at 0 to +-1."""
    action = np.asarray(action, dtype=np.float64)
    out = np.clip(action, -1.0, 1.0)
    grippers = action[ACTION_DIM - 1 :: ACTION_DIM]
    out[ACTION_DIM - 1 :: ACTION_DIM] = np.where(grippers > 0, 1.0, -1.0)
    return out


def ensemble(predictions: Sequence[tuple[int, np.ndarray]], t: int, decay: float) -> np.ndarray:
    """Temporal ensembling (ACT): the action for step t from every chunk that covers it.

    predictions: (start step, raw chunk [H, A]) pairs, oldest first. Weights exp(-decay * age_rank),
    the oldest prediction weighted most, as in ACT.
    """
    rows = [chunk[t - start] for start, chunk in predictions if 0 <= t - start < len(chunk)]
    weights = np.exp(-decay * np.arange(len(rows)))
    return np.average(np.stack(rows), axis=0, weights=weights)
