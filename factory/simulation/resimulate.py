"""Re-simulation: an episode's actions run again from the start its provenance records.

    provenance (placement, fixtures, physics, two arms' joint offsets) + the spec's first seed
    demo's start state
        ──► Scene.set_physics(recorded draw, or another one) ──► Scene.reset_to(start, placement)
            (──► TwoArmScene.offset_joints(recorded joint_offsets))
        ──► step each recorded action ──► states [T, N]

Under the recorded draw the states are the episode's own, bit for bit
(tests/simulation/test_physics.py): generation executes each action as the float32 the dataset
stores, and the placement and the draw are recorded unrounded. Under another draw (`draw=`) they
show what that physics changes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from demofactory.generators.records import AnnotatedDemo
from demofactory.generators.scene_api import Placement
from demofactory.simulation.physics import PhysicsDraw, recorded_physics
from demofactory.simulation.scene import Scene


def resimulate(
    scene: Scene,
    first_demo: AnnotatedDemo,
    provenance: Mapping,
    actions: np.ndarray,
    draw: PhysicsDraw | None | str = "recorded",
) -> np.ndarray:
    """[T, N] states before each of `actions` [T, A], from the episode's recorded start.

    first_demo: the spec's first seed demo (generation starts every attempt from its first
    state); draw: "recorded" (the episode's own), None (nominal) or another `PhysicsDraw`.
    """
    scene.set_physics(recorded_physics(provenance) if draw == "recorded" else draw)
    fixtures = provenance.get("fixtures", first_demo.fixture_poses)
    placement = Placement.from_json(provenance["placement"])
    scene.reset_to(first_demo.start_state, placement, fixtures=fixtures)
    if provenance.get("joint_offsets"):  # a two-arm attempt's placement.joint_noise draw
        scene.offset_joints(provenance["joint_offsets"])
    states = np.empty((len(actions), scene.state_size))
    for t, action in enumerate(actions):
        states[t] = scene.get_state()
        scene.step(action)
    return states
