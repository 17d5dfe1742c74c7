"""A dataset made by a released version must still resume: the shipped specs' fingerprints as
released (tests/data/released_fingerprints.json, from main at the commit it names) are the same
today. A spec field added since is left out of the fingerprint at its default (`ADDED_LATER`)."""

import json
from pathlib import Path

import pytest
from demofactory.specs.spec import ADDED_LATER, load_spec

ROOT = Path(__file__).resolve().parents[2]
RELEASED = json.loads((ROOT / "tests/data/released_fingerprints.json").read_text())


@pytest.mark.parametrize("spec", sorted(RELEASED["fingerprints"]))
def test_released_fingerprint_unchanged(spec):
    expected = RELEASED["fingerprints"][spec]
    now = load_spec(ROOT / spec).fingerprint()
    assert now == expected, (
        f"{spec}: the fingerprint changed since {RELEASED['commit']}, so datasets made then no "
        "longer resume; a new spec field must be listed in demofactory.specs.spec.ADDED_LATER "
        "with its "
        "default"
    )


def test_a_field_set_off_its_default_changes_the_fingerprint():
    base = load_spec(ROOT / "scene_specs/lift.yaml")
    assert "generation.plan_checks" in ADDED_LATER
    other = load_spec(ROOT / "scene_specs/lift.yaml", {"generation.plan_checks": 500})
    assert other.fingerprint() != base.fingerprint()
