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
    assert {p.name for p in SPEC_FILES} >= {"lift.yaml", "stack.yaml"}


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.stem)
def test_spec_builds_resets_and_steps(path):
    spec = load_spec(path)
    resolved = resolve_spec(spec)
    scene = resolved.scene
    for annotated in resolved.demos:
        assert len(annotated.subtask_ends) == len(spec.subtasks)
        assert list(annotated.subtask_ends) == sorted(annotated.subtask_ends)
    start = resolved.demos[0].demo.states[0]
    offsets = {name: (0.01, -0.01, 0.1) for name in spec.placement.objects}
    scene.reset_to(start, Placement(offsets))
    for name in spec.placement.objects:
        moved = scene.object_pose(name)[:2, 3]
        original = resolved.demos[0].object_poses[name][0][:2, 3]
        np.testing.assert_allclose(moved - original, [0.01, -0.01], atol=1e-6)
    for _ in range(5):
        scene.step(np.zeros(7))
    assert np.isfinite(scene.get_state()).all()
    assert scene.proprio().shape == (9,)
    for sub in spec.subtasks:
        if sub.ends_when:
            assert scene.holds(sub.ends_when) in (True, False)
    assert not scene.success()  # nothing is done five idle steps after a reset
