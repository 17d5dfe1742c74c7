"""Settings of `factory train-eval`: one typed field per CLI flag, its description the flag's help.

Kept apart from `demofactory.train.train_eval` (which imports torch) so that building the CLI's
parser
stays cheap: `factory --help` and every other command must not pay torch's import.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator


class TrainEvalConfig(BaseModel):
    """Training and evaluation settings; every field has a CLI flag of the same name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    horizon: int = Field(16, ge=1, description="H: actions predicted per chunk")
    execute: int = Field(
        8, ge=1, description="actions of each chunk executed before predicting again (<= horizon)"
    )
    temporal_ensemble: float | None = Field(
        None,
        ge=0.0,
        description="ACT's temporal ensemble decay m: predict every step and average the chunks "
        "(off when unset)",
    )
    steps: int = Field(6_000, ge=1, description="gradient steps (the training budget)")
    batch_size: int = Field(256, ge=1, description="samples per gradient step")
    lr: float = Field(1e-3, gt=0.0, description="AdamW peak learning rate, cosine-decayed to 0")
    weight_decay: float = Field(1e-4, ge=0.0, description="AdamW weight decay")
    hidden: int = Field(256, ge=1, description="MLP width")
    layers: int = Field(3, ge=1, description="hidden layers of the MLP")
    rollouts: int = Field(50, ge=0, description="evaluation episodes in the simulator")
    eval_horizon: int | None = Field(
        None, ge=1, description="steps per rollout (unset: the spec's task.horizon)"
    )
    success_hold: int | None = Field(
        None,
        ge=1,
        description="steps success must hold to count (unset: generation.success_hold_steps)",
    )
    seed: int = Field(0, ge=0, description="training seed (initialization, batches)")
    threads: int = Field(1, ge=1, description="torch intra-op threads")
    camera: str | None = Field(
        None,
        description="a camera of the dataset whose frames join the observation through a small "
        "CNN (unset: low-dim only); frames are held in memory (N*3*h*w bytes) and rollouts render "
        "the same camera",
    )
    drop_idle: bool = Field(
        True,
        description="train only on steps where something happens: a human's pauses otherwise "
        "teach the policy to stand still where it paused",
    )
    idle_window: int = Field(
        8,
        ge=1,
        description="a step is idle when, over the next IDLE_WINDOW steps, the eef stays within "
        "IDLE_DISTANCE, the fingers within 1 mm and the gripper command does not change",
    )
    idle_distance: float = Field(
        0.005, ge=0.0, description="metres the eef may move in an idle window"
    )
    time_feature: bool = Field(
        True,
        description="add the step index (over task.horizon) to the observation: without it a "
        "memoryless policy cannot tell a pause from the moment after it (Stack: hold, then "
        "release)",
    )
    policy: Literal["mlp", "vla"] = Field(
        "mlp",
        description="mlp: proprio + object poses from the MuJoCo state (+ --camera); vla: "
        "--camera frames + the instruction + proprio, no object pose (demofactory.train.vla)",
    )
    extra_camera: str | None = Field(
        None, description="vla: a second camera of the dataset (e.g. robot0_eye_in_hand)"
    )
    aux_objects: float = Field(
        1.0,
        ge=0.0,
        allow_inf_nan=False,
        description="vla: weight of an auxiliary training loss that regresses the spec objects' "
        "positions (from the stored MuJoCo state: a privileged target, never an input) from the "
        "image keypoints; it teaches the encoder where the objects are (0: off)",
    )
    fine_keypoints: int = Field(
        16,
        ge=0,
        description="vla: spatial-softmax keypoints per camera read at half the frame's "
        "resolution (besides the 16 at a quarter): small objects located to a few mm (0: none)",
    )
    shuffle_instructions: bool = Field(
        False,
        description="vla: train on instructions permuted across episodes (seeded): the control "
        "that shows what the words are worth",
    )
    sensor_noise: str | None = Field(
        None,
        description="sensor and timing randomization applied by the loader, as JSON "
        '(demofactory.shards.sensor_noise), e.g. \'{"state_std": 0.001, "state_bias_std": 0.002, '
        '"frame_drop": 0.05, "latency": 1, "seed": 0}\': state noise per step and bias per '
        "episode in raw state units (a number, or a list with one per dimension), camera "
        "frame-drop probability, observation latency in steps (unset: none)",
    )
    embodiment: str | None = Field(
        None,
        description="a mixed-robot dataset: train on this robot's episodes only and roll out on "
        "it (the per-robot baseline; unset: one policy on every robot, rolled out on each)",
    )
    eval_physics: str | None = Field(
        None,
        description="roll out under other physics: a YAML file holding a physics: mapping of the "
        "spec section's schema (scene_specs/physics/shifted.yaml: cube friction x0.5, mass x2, "
        "kp x0.6, 2 steps of delay), or the same inline, e.g. '{physics: {kp: 0.6}}'; ranges "
        "are drawn per rollout from its evaluation seed (demofactory.robustness.eval_physics); "
        "unset: nominal",
    )

    @field_validator("sensor_noise", mode="before")
    @classmethod
    def _canonical_noise(cls, value: object) -> str | None:
        # Every setting spelled out, so the report records the defaults that applied too.
        from demofactory.shards.sensor_noise import (
            SensorNoise,  # numpy only: the parser stays cheap
        )

        if value is None:
            return None
        try:
            entry = json.loads(value) if isinstance(value, str) else value
        except json.JSONDecodeError as err:
            raise ValueError(f"not JSON ({err.msg}); e.g. '{{\"state_std\": 0.001}}'") from None
        return json.dumps(SensorNoise.from_json(entry).to_json())

    @field_serializer("sensor_noise")
    def _noise_as_object(self, value: str | None) -> dict | None:
        return None if value is None else json.loads(value)
