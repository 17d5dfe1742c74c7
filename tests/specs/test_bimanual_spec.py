"""Two-arm specs as pure data: per-arm subtasks, their checks through the real CLI (one line,
exit 2), the one-arm fingerprints unchanged, and the per-arm layouts of dataset_info and stats."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from demofactory.build.recorder import arm_stats
from demofactory.build.run import dataset_info
from demofactory.errors import SpecError
from demofactory.shards import save_dataset_info
from demofactory.shards.stats import KeyStats
from demofactory.specs.adapters import bimanual_params
from demofactory.specs.spec import load_raw_spec, load_spec, validate_raw_spec

REPO = Path(__file__).parents[2]
SPECS = REPO / "scene_specs"
DEMOS = SPECS / "demos"
TWO_ARM = SPECS / "two_arm_lift.yaml"


def factory(cwd: Path, *args) -> subprocess.CompletedProcess:
    # The timeout only keeps a hung run from hanging the suite; nothing asserts on time.
    return subprocess.run(
        [sys.executable, "-m", "demofactory.cli.main", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_error_line(result: subprocess.CompletedProcess, *fragments: str) -> str:
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    assert result.returncode == 2, output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    return lines[0]


def write(tmp_path: Path, base: Path, mutate) -> Path:
    raw = load_raw_spec(base)
    raw["seed_demos"] = [str(DEMOS / Path(rel).name) for rel in raw["seed_demos"]]
    mutate(raw)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_the_shipped_two_arm_spec_names_each_subtasks_arm():
    spec = load_spec(TWO_ARM)
    params = bimanual_params(spec)
    assert params.arms == ("right", "left")
    assert [s.arm for s in params.subtasks] == ["right", "left", "right", "left"]
    assert [s.coordination for s in params.subtasks] == ["parallel"] * 2 + ["coordinated"] * 2
    assert set(spec.script.arms) == {"right", "left"}


def test_one_arm_fingerprints_ignore_the_new_fields_at_their_defaults():
    raw = load_raw_spec(SPECS / "lift.yaml")
    before = validate_raw_spec(raw, SPECS / "lift.yaml").fingerprint()
    for sub in raw["subtasks"]:
        sub.update({"name": None, "arm": None, "coordination": "parallel", "after": None})
    raw["task"]["two_arm"] = None
    assert validate_raw_spec(raw, SPECS / "lift.yaml").fingerprint() == before
    raw["subtasks"][0]["name"] = "grasp"  # a field set away from its default does count
    assert validate_raw_spec(raw, SPECS / "lift.yaml").fingerprint() != before


@pytest.mark.parametrize(
    ("base", "mutate", "field", "expected"),
    [
        # an arm the robot does not have: one Panda has only "right"
        (
            "lift.yaml",
            lambda raw: raw["subtasks"][0].update(arm="left"),
            "subtasks[0].arm",
            "Panda has one arm (right), got 'left'",
        ),
        (
            "two_arm_lift.yaml",
            lambda raw: raw["subtasks"][1].update(arm="middle"),
            "subtasks[1].arm",
            "unknown arm 'middle' (expected one of: right, left)",
        ),
        # a two-arm subtask must say whose it is
        (
            "two_arm_lift.yaml",
            lambda raw: raw["subtasks"][0].pop("arm"),
            "subtasks[0].arm",
            "expected the arm that does it",
        ),
        # a sequential subtask waiting on an unknown subtask, or on a later one
        (
            "two_arm_lift.yaml",
            lambda raw: raw["subtasks"][1].update(coordination="sequential", after="handover"),
            "subtasks[1].after",
            "'handover' is unknown",
        ),
        (
            "two_arm_lift.yaml",
            lambda raw: raw["subtasks"][0].update(coordination="sequential", after="left_grasp"),
            "subtasks[0].after",
            "'left_grasp' is a later subtask (subtasks[1])",
        ),
        (
            "two_arm_lift.yaml",
            lambda raw: raw["subtasks"][1].update(coordination="sequential"),
            "subtasks[1].after",
            "expected the name of an earlier one",
        ),
        # coordinated subtasks pair up by rank across the arms
        (
            "two_arm_lift.yaml",
            lambda raw: raw["subtasks"][3].update(coordination="parallel"),
            "subtasks[2].coordination",
            "right has 1, left 0",
        ),
        # what the two-arm generator does not do yet is refused, not ignored
        (
            "two_arm_lift.yaml",
            lambda raw: raw["generation"].update(subtask_retries=2),
            "generation.subtask_retries",
            "not yet on two arms",
        ),
        (
            "two_arm_lift.yaml",
            lambda raw: raw["script"]["arms"].update(middle=raw["script"]["arms"]["left"]),
            "script.arms.middle",
            "unknown arm",
        ),
        # joint noise is the two-arm generator's: one arm places its objects instead
        (
            "lift.yaml",
            lambda raw: raw.setdefault("placement", {}).update(joint_noise=0.02),
            "placement.joint_noise",
            "only the two-arm generator draws joint noise",
        ),
    ],
)
def test_bad_arms_name_the_field_and_what_was_expected(tmp_path, base, mutate, field, expected):
    path = write(tmp_path, SPECS / base, mutate)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert str(err.value).startswith(f"{path}: {field}: ") and expected in str(err.value)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda raw: raw["subtasks"][1].update(arm="middle"), "subtasks[1].arm"),
        (
            lambda raw: raw["subtasks"][0].update(coordination="sequential", after="left_grasp"),
            "subtasks[0].after",
        ),
    ],
)
def test_the_cli_prints_a_bad_arm_as_one_line_exit_2(tmp_path, mutate, field):
    path = write(tmp_path, TWO_ARM, mutate)
    one_error_line(factory(tmp_path, "validate", path), f"error: {path}: {field}: ")


def test_a_one_arm_demo_given_to_a_two_arm_spec_is_refused(tmp_path):
    """Refused from the file's robots before any env is built: one line, exit 2."""
    lift = str(DEMOS / "lift_scripted.hdf5")
    path = write(tmp_path, TWO_ARM, lambda raw: raw.update(seed_demos=[lift]))
    one_error_line(
        factory(tmp_path, "validate", path),
        "lift_scripted.hdf5",
        "recorded with robots ['Panda']",
        "a one-arm demo given to a two-arm spec",
    )


