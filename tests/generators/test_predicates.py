"""Predicate text as written in specs (`ends_when: grasped(cubeA)`): parsing, defaults, errors."""

from __future__ import annotations

import re

import pytest
from demofactory.generators.predicates import PREDICATE_KINDS, Predicate, parse_predicate


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("grasped(cubeA)", Predicate("grasped", ("cubeA",), ())),
        ("lifted(cube)", Predicate("lifted", ("cube",), (0.04,))),
        ("on_top(cubeA, cubeB)", Predicate("on_top", ("cubeA", "cubeB"), ())),
        ("near(cubeA, cubeB)", Predicate("near", ("cubeA", "cubeB"), (0.05,))),
        ("contact(cubeA, table)", Predicate("contact", ("cubeA", "table"), ())),
        ("success", Predicate("success", (), ())),
    ],
)
def test_each_kind_parses_with_defaults_filled(text, expected):
    assert parse_predicate(text) == expected


@pytest.mark.parametrize("name", sorted(PREDICATE_KINDS))
def test_every_registered_kind_parses_and_round_trips(name):
    # Over the whole registry: a newly added kind is covered without a new test.
    kind = PREDICATE_KINDS[name]
    objects = tuple(f"obj{i}" for i in range(kind.objects))
    required = tuple(float(i + 1) for i in range(kind.required))  # params without a usable default
    args = [*objects, *(f"{v:g}" for v in required)]
    text = f"{name}({', '.join(args)})" if args else name
    parsed = parse_predicate(text)
    assert parsed == Predicate(
        name, objects, required + tuple(d for _, d in kind.params[kind.required :])
    )
    assert parse_predicate(str(parsed)) == parsed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("lifted(cube, 0.1)", Predicate("lifted", ("cube",), (0.1,))),
        ("near(a, b, 1e-2)", Predicate("near", ("a", "b"), (0.01,))),
        ("near(a, b, 2)", Predicate("near", ("a", "b"), (2.0,))),
    ],
)
def test_explicit_numeric_params_override_defaults(text, expected):
    assert parse_predicate(text) == expected


def test_whitespace_and_empty_parentheses_are_accepted():
    assert parse_predicate("  grasped(  cubeA )  ") == Predicate("grasped", ("cubeA",), ())
    assert parse_predicate("near(a,b,0.2)") == Predicate("near", ("a", "b"), (0.2,))
    assert parse_predicate("success()") == Predicate("success", (), ())


@pytest.mark.parametrize(
    "text",
    [
        "grasped(cubeA)",
        "lifted(cube, 0.04)",
        "near(cubeA, cubeB, 0.125)",
        "on_top(a, b)",
        "success",
    ],
)
def test_str_round_trips(text):
    parsed = parse_predicate(text)
    assert str(parsed) == text
    assert parse_predicate(str(parsed)) == parsed


def test_str_writes_defaults_explicitly():
    # What a manifest or log shows is the full predicate, not the abbreviated spec text.
    assert str(parse_predicate("lifted(cube)")) == "lifted(cube, 0.04)"


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match="unknown predicate 'held'") as info:
        parse_predicate("held(cubeA)")
    for name in PREDICATE_KINDS:
        assert name in str(info.value)


@pytest.mark.parametrize(
    ("text", "usage"),
    [
        ("grasped()", "grasped(object1)"),
        ("grasped(a, b)", "grasped(object1)"),
        ("on_top(a)", "on_top(object1, object2)"),
        ("near(a, b, 1, 2)", "near(object1, object2, distance=0.05)"),
        ("success(a)", "success"),
    ],
)
def test_wrong_arity_says_what_the_predicate_takes(text, usage):
    with pytest.raises(ValueError, match="takes") as info:
        parse_predicate(text)
    assert usage in str(info.value)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize(
    "text", ["lifted(cube, high)", "near(a, b, 5cm)", "lifted(cube, nan)", "near(a, b, inf)"]
)
def test_non_numeric_params_are_rejected(text):
    with pytest.raises(
        ValueError, match=r"lifted\(object1, height=0.04\)|near\(object1, object2, distance=0.05\)"
    ):
        parse_predicate(text)


@pytest.mark.parametrize(
    "text",
    ["grasped(a)(b)", "near(a, , 0.1)", "lifted(0.1)", "grasped(a b)"],
)
def test_object_arguments_must_be_names(text):
    with pytest.raises(ValueError, match="takes"):
        parse_predicate(text)


@pytest.mark.parametrize(
    "text", ["", "   ", "12", "grasped(cubeA", "Grasped(cubeA)", "grasped cubeA", None]
)
def test_garbage_text_is_rejected_with_an_example(text):
    with pytest.raises(ValueError, match=r"expected a predicate like 'grasped\(cubeA\)'"):
        parse_predicate(text)


@pytest.mark.parametrize(
    "text",
    [
        "all(on_peg(nut, peg, 0.03), not(grasped(nut)))",
        "any(inside(milk, bin), inside(bread, bin))",
        "not(any(grasped(a), contact(a, b)))",
        "all(opened(door, 0.3))",
    ],
)
def test_compositions_parse_nest_and_round_trip(text):
    parsed = parse_predicate(text)
    assert str(parsed) == text
    assert parse_predicate(str(parsed)) == parsed


def test_a_composition_lists_its_objects_and_leaves():
    parsed = parse_predicate("all(on_peg(nut, peg), not(grasped(nut)), any(success, opened(door)))")
    assert parsed.all_objects() == {"nut", "peg", "door"}
    assert [leaf.name for leaf in parsed.leaves()] == ["on_peg", "grasped", "success", "opened"]
    assert parsed.mentions("success") and not parsed.mentions("inside")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not(grasped(a), grasped(b))", "not takes not(predicate)"),
        ("all()", "all takes all(predicate, predicate, ...)"),
        ("all(grasped(a)", "all takes all(predicate, predicate, ...)"),
        ("any(grasped(a)))", "any takes"),
        ("all(held(a))", "unknown predicate 'held'"),
        ("joint(handle, 0.5)", "joint takes joint(object1, low, high)"),
        ("joint(handle, 2, 1)", "low <= high"),
    ],
)
def test_bad_compositions_and_joint_ranges_say_what_was_expected(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_predicate(text)


def test_touching_takes_the_hand_and_spec_objects():
    parsed = parse_predicate("touching(hand, handle)")
    assert parsed == Predicate("touching", ("hand", "handle"), ())
    assert str(parsed) == "touching(hand, handle)"
    # `hand` is the robot's gripper, not a spec object: the spec checks only the others.
    assert parsed.all_objects() == {"handle"}
    assert parse_predicate("all(touching(door, hand), opened(door))").all_objects() == {"door"}
    assert parse_predicate("touching(cubeA, cubeB)").all_objects() == {"cubeA", "cubeB"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("touching(hand)", "touching takes touching(object1 or hand, object2 or hand)"),
        ("touching(hand, handle, 0.1)", "touching takes touching(object1 or hand"),
        ("touching(hand, hand)", "touching takes two different things"),
        ("grasped(hand)", "'hand' (the robot's gripper) is an argument of touching only"),
        ("contact(hand, cube)", "'hand' (the robot's gripper) is an argument of touching only"),
        ("not(opened(hand))", "'hand' (the robot's gripper) is an argument of touching only"),
    ],
)
def test_bad_touching_and_misplaced_hand_say_what_was_expected(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_predicate(text)
