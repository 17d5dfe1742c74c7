"""`factory annotate --suggest` on every human demo, through the CLI: the fragment it prints,
pasted into the shipped spec in place of its objects/subtasks/placement, is accepted by
`factory annotate` and cuts each demo into the shipped spec's segments, body for body.

And `touching(a, b)`, the predicate the suggestions use for a hand that pushes or presses
(`hand`: the gripper).
"""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import yaml
from demofactory.cli.main import main
from demofactory.errors import SpecError
from demofactory.generators.predicates import parse_predicate
from demofactory.specs.spec import load_raw_spec, load_spec

from tests.conftest import DEMOS, SPECS

# Every human demo shipped (robosuite's own recordings), and the spec written for its task.
HUMAN_DEMOS = sorted(DEMOS.glob("*_robosuite*.hdf5"))
SHIPPED = {
    "Lift": "lift.yaml",
    "Stack": "stack.yaml",
    "NutAssembly": "nut_assembly.yaml",
    "PickPlace": "pick_place.yaml",
}


def _run_main(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _env(demo) -> str:
    with h5py.File(demo, "r") as f:
        return str(f["data"].attrs["env"])


def _spec_with(demo, path, **sections) -> dict:
    """The shipped spec of `demo`'s task seeded by `demo` alone, `sections` replaced (None:
    removed), written to `path`."""
    raw = load_raw_spec(SPECS / SHIPPED[_env(demo)])
    raw["seed_demos"] = [str(demo)]
    raw.pop("script", None)  # its waypoints name the shipped objects
    for key, value in sections.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return raw


def _annotated_bodies(capsys, path, objects: dict[str, str]) -> list[list[str]]:
    """`factory annotate --json` of `path`: per demo, the body of each segment's object."""
    code, out, err = _run_main(capsys, "annotate", path, "--json")
    assert code == 0, err
    return [[objects[row["object"]] for row in d["segments"]] for d in json.loads(out)["demos"]]


def test_there_is_a_shipped_spec_for_every_human_demo():
    assert len(HUMAN_DEMOS) == 5, HUMAN_DEMOS
    assert {_env(d) for d in HUMAN_DEMOS} == set(SHIPPED)


@pytest.mark.sim
@pytest.mark.parametrize("demo", HUMAN_DEMOS, ids=lambda p: p.stem)
def test_the_suggestion_pasted_in_cuts_each_demo_as_the_shipped_spec(demo, tmp_path, capsys):
    gone = {"objects": None, "subtasks": None, "placement": None, "symmetry": None}
    _spec_with(demo, tmp_path / "bare.yaml", **gone)  # a task and the demo: nothing else
    code, text, err = _run_main(capsys, "annotate", "--suggest", tmp_path / "bare.yaml")
    assert code == 0, err
    fragment = yaml.safe_load(text)
    assert set(fragment) <= {"objects", "subtasks", "placement", "generation"}, fragment
    assert fragment["generation"] == {"transit": "plan", "subtask_retries": 1}
    assert "ends_when" not in fragment["subtasks"][-1]  # the last ends at the task's success
    # Each subtask comes under comments saying what each demo showed, and from which step.
    lines = text.splitlines()
    entries = [i for i, line in enumerate(lines) if line.startswith("  - object: ")]
    assert len(entries) == len(fragment["subtasks"])
    for i in entries:
        above = []
        while lines[i - 1 - len(above)].startswith("  #"):
            above.append(lines[i - 1 - len(above)].lstrip(" #"))
        said = " ".join(reversed(above))
        assert said.startswith("demo_") and " from step " in said, said

    shipped = _spec_with(demo, tmp_path / "shipped.yaml")
    _spec_with(demo, tmp_path / "pasted.yaml", symmetry=None, **fragment)
    mine = _annotated_bodies(capsys, tmp_path / "pasted.yaml", fragment["objects"])
    theirs = _annotated_bodies(capsys, tmp_path / "shipped.yaml", shipped["objects"])
    assert mine == theirs


@pytest.mark.sim
def test_a_demo_file_alone_gives_a_whole_spec_that_annotates(tmp_path, capsys):
    demo = DEMOS / "lift_panda_1demo_robosuite100.hdf5"
    code, text, err = _run_main(capsys, "annotate", "--suggest", demo)
    assert code == 0, err
    path = tmp_path / "lift_from_demo.yaml"
    path.write_text(text)
    spec = load_spec(path)  # name, task (env and robot from the file), instructions: complete
    assert (spec.task.env, spec.task.robot) == ("Lift", "Panda")
    assert spec.objects == {"cube": "cube_main"}
    assert [(s.object, s.ends_when) for s in spec.subtasks] == [
        ("cube", "grasped(cube)"),
        ("cube", None),
    ]
    code, out, err = _run_main(capsys, "annotate", path, "--json")
    assert code == 0, err
    assert [r["ends_when"] for r in json.loads(out)["demos"][0]["segments"]] == [
        "grasped(cube)",
        "success",
    ]


# --- touching(a, b) ---------------------------------------------------------------------------


def test_touching_names_the_hand_which_is_no_spec_object(tmp_path):
    predicate = parse_predicate("touching(hand, cube)")
    assert predicate.objects == ("hand", "cube") and predicate.all_objects() == {"cube"}
    assert parse_predicate("not(touching(cube, hand))").all_objects() == {"cube"}
    with pytest.raises(ValueError, match="two different things"):
        parse_predicate("touching(hand, hand)")
    path = tmp_path / "lift.yaml"
    raw = load_raw_spec(SPECS / "lift.yaml")
    raw["subtasks"][0]["ends_when"] = "touching(hand, cube)"
    path.write_text(yaml.safe_dump(raw))
    assert load_spec(path).subtasks[0].ends_when == "touching(hand, cube)"
    raw["subtasks"][0]["ends_when"] = "contact(hand, cube)"  # only touching knows the hand
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError, match="an argument of touching only"):
        load_spec(path)


@pytest.mark.sim
def test_touching_holds_while_the_fingers_are_on_the_cube():
    from demofactory.seeds.demos import load_seed_demos
    from demofactory.simulation.scene import Scene

    scene = Scene(load_spec(SPECS / "lift.yaml"))
    demo = load_seed_demos(DEMOS / "lift_panda_1demo_robosuite100.hdf5")[0]
    held, touched = [], []
    for t, state in enumerate(demo.states):
        scene.set_state(state)
        scene.gripper_closed = bool(demo.actions[t, -1] > 0)
        held.append(scene.holds("grasped(cube)"))
        touched.append(scene.holds("touching(hand, cube)"))
    held, touched = np.array(held), np.array(touched)
    assert held.any() and not touched[:100].any()  # the hand starts well away from the cube
    assert touched[held].all()  # a grasp touches
    assert scene.holds("touching(cube, hand)") == scene.holds("touching(hand, cube)")
