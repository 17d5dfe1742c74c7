"""Every shipped scene spec builds, annotates its seed demos, resets, steps and evaluates predicates.

Adding a spec to scene_specs/ adds it here automatically.
"""

from __future__ import annotations

import numpy as np
import pytest

from factory.resolve import resolve_spec
from factory.sim import Placement
from factory.spec import load_spec
from tests.conftest import SPECS

SPEC_FILES = sorted(SPECS.glob("*.yaml"))


def test_the_shipped_specs_are_found():
    expected = {"lift", "stack", "nut_assembly", "nut_assembly_square", "nut_assembly_round", "pick_place",
                "pick_place_milk", "pick_place_bread", "pick_place_cereal", "pick_place_can", "door"}
    assert {p.stem for p in SPEC_FILES} >= expected


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.stem)
def test_spec_builds_resets_and_steps(path):
    spec = load_spec(path)
    resolved = resolve_spec(spec)
    scene = resolved.scene
    for annotated in resolved.demos:
        assert len(annotated.subtask_ends) == len(spec.subtasks)
        assert list(annotated.subtask_ends) == sorted(annotated.subtask_ends)
    start = resolved.demos[0].demo.states[0] if resolved.demos else None
    scene.reset_to(start, Placement({}))
    original = {name: scene.object_pose(name)[:2, 3] for name in spec.placement.objects}
    offsets = {name: (0.01, -0.01, 0.1) for name in spec.placement.objects}
    scene.reset_to(start if start is not None else scene.get_state(), Placement(offsets))
    for name in spec.placement.objects:
        moved = scene.object_pose(name)[:2, 3]
        np.testing.assert_allclose(moved - original[name], [0.01, -0.01], atol=1e-6)
    for _ in range(5):
        scene.step(np.zeros(7))
    assert np.isfinite(scene.get_state()).all()
    assert scene.proprio().shape == (9,)
    for sub in spec.subtasks:
        if sub.ends_when:  # every predicate evaluates on this task's model
            assert scene.holds(sub.ends_when) in (True, False)
            assert not scene.holds(sub.ends_when) or sub.ends_when.startswith(("near", "inside"))
    assert not scene.success()  # nothing is done five idle steps after a reset
