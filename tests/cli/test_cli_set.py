"""`--set PATH=VALUE` (demofactory.specs.overrides): one override mechanism; the per-field flags of
`run` and
`script` are its aliases and give the same spec."""

from __future__ import annotations

import argparse

import pytest
from demofactory.cli.main import build_parser, main
from demofactory.errors import UserError
from demofactory.specs.overrides import ALIASES, check_path, parse_assignment, spec_overrides
from demofactory.specs.spec import SceneSpec, load_spec

from tests.conftest import SPECS

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
    assert len(err) == 1 and err[0].startswith("error: --set generation.atempts: no field")
    # A value the spec refuses: its validation names the field, as for the YAML itself.
    assert main(["run", str(LIFT), "--out", str(out), "--set", "generation.attempts=-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "generation.attempts" in err[0]
    assert not out.exists()  # nothing written