@pytest.mark.parametrize(
    ("field", "value", "recorded"),
    [
        ("configuration", "opposed", "'parallel'"),
        ("robot", "Sawyer", "'Panda'"),
        ("env", "TwoArmHandover", "'TwoArmLift'"),
    ],
)
def test_seed_demos_recorded_otherwise_than_the_spec_are_refused(tmp_path, field, value, recorded):
    """A pair's layout, robot or env other than the file's: one line naming the seed file and
    the spec field, before any env is built (restored elsewhere, every subtask would vanish)."""

    def change(raw):
        if field == "configuration":
            raw["task"]["two_arm"]["configuration"] = value
        else:
            raw["task"][field] = value

    path = write(tmp_path, TWO_ARM, change)
    name = "task.two_arm.configuration" if field == "configuration" else f"task.{field}"
    one_error_line(
        factory(tmp_path, "validate", path),
        "seed_demos[0]: two_arm_lift_scripted.hdf5 was recorded with " + recorded,
        f"the spec's {name} is '{value}'",
    )


def test_dataset_info_and_stats_give_each_arm_its_own_parts(tmp_path):
    spec = load_spec(TWO_ARM)
    info = dataset_info(spec, state_size=50)
    names = [name for name, _ in info["state"]["layout"]]
    assert names[:3] == ["right_eef_pos", "right_eef_quat_xyzw", "right_gripper_qpos"]
    assert names[3:] == ["left_eef_pos", "left_eef_quat_xyzw", "left_gripper_qpos"]
    assert info["state"]["dim"] == 18 and info["action"]["dim"] == 14
    assert info["action"]["layout"][3] == ["left_delta_pos", 3]
    assert info["embodiments"]["Panda"]["arms"] == ["right", "left"]
    assert info["embodiments"]["Panda"]["action"]["dim"] == 14
    save_dataset_info(tmp_path, info)
    rows = {"state": np.arange(36.0).reshape(2, 18), "action": np.arange(28.0).reshape(2, 14)}
    stats = {
        key: KeyStats(
            mean=list(a.mean(0)),
            std=list(a.std(0)),
            min=list(a.min(0)),
            max=list(a.max(0)),
            q01=list(a.min(0)),
            q99=list(a.max(0)),
            count=2,
        )
        for key, a in rows.items()
    }
    arms = arm_stats(tmp_path, stats)["arms"]
    assert arms["left"]["action"]["dims"] == [7, 14]
    assert arms["left"]["action"]["mean"] == list(rows["action"][:, 7:].mean(0))
    assert arms["right"]["state"]["max"] == list(rows["state"][1, :9])
    assert json.dumps(arms)  # what stats.json holds


def test_one_arm_datasets_get_no_arm_stats(tmp_path):
    save_dataset_info(tmp_path, dataset_info(load_spec(SPECS / "lift.yaml"), state_size=32))
    assert arm_stats(tmp_path, {}) == {}


def test_a_sequential_window_skips_only_the_hands_stillness():
    from demofactory.seeds.annotate_bimanual import _still_until

    poses = np.tile(np.eye(4), (20, 1, 1))
    poses[10:, 0, 3] = np.linspace(0.01, 0.1, 10)  # still for 10 steps, then moving
    assert _still_until(poses, 0, 15) == 9  # the window opens as the hand starts to move
    assert _still_until(poses, 0, 5) == 5  # not after the subtask it waits for ended
    assert _still_until(poses, 12, 15) == 12  # a hand moving at once starts where it was


