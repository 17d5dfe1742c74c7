"""`load_spec`: the shipped specs load; every mistake is a SpecError pointing at its YAML field."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from demofactory.build.run import dataset_info
from demofactory.errors import SpecError, UserError
from demofactory.shards import DATASET_INFO_FILENAME, load_dataset_info, save_dataset_info
from demofactory.specs.spec import SceneSpec, load_raw_spec, load_spec, load_stored_spec

SPECS = Path(__file__).parents[2] / "scene_specs"


def _raw(name: str = "stack") -> dict:
    return load_raw_spec(SPECS / f"{name}.yaml")  # with `extends:` resolved


def _write(tmp_path: Path, raw, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _error(tmp_path: Path, raw, overrides: dict | None = None) -> SpecError:
    path = _write(tmp_path, raw)
    with pytest.raises(SpecError) as info:
        load_spec(path, overrides)
    err = info.value
    assert isinstance(err, UserError)  # so the CLI prints it as one line, exit code 2
    assert err.where == str(path)
    assert str(err).startswith(f"{path}: ")
    return err


@pytest.mark.parametrize("name", ["lift", "stack"])
def test_shipped_specs_load(name):
    path = SPECS / f"{name}.yaml"
    spec = load_spec(path)
    assert isinstance(spec, SceneSpec)
    assert spec.name == name
    assert spec.task.env == name.capitalize()
    assert spec.path == path.resolve()
    # Seed demos are written relative to the spec file, not the working directory.
    for rel in spec.seed_demos:
        assert spec.resolve_path(rel).is_file()


def test_omitted_sections_take_defaults(tmp_path):
    raw = _raw()
    for key in ("placement", "generation", "cameras", "render", "output", "seed"):
        raw.pop(key, None)
    spec = load_spec(_write(tmp_path, raw))
    assert spec.seed == 0
    assert spec.generation.attempts == 100
    assert spec.cameras == []
    assert spec.output_dir() == Path("out") / "stack"


# --- one wrong field -> SpecError.field names it ---------------------------------------


def _set(path: str, value):
    """A mutation setting a dotted/indexed path, e.g. `subtasks.0.ends_when`."""

    def mutate(raw):
        *parents, leaf = path.split(".")
        node = raw
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(leaf) if isinstance(node, list) else leaf] = value

    return mutate


@pytest.mark.parametrize(
    ("mutate", "field", "expected"),
    [
        # wrong type
        (_set("generation.attempts", "many"), "generation.attempts", "valid integer"),
        (_set("task.horizon", [1000]), "task.horizon", "valid integer"),
        (_set("generation", 5), "generation", "valid dictionary"),
        (_set("render.shadows", "sometimes"), "render.shadows", "valid boolean"),
        # out of range
        (_set("generation.attempts", 0), "generation.attempts", "greater than or equal to 1"),
        (
            _set("generation.action_noise", 2.0),
            "generation.action_noise",
            "less than or equal to 1",
        ),
        (_set("seed", -1), "seed", "greater than or equal to 0"),
        (_set("cameras.0.width", 4), "cameras[0].width", "greater than or equal to 8"),
        (_set("name", "my dataset"), "name", "pattern"),
        # cross references between sections
        (_set("subtasks.1.object", "sphere"), "subtasks[1].object", "unknown object 'sphere'"),
        (
            _set("subtasks.0.ends_when", "held(cubeA)"),
            "subtasks[0].ends_when",
            "unknown predicate 'held'",
        ),
        (
            _set("subtasks.0.ends_when", "grasped(cubeA, cubeB)"),
            "subtasks[0].ends_when",
            "grasped(object1)",
        ),
        (
            _set("subtasks.0.ends_when", "grasped(sphere)"),
            "subtasks[0].ends_when",
            "unknown object 'sphere'",
        ),
        (
            _set("subtasks.0.ends_when", "touching(hand, sphere)"),
            "subtasks[0].ends_when",
            "unknown object 'sphere' (expected one of: cubeA, cubeB, hand (the robot's gripper))",
        ),
        (
            _set("task.success", "all(on_top(cubeA, cubeB), not(touching(sphere, cubeA)))"),
            "task.success",
            "unknown object 'sphere' (expected one of: cubeA, cubeB, hand",
        ),
        (
            _set("objects.hand", "cubeA_main"),
            "objects.hand",
            "'hand' is reserved for the robot's gripper",
        ),
        (_set("subtasks.0.end_offset", [3, 1]), "subtasks[0].end_offset", "0 <= lo <= hi"),
        (
            _set("placement.objects.sphere", {"x": [0, 0]}),
            "placement.objects.sphere",
            "unknown object",
        ),
        (
            _set("placement.objects.cubeA", {"x": [0.1, -0.1]}),
            "placement.objects.cubeA",
            "lo <= hi",
        ),
        (_set("cameras.1", {"name": "agentview"}), "cameras", "unique"),
        (_set("task.controller", "JOINT_VELOCITY"), "task.controller", "OSC_POSE"),
        (_set("seed_demos", "demos/x.hdf5"), "seed_demos", "valid list"),
    ],
)
def test_bad_field_is_named(tmp_path, mutate, field, expected):
    raw = _raw()
    mutate(raw)
    err = _error(tmp_path, raw)
    assert err.field == field
    assert expected in err.message
    assert f": {field}: " in str(err)


def test_unknown_predicate_lists_valid_names(tmp_path):
    raw = _raw()
    raw["subtasks"][0]["ends_when"] = "held(cubeA)"
    err = _error(tmp_path, raw)
    for name in ("grasped", "lifted", "on_top", "near", "contact", "success"):
        assert name in err.message


def test_unknown_object_lists_the_spec_objects(tmp_path):
    raw = _raw()
    raw["subtasks"][1]["object"] = "sphere"
    assert "expected one of: cubeA, cubeB" in _error(tmp_path, raw).message


def test_only_one_subtask_may_end_at_the_task_success(tmp_path):
    raw = _raw()
    del raw["subtasks"][0]["ends_when"]  # now both subtasks would end at the task's success
    err = _error(tmp_path, raw)
    assert err.field == "subtasks[1].ends_when"
    assert "only one subtask may end at the task's success" in err.message


def test_symmetry_names_a_spec_object(tmp_path):
    raw = _raw()
    raw["symmetry"] = {"sphere": 4}
    err = _error(tmp_path, raw)
    assert err.field == "symmetry.sphere" and "expected one of: cubeA, cubeB" in err.message


def test_task_success_is_checked_like_subtask_predicates(tmp_path):
    raw = _raw()
    raw["task"]["success"] = "all(on_top(cubeA, cubeB), not(grasped(cubeC)))"
    err = _error(tmp_path, raw)
    assert err.field == "task.success" and "unknown object 'cubeC'" in err.message
    raw["task"]["success"] = "any(success, grasped(cubeA))"
    assert "cannot refer to itself" in _error(tmp_path, raw).message


@pytest.mark.parametrize(
    ("section", "key", "field"),
    [
        ("generation", "atempts", "generation.atempts"),
        ("task", "horizen", "task.horizen"),
        (None, "camera", "camera"),
    ],
)
def test_unknown_key_lists_valid_keys(tmp_path, section, key, field):
    raw = _raw()
    (raw[section] if section else raw)[key] = 1
    err = _error(tmp_path, raw)
    assert err.field == field
    assert "unknown key" in err.message
    model = {
        "generation": "attempts, target_successes, attempts_per_shard",
        "task": "env, robot",
        None: "name, seed, task",
    }
    assert model[section] in err.message


def test_missing_required_field(tmp_path):
    raw = _raw()
    del raw["task"]["env"]
    err = _error(tmp_path, raw)
    assert err.field == "task.env"
    assert "required" in err.message


def test_every_error_is_reported_at_once(tmp_path):
    raw = _raw()
    raw["generation"]["attempts"] = 0
    raw["render"]["jpeg_quality"] = 101
    err = _error(tmp_path, raw)
    assert err.field == "generation.attempts"
    assert "and 1 more" in err.message
    assert "render.jpeg_quality" in err.message
    # The first field is printed once, by SpecError, not repeated inside its message.
    assert str(err).count("generation.attempts") == 1


@pytest.mark.parametrize(
    ("text", "got"),
    [("- name: lift\n- name: stack\n", "list"), ("just a string\n", "str"), ("", "NoneType")],
)
def test_top_level_must_be_a_mapping(tmp_path, text, got):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.field == ""
    assert "expected a mapping" in info.value.message
    assert got in info.value.message


def test_malformed_yaml_names_the_line(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("name: lift\nseed: 0\ntask: {env: Lift\nobjects: {}\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert "malformed YAML" in info.value.message
    assert "line 4" in info.value.message


def test_missing_spec_file(tmp_path):
    path = tmp_path / "absent.yaml"
    with pytest.raises(SpecError, match="file not found") as info:
        load_spec(path)
    assert info.value.where == str(path)


# --- overrides (CLI flags) are validated like YAML -------------------------------------


def test_overrides_apply(tmp_path):
    spec = load_spec(SPECS / "lift.yaml", overrides={"generation.attempts": 3, "seed": 7})
    assert spec.generation.attempts == 3
    assert spec.seed == 7
    untouched = load_spec(SPECS / "lift.yaml")
    assert spec.generation.attempts_per_shard == untouched.generation.attempts_per_shard


def test_overrides_create_an_omitted_section(tmp_path):
    raw = _raw()
    del raw["generation"]
    spec = load_spec(_write(tmp_path, raw), overrides={"generation.attempts": 3})
    assert spec.generation.attempts == 3


def test_overrides_are_validated(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(SPECS / "lift.yaml", overrides={"generation.attempts": 0})
    assert info.value.field == "generation.attempts"


def test_override_into_a_malformed_section_reports_the_section(tmp_path):
    raw = _raw()
    raw["generation"] = 5
    err = _error(tmp_path, raw, overrides={"generation.attempts": 3})
    assert err.field == "generation"
    assert "valid dictionary" in err.message
    assert "and 1 more" not in err.message


# --- fingerprint: what identifies a dataset for resume ---------------------------------


def _spec(tmp_path: Path, raw: dict, name: str) -> SceneSpec:
    return load_spec(_write(tmp_path, raw, name))


def test_fingerprint_is_stable_for_equal_specs(tmp_path):
    raw = _raw()
    a = _spec(tmp_path, raw, "a.yaml")
    b = _spec(tmp_path, copy.deepcopy(raw), "b.yaml")
    assert a.fingerprint() == b.fingerprint() == a.fingerprint()
    assert len(a.fingerprint()) == 64
    # The same spec in another file, with keys in another order: the same dataset.
    reordered = dict(reversed(list(raw.items())))
    assert _spec(tmp_path, reordered, "c.yaml").fingerprint() == a.fingerprint()


@pytest.mark.parametrize(
    "change",
    [
        _set("seed", 1),
        _set("generation.action_noise", 0.1),
        _set("subtasks.0.end_offset", [0, 4]),
        _set("cameras.0.width", 96),
        _set("instructions", ["stack them"]),
    ],
)
def test_fingerprint_changes_with_what_shapes_the_data(tmp_path, change):
    raw = _raw()
    changed = copy.deepcopy(raw)
    change(changed)
    assert (
        _spec(tmp_path, raw, "a.yaml").fingerprint()
        != _spec(tmp_path, changed, "b.yaml").fingerprint()
    )


def test_fingerprint_ignores_attempts_and_output_dir(tmp_path):
    # More attempts extends (resumes) the same dataset; where it is written is not its identity.
    raw = _raw()
    base = _spec(tmp_path, raw, "a.yaml").fingerprint()
    more = copy.deepcopy(raw)
    more["generation"]["attempts"] = 1000
    moved = copy.deepcopy(raw)
    moved["output"] = {"dir": str(tmp_path / "elsewhere")}
    assert _spec(tmp_path, more, "b.yaml").fingerprint() == base
    assert _spec(tmp_path, moved, "c.yaml").fingerprint() == base
    assert load_spec(tmp_path / "a.yaml", {"generation.attempts": 7}).fingerprint() == base
    assert load_spec(tmp_path / "a.yaml", {"seed": 7}).fingerprint() != base


# --- the spec a dataset stores: dataset_info.json's copy loads back ---------------------------

# Every shipped scene spec, subfolders and `extends:` included; scene_specs/physics/ holds the
# --eval-physics shift files, which are not scene specs.
SHIPPED = sorted(p for p in SPECS.rglob("*.yaml") if SPECS / "physics" not in p.parents)


def _stored(tmp_path: Path, spec: SceneSpec) -> dict:
    """`spec` written as `factory run` writes it and read back as readers read it."""
    save_dataset_info(tmp_path, dataset_info(spec, state_size=32))
    return load_dataset_info(tmp_path)


def test_every_shipped_spec_is_round_tripped():
    names = {str(p.relative_to(SPECS).with_suffix("")) for p in SHIPPED}
    assert {"lift", "pick_place", "door", "mug_coaster", "mixed/lift_mixed"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(SPECS).with_suffix("")))
def test_a_stored_spec_loads_back_equal(tmp_path, path):
    # preview --failures rebuilds the scene from the stored spec; resume compares fingerprints.
    spec = load_spec(path)
    info = _stored(tmp_path, spec)
    back = load_stored_spec(info, tmp_path / DATASET_INFO_FILENAME)
    assert back.model_dump(mode="json") == spec.model_dump(mode="json")
    assert back.fingerprint() == info["spec_fingerprint"] == spec.fingerprint()


def test_a_bad_stored_spec_names_the_file_and_field(tmp_path):
    info = _stored(tmp_path, load_spec(SPECS / "pick_place.yaml"))
    where = tmp_path / DATASET_INFO_FILENAME
    for i in (1, 3):  # waypoints without relative_to: no frame to turn in
        info["spec"]["script"]["waypoints"][i]["rot"] = [0, 0, 1]
    with pytest.raises(SpecError) as err:
        load_stored_spec(info, where)
    assert err.value.where == str(where)
    assert err.value.field == "spec.script.waypoints[1]"
    assert err.value.message.startswith("rot need relative_to")
    assert "(and 1 more: spec.script.waypoints[3]: rot need relative_to" in err.value.message
    with pytest.raises(SpecError, match="spec: expected the spec as a JSON object"):
        load_stored_spec({}, where)
