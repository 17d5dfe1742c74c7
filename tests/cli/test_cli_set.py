"""`--set PATH=VALUE` (demofactory.specs.overrides): one override mechanism on every verb that
reads a spec; the per-field flags of `run` and `script` are its aliases and give the same spec;
a bad path or value is one line naming the option, the path and what was expected."""

from __future__ import annotations

import argparse

import pytest
from demofactory.cli.main import build_parser, main
from demofactory.errors import SpecError, UserError
from demofactory.specs.overrides import (
    ALIASES,
    SPEC_VERBS,
    Overrides,
    check_path,
    parse_assignment,
    spec_overrides,
)
from demofactory.specs.spec import SceneSpec, load_spec, load_stored_spec

from tests.conftest import DEMOS, SPECS

LIFT = SPECS / "lift.yaml"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("generation.attempts=20", ("generation.attempts", 20)),
        ("seed=0", ("seed", 0)),
        ("output.shard_layout=episode", ("output.shard_layout", "episode")),
        ("task.fast_control=false", ("task.fast_control", False)),
        ("physics.mass={cube: [0.8, 1.2]}", ("physics.mass", {"cube": [0.8, 1.2]})),
        ("name='20'", ("name", "20")),
        ("generation.robustness=", ("generation.robustness", None)),
        ("generation.robustness=null", ("generation.robustness", None)),
    ],
)
def test_a_value_is_parsed_as_yaml(text, expected):
    assert parse_assignment(text) == expected


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("generation.attempts", "expected PATH=VALUE"),
        ("=3", "expected PATH=VALUE"),
        ("generation attempts=3", "dotted name"),
        ("seed=[1, 2", "VALUE is not YAML"),
    ],
)
def test_a_malformed_assignment_is_an_argparse_error(text, complaint):
    with pytest.raises(argparse.ArgumentTypeError, match=complaint):
        parse_assignment(text)


def test_run_flags_are_aliases_of_set_and_give_the_same_spec():
    parse = build_parser().parse_args
    flags = parse(["run", str(LIFT), "--attempts", "7", "--seed", "3", "--shard-layout", "episode"])
    sets = parse(
        [
            "run",
            str(LIFT),
            "--set",
            "generation.attempts=7",
            "--set",
            "seed=3",
            "--set",
            "output.shard_layout=episode",
        ]
    )
    from_flags, from_sets = spec_overrides(flags, "run"), spec_overrides(sets, "run")
    assert (
        from_flags
        == from_sets
        == {
            "generation.attempts": 7,
            "seed": 3,
            "output.shard_layout": "episode",
        }
    )
    a, b = load_spec(LIFT, from_flags), load_spec(LIFT, from_sets)
    assert a.generation.attempts == 7 and a.seed == 3
    assert a.fingerprint() == b.fingerprint()
    assert set(ALIASES["run"]) <= set(vars(flags))  # every alias is a flag of the verb


def test_script_flags_are_aliases_of_set():
    parse = build_parser().parse_args
    spec = str(SPECS / "pick_place_can.yaml")
    flags = parse(["script", spec, "--out", "x.hdf5", "--demos", "2", "--seed", "5"])
    sets = parse(["script", spec, "--out", "x.hdf5", "--set", "script.demos=2", "--set", "seed=5"])
    assert spec_overrides(flags, "script") == spec_overrides(sets, "script")
    assert spec_overrides(sets, "script") == {"script.demos": 2, "seed": 5}


def test_a_flag_and_a_set_that_disagree_are_refused_and_that_agree_are_one():
    parse = build_parser().parse_args
    agree = parse(["run", str(LIFT), "--attempts", "7", "--set", "generation.attempts=7"])
    assert spec_overrides(agree, "run") == {"generation.attempts": 7}
    disagree = parse(["run", str(LIFT), "--attempts", "7", "--set", "generation.attempts=8"])
    with pytest.raises(UserError, match="--attempts 7 and --set generation.attempts=8 disagree"):
        spec_overrides(disagree, "run")


def test_a_path_is_checked_against_the_spec_as_far_as_its_fields_are_models():
    check_path(SceneSpec, "generation.attempts")
    check_path(SceneSpec, "physics.mass.cube")  # below a mapping: the spec's validation checks
    with pytest.raises(UserError, match=r"no field 'atempts' under generation; expected one of"):
        check_path(SceneSpec, "generation.atempts")
    with pytest.raises(UserError, match=r"--set sede: no field 'sede'; expected one of: .*seed"):
        check_path(SceneSpec, "sede")