def test_a_hand_that_settles_before_it_waits_is_still_from_where_it_settled():
    from demofactory.seeds.annotate_bimanual import _still_since

    poses = np.tile(np.eye(4), (20, 1, 1))
    poses[:6, 0, 3] = np.linspace(0.0, 0.05, 6)  # settling for 6 steps, then still
    poses[6:, 0, 3] = 0.05
    assert _still_since(poses, 0, 15) == 5  # still from step 5 (where it came to rest) on
    assert _still_since(poses, 8, 15) == 8  # still all along
    poses[15, 0, 3] = 0.2
    assert _still_since(poses, 0, 15) == 15  # moving at `until`: no still stretch before it


@pytest.mark.sim
def test_validate_says_which_loop_two_arm_steps_take(tmp_path):
    """The control: line: the two-arm fast loop once its check passed, env.step and why not."""
    fast = factory(tmp_path, "validate", TWO_ARM)
    assert fast.returncode == 0, fast.stderr
    assert "control: fast (demofactory.simulation.fast_step.PairStepper: both robots' OSC" in (
        fast.stdout
    )
    slow = factory(tmp_path, "validate", TWO_ARM, "--set", "task.fast_control=false")
    assert slow.returncode == 0, slow.stderr
    assert "control: robosuite env.step (task.fast_control: false)" in slow.stdout


PEG = SPECS / "two_arm_peg_in_hole.yaml"


@pytest.mark.parametrize(
    ("mutate", "field", "expected"),
    [
        # a gripper predicate on a bare wrist: refused before any env is built
        (
            lambda raw: raw["subtasks"][0].update(ends_when="grasped(peg)"),
            "subtasks[0].ends_when",
            "TwoArmPegInHole builds its robots without grippers: grasped(...) needs the right",
        ),
        (
            lambda raw: raw["subtasks"][1].update(ends_when="all(touching(hand, peg))"),
            "subtasks[1].ends_when",
            "touching(...) needs the left arm's gripper",
        ),
        (
            lambda raw: raw["script"]["arms"]["left"][0].update(gripper="close"),
            "script.arms.left[0].gripper",
            "nothing to close",
        ),
    ],
)
def test_a_gripper_on_bare_wrists_is_one_line_exit_2(tmp_path, mutate, field, expected):
    path = write(tmp_path, PEG, mutate)
    one_error_line(factory(tmp_path, "validate", path), f"error: {path}: {field}: ", expected)


def test_bare_wrists_have_no_gripper_parts_in_dataset_info_and_stats(tmp_path):
    spec = load_spec(PEG)
    info = dataset_info(spec, state_size=29)
    assert info["state"]["layout"] == [
        ["right_eef_pos", 3],
        ["right_eef_quat_xyzw", 4],
        ["left_eef_pos", 3],
        ["left_eef_quat_xyzw", 4],
    ]
    assert info["state"]["dim"] == 14 and info["action"]["dim"] == 12
    assert [n for n, _ in info["action"]["layout"]][2:] == [
        "left_delta_pos",
        "left_delta_axis_angle",
    ]
    assert info["embodiments"]["Panda"]["action"]["dim"] == 12
    assert info["embodiments"]["Panda"]["state"]["dim"] == 14
    save_dataset_info(tmp_path, info)
    rows = {"state": np.arange(28.0).reshape(2, 14), "action": np.arange(24.0).reshape(2, 12)}
    stats = {
        key: KeyStats(
            mean=list(a.mean(0)),
            std=list(a.std(0)),
            min=list(a.min(0)),
            max=list(a.max(0)),
            q01=list(a.min(0)),
            q99=list(a.max(0)),
            count=2,
        )
        for key, a in rows.items()
    }
    arms = arm_stats(tmp_path, stats)["arms"]
    assert arms["left"]["action"]["dims"] == [6, 12] and arms["left"]["state"]["dims"] == [7, 14]
    # TwoArmLift keeps its grippers: 7 and 9 per arm
    assert dataset_info(load_spec(TWO_ARM), state_size=50)["action"]["dim"] == 14


def test_a_two_arm_demo_is_refused_by_its_action_width_before_and_after_the_env():
    from demofactory.errors import UserError
    from demofactory.generators.records import SeedDemo
    from demofactory.seeds.annotate_bimanual import check_two_arm_actions

    spec = load_spec(PEG)
    demo = SeedDemo(
        name="demo_1",
        source=Path("seed.hdf5"),
        env_name="TwoArmPegInHole",
        states=np.zeros((2, 29)),
        actions=np.zeros((2, 7)),
    )
    with pytest.raises(UserError, match="7 wide, expected 14 or 12 .7 per arm, or 6 for arms"):
        check_two_arm_actions(spec, demo)
    check_two_arm_actions(spec, replace(demo, actions=np.zeros((2, 14))))  # the file alone: ok
    with pytest.raises(UserError, match="14 wide, expected 12 .right 6, left 6"):  # the env
        check_two_arm_actions(
            spec, replace(demo, actions=np.zeros((2, 14))), {"right": 6, "left": 6}
        )
