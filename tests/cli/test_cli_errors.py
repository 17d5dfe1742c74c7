"""The bad-input contract of the `factory` command, checked on the real CLI in a subprocess.

Bad input (a spec, a seed file, an output directory) prints exactly one line,
`error: <file>: <field>: <what was expected>`, on stderr, never a traceback,
and exits with code 2; and nothing is written.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from demofactory.specs.spec import load_raw_spec

pytestmark = pytest.mark.sim

REPO = Path(__file__).parents[2]
SPECS = REPO / "scene_specs"
DEMOS = SPECS / "demos"
LIFT_DEMOS = DEMOS / "lift_panda_4demos_robosuite141.hdf5"
STACK_DEMOS = DEMOS / "stack_panda_1demo_robosuite100.hdf5"


def factory(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    # The timeout only keeps a hung run from hanging the suite; nothing asserts on time.
    return subprocess.run(
        [sys.executable, "-m", "demofactory.cli.main", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_user_error(result: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit 2, one `error: ` line on stderr holding every fragment, no traceback; the line."""
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    assert result.returncode == 2, output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, output
    line = lines[0]
    assert line.startswith("error: ") and line.removeprefix("error: ").strip(), line
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    assert result.stdout == "", output
    return line


def write_spec(directory: Path, base: str, name: str = "spec.yaml", mutate=None) -> Path:
    """The shipped `base` spec with seed demos made absolute, mutated, written to directory/name."""
    raw = load_raw_spec(SPECS / f"{base}.yaml")  # with `extends:` resolved
    raw["seed_demos"] = [str(DEMOS / Path(rel).name) for rel in raw["seed_demos"]]
    if mutate:
        mutate(raw)
    path = directory / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def snapshot(directory: Path) -> dict[str, str]:
    """Every file under directory -> sha256 of its bytes."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


# --- the spec --------------------------------------------------------------------------


def test_malformed_yaml(tmp_path):
    (tmp_path / "spec.yaml").write_text("name: lift\nseed: 0\ntask: {env: Lift\nobjects: {}\n")
    assert_user_error(
        factory(tmp_path, "validate", "spec.yaml"), "spec.yaml", "malformed YAML", "line 4"
    )


def test_unknown_key_lists_valid_keys(tmp_path):
    write_spec(tmp_path, "lift", mutate=lambda raw: raw["generation"].update(atempts=3))
    line = assert_user_error(
        factory(tmp_path, "validate", "spec.yaml"), "spec.yaml", "generation.atempts"
    )
    assert "unknown key" in line
    assert "attempts, target_successes, attempts_per_shard" in line


def test_missing_seed_file(tmp_path):
    absent = tmp_path / "nowhere" / "demo.hdf5"
    write_spec(tmp_path, "lift", mutate=lambda raw: raw.update(seed_demos=[str(absent)]))
    assert_user_error(
        factory(tmp_path, "validate", "spec.yaml"),
        "spec.yaml",
        "seed_demos[0]",
        "file not found",
        str(absent),
    )


def test_seed_demo_of_another_task(tmp_path):
    write_spec(tmp_path, "stack", mutate=lambda raw: raw.update(seed_demos=[str(LIFT_DEMOS)]))
    line = assert_user_error(
        factory(tmp_path, "validate", "spec.yaml"), str(LIFT_DEMOS), "demo_1", "32", "45"
    )
    assert "Stack" in line


def test_unknown_camera_lists_valid_cameras(tmp_path):
    def mutate(raw):
        raw["cameras"][0]["name"] = "frontcam"

    write_spec(tmp_path, "stack", mutate=mutate)
    assert_user_error(
        factory(tmp_path, "validate", "spec.yaml"),
        "spec.yaml",
        "cameras[0].name",
        "'frontcam'",
        "agentview",
    )


@pytest.mark.parametrize("name", ["lift", "stack"])
def test_shipped_specs_validate(name):
    # The documented command, from the repository root.
    result = factory(REPO, "validate", f"scene_specs/{name}.yaml")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Traceback" not in output
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ok: scene_specs/{name}.yaml: {name} "), output


# --- the output directory: refused before anything is written --------------------------


def test_run_into_a_different_dataset_changes_nothing(tmp_path):
    spec = write_spec(tmp_path, "stack")
    out = tmp_path / "existing"
    (out / "shards").mkdir(parents=True)
    info = {
        "schema_version": 1,
        "name": "other",
        "spec_fingerprint": "0" * 64,
        "spec": {"name": "other"},
    }
    (out / "dataset_info.json").write_text(json.dumps(info))
    (out / "shards" / "shard-000000.tar").write_bytes(bytes(range(256)) * 4)
    before = snapshot(out)

    result = factory(
        tmp_path,
        "run",
        spec.name,
        "--out",
        "existing",
        "--attempts",
        "1",
        "--workers",
        "1",
        "--no-progress",
    )

    line = assert_user_error(result, "existing", "holds a different dataset", "'other'")
    assert "choose another --out" in line
    assert snapshot(out) == before


def test_run_with_a_bad_spec_creates_no_output(tmp_path):
    # Fails late, while annotating seed demos, after the env was built: still nothing written.
    spec = write_spec(
        tmp_path, "stack", mutate=lambda raw: raw.update(seed_demos=[str(LIFT_DEMOS)])
    )
    result = factory(
        tmp_path,
        "run",
        spec.name,
        "--out",
        "new/dataset",
        "--attempts",
        "1",
        "--workers",
        "1",
        "--no-progress",
    )
    assert_user_error(result, str(LIFT_DEMOS), "demo_1")
    assert not (tmp_path / "new").exists()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["directory", "file"])
def test_run_into_something_that_is_not_a_dataset(tmp_path, kind):
    spec = write_spec(tmp_path, "stack")
    out = tmp_path / "mine"
    if kind == "directory":
        out.mkdir()
        (out / "notes.txt").write_text("my own files\n")
        expected = "not a demofactory dataset"
    else:
        out.write_text("a file\n")
        expected = "is not a directory"
    before = snapshot(tmp_path)

    result = factory(
        tmp_path,
        "run",
        spec.name,
        "--out",
        "mine",
        "--attempts",
        "1",
        "--workers",
        "1",
        "--no-progress",
    )

    assert_user_error(result, "mine", expected)
    assert snapshot(tmp_path) == before


# --- flags -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--attempts", "0"), ("--attempts", "many"), ("--workers", "0"), ("--seed", "-1")],
)
def test_bad_flag_values(tmp_path, flag, value):
    spec = write_spec(tmp_path, "stack")
    result = factory(tmp_path, "run", spec.name, flag, value)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output
    assert f"argument {flag}" in result.stderr
    assert list(tmp_path.iterdir()) == [spec]


def _set_ends_when(index: int, text: str):
    def mutate(raw):
        raw["subtasks"][index]["ends_when"] = text

    return mutate


@pytest.mark.parametrize(
    ("mutate", "fragments"),
    [
        (
            _set_ends_when(0, "opened(cube, 0.3)"),
            ("subtasks[0].ends_when", "'cube'", "no hinge or slide joint"),
        ),
        (
            _set_ends_when(0, "lifted(cube, 0.6)"),
            ("data/demo_1", "subtask 0 never ends", "lifted(cube, 0.6) does not hold"),
        ),
        (
            _set_ends_when(0, "all(grasped(cube), near(cube, sphere))"),
            ("subtasks[0].ends_when", "unknown object 'sphere'", "expected one of: cube"),
        ),
        (
            _set_ends_when(0, "grasped(hand)"),
            ("subtasks[0].ends_when", "'hand' (the robot's gripper) is an argument of touching"),
        ),
    ],
    ids=[
        "joint-predicate-on-a-free-object",
        "subtask-never-ends-in-a-demo",
        "unknown-object-in-a-composition",
        "the-hand-where-only-touching-takes-it",
    ],
)
def test_predicates_that_cannot_work_are_one_line_errors(tmp_path, mutate, fragments):
    spec = write_spec(tmp_path, "lift", mutate=mutate)
    assert_user_error(factory(tmp_path, "validate", spec), *fragments)


def test_touching_an_unknown_body_names_the_file_the_field_and_the_names(tmp_path):
    """A push on a name that is neither a spec object nor the hand: one line, exit 2, before any
    env is built."""

    def mutate(raw):
        raw["subtasks"][0]["ends_when"] = "touching(hand, knob)"

    spec = write_spec(tmp_path, "door", mutate=mutate)
    assert_user_error(
        factory(tmp_path, "validate", spec),
        f"{spec}: subtasks[0].ends_when: unknown object 'knob'",
        "expected one of: handle, door, hand (the robot's gripper)",
    )


def test_a_reader_that_leaves_is_not_an_error():
    """`factory ... | head`: no "error: Broken pipe", no traceback; the shell's SIGPIPE status."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write
    try:
        done = subprocess.run(
            [sys.executable, "-m", "demofactory.cli.main", "spec-help", "--json-schema"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert done.stderr == ""