def test_through_the_cli_a_bad_set_is_one_line_and_exit_2(tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["run", str(LIFT), "--out", str(out), "--set", "generation.atempts=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {LIFT}: --set generation.atempts: no field")
    # A value the spec refuses: its validation names the field, as for the YAML itself.
    assert main(["run", str(LIFT), "--out", str(out), "--set", "generation.attempts=-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "generation.attempts" in err[0]
    assert not out.exists()  # nothing written


# --- every verb that reads a spec ---------------------------------------------------------------
# The least each verb needs besides its spec, so that its parser accepts the line.
VERB_ARGS = {
    "validate": [str(LIFT)],
    "annotate": [str(LIFT)],
    "run": [str(LIFT)],
    "seeds": [str(LIFT), "--out", "o"],
    "script": [str(SPECS / "pick_place_can.yaml"), "--out", "o.hdf5"],
    "collect": [str(LIFT), "--out", "o.hdf5"],
    "calibrate": [str(LIFT), "--recordings", "r.hdf5", "--params", "kp", "--out", "o.yaml"],
    "divergence": ["dataset", "--spec", str(LIFT)],
    "train-eval": ["dataset", "--spec", str(LIFT)],
}


def test_every_verb_that_reads_a_spec_takes_set():
    assert set(VERB_ARGS) == set(SPEC_VERBS)
    parse = build_parser().parse_args
    for verb, rest in VERB_ARGS.items():
        args = parse([verb, *rest, "--set", "seed=9", "--set", "generation.attempts=3"])
        found = spec_overrides(args)
        assert found == {"seed": 9, "generation.attempts": 3}, verb
        assert found.option("seed") == "--set seed=9"
        spec = load_spec(LIFT, found)
        assert (spec.seed, spec.generation.attempts) == (9, 3)
    # the verbs that read no spec have none
    for argv in (["verify", "d"], ["inspect", "d"], ["preview", "d"], ["spec-help"]):
        with pytest.raises(SystemExit):
            parse([*argv, "--set", "seed=9"])


def test_an_alias_is_named_as_given_in_an_error_about_its_field(tmp_path):
    parse = build_parser().parse_args
    args = parse(["run", str(LIFT), "--attempts", "7", "--set", "task.horizon=0"])
    found = spec_overrides(args)
    assert found.option("generation.attempts") == "--attempts 7"
    with pytest.raises(SpecError) as caught:
        load_spec(LIFT, found)
    text = str(caught.value)
    assert "task.horizon" in text and text.endswith("(from --set task.horizon=0)")


def test_a_path_below_a_value_is_refused():
    with pytest.raises(UserError, match=r"--set seed\.x: seed holds a value \(int\), not fields"):
        check_path(SceneSpec, "seed.x")
    with pytest.raises(UserError, match=r"generation\.attempts holds a value"):
        check_path(SceneSpec, "generation.attempts.x")


def test_a_number_in_a_path_sets_an_item_of_a_list():
    spec = load_spec(LIFT, Overrides({"subtasks.0.name": "grab"}))
    assert [sub.name for sub in spec.subtasks][0] == "grab"
    assert spec.subtasks[1].name == load_spec(LIFT).subtasks[1].name
    check_path(SceneSpec, "subtasks.1.ends_when")
    with pytest.raises(UserError, match=r"subtasks\.0\.nam: no field 'nam' under subtasks\.0"):
        check_path(SceneSpec, "subtasks.0.nam")
    with pytest.raises(UserError, match=r"generation holds fields, not a list"):
        check_path(SceneSpec, "generation.0")
    with pytest.raises(SpecError) as caught:  # past the list's end: the file's own length
        load_spec(LIFT, Overrides({"subtasks.5.name": "x"}))
    assert "subtasks: a list of 2 items; expected an index 0..1" in str(caught.value)


def test_the_stored_spec_takes_the_same_overrides():
    stored = {"spec": load_spec(LIFT).model_dump(mode="json")}
    found = Overrides({"seed": 11, "generation.attempts": 2})
    spec = load_stored_spec(stored, "ds/dataset_info.json", found)
    assert (spec.seed, spec.generation.attempts) == (11, 2)
    assert load_stored_spec(stored, "ds/dataset_info.json").seed == load_spec(LIFT).seed
    with pytest.raises(SpecError) as caught:
        load_stored_spec(stored, "ds/dataset_info.json", Overrides({"generation.attempts": -1}))
    text = str(caught.value)
    assert text.startswith("ds/dataset_info.json: spec.generation.attempts: ")
    assert text.endswith("(from --set generation.attempts=-1)")


# Through the real CLI: a bad --set is one line naming the option, the path and what was
# expected, exit 2, before anything is read or built (no env: these run in the pure selection).
BAD_PATH = ["--set", "generation.atempts=3"]
BAD_VALUE = ["--set", "generation.attempts=-1"]


@pytest.mark.parametrize(
    "verb", ["validate", "annotate", "seeds", "collect", "calibrate", "divergence", "train-eval"]
)
def test_through_the_cli_a_bad_path_is_one_line_for_each_verb(verb, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the outputs named in VERB_ARGS would land here
    assert main([verb, *VERB_ARGS[verb], *BAD_PATH]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    want = f"error: {LIFT}: --set generation.atempts: no field 'atempts' under generation"
    assert err[0].startswith(want)
    assert "expected one of:" in err[0] and "attempts" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("verb", ["validate", "seeds"])
def test_through_the_cli_a_bad_value_names_the_option(verb, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([verb, *VERB_ARGS[verb], *BAD_VALUE]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"error: {LIFT}: generation.attempts: ")
    assert err[0].endswith("(from --set generation.attempts=-1)")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("typed", "named"),
    [
        ("generation.attempts=null", "(from --set generation.attempts=null)"),
        ("generation.attempts=", "(from --set generation.attempts=)"),
        ("generation.attempts=[1,2]", "(from --set generation.attempts=[1,2])"),
    ],
)
def test_an_error_names_the_value_as_typed_not_as_parsed(typed, named, capsys):
    # The parsed value's repr would be `None` for `null` and for an empty VALUE, and `[1, 2]`.
    assert main(["validate", str(LIFT), "--set", typed]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"error: {LIFT}: generation.attempts: ") and err[0].endswith(named)


def test_suggest_refuses_set_in_one_line(capsys):
    demo = str(DEMOS / "lift_panda_1demo_robosuite100.hdf5")
    assert main(["annotate", "--suggest", demo, "--set", "seed=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: --set seed=3: --suggest reads the seed demos alone, not a spec's fields; "
        "expected no --set with --suggest"
    ]


@pytest.mark.sim
def test_validate_reports_the_spec_as_overridden(capsys):
    assert main(["validate", str(LIFT), "--set", "cameras=[]"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"ok: {LIFT}: ") and "cameras: none" in out
