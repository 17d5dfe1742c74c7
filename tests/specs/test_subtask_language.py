"""Language per subtask: `subtasks[i].instruction` templates, filled like the episode's, carried
per frame by generation (provenance subtask_starts / subtask_instructions) and exported as a
second task column (LeRobot: the `subtask` text feature) and a second annotation key (GR00T:
annotation.human.subtask_description, and N1.6's episode `sub_tasks`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from demofactory.cli.main import main
from demofactory.shards.export_gr00t import export_gr00t
from demofactory.shards.export_lerobot import export_lerobot
from demofactory.specs.language import episode_language
from demofactory.specs.spec import load_spec

from tests.conftest import SPECS
from tests.shards.test_exports import _in_order, make_dataset
from tests.simulation.test_scene_yaml import _refused, _write_spec

CUBE_BOWL = SPECS / "cube_bowl.yaml"
PICK_UP = "pick up the {cube.color} {cube.name}"
PUT_IN = "put it in the {bowl.name}"


def _with_subtasks(raw: dict, texts) -> None:
    for sub, text in zip(raw["subtasks"], texts, strict=True):
        if text is not None:
            sub["instruction"] = text


# --- the spec: templates checked, filled with the episode's own attributes ----------------------


def test_subtask_instructions_are_filled_like_the_episodes(tmp_path):
    path = _write_spec(tmp_path, CUBE_BOWL, lambda raw: _with_subtasks(raw, [PICK_UP, None]))
    spec = load_spec(path)
    for seed in range(4):
        language = episode_language(spec, seed)
        colour = language.attributes["cube"]["color"]
        assert language.subtasks == (f"pick up the {colour} cube", language.instruction)
        assert colour in language.instruction  # the same draw as the episode's instruction


def test_no_subtask_instruction_changes_nothing():
    spec = load_spec(CUBE_BOWL)
    assert episode_language(spec, 3).subtasks == ()
    before = load_spec(CUBE_BOWL).fingerprint()
    assert spec.fingerprint() == before  # datasets made before stay resumable


@pytest.mark.parametrize(
    "text, words",
    [
        ("pick up the {mug.name}", "{mug.name} names no object"),
        ("pick up the {cube.size}", "{cube.size} names no attribute"),
        ("pick up the {cube.name!r}", "malformed template"),
    ],
)
def test_an_unknown_template_field_is_one_line_naming_it(tmp_path, capsys, text, words):
    path = _write_spec(tmp_path, CUBE_BOWL, lambda raw: _with_subtasks(raw, [None, text]))
    _refused(capsys, path, "subtasks[1].instruction", words)


@pytest.mark.sim  # validate builds the Lift env for the spec it accepts
def test_a_slot_without_a_scene_is_refused(tmp_path, capsys):
    path = _write_spec(
        tmp_path, SPECS / "lift.yaml", lambda raw: _with_subtasks(raw, ["grab {cube.name}", None])
    )
    _refused(capsys, path, "subtasks[0].instruction", "no scene: section")
    path = _write_spec(
        tmp_path, SPECS / "lift.yaml", lambda raw: _with_subtasks(raw, ["grab the cube", None])
    )
    assert main(["validate", str(path)]) == 0
    spec = load_spec(path)
    assert episode_language(spec, 0).subtasks == ("grab the cube", spec.instructions[0])


# --- the exports: a second task column -----------------------------------------------------------

STARTS = {3: [[0, 0], [1, 2]], 7: [[0, 0], [1, 4]]}  # episode 11 has none: its instruction


def _dataset_with_subtasks(root: Path) -> dict:
    episodes = make_dataset(root)
    lines = [json.loads(line) for line in (root / "episodes.jsonl").read_text().splitlines()]
    for record in lines:
        if record["index"] in STARTS:
            record["provenance"]["subtask_instructions"] = ["grasp it", "lift it"]
            record["provenance"]["subtask_starts"] = STARTS[record["index"]]
    (root / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return episodes


def _expected(source) -> list[str]:
    if source.index not in STARTS:
        return [source.instruction] * source.length
    switch = STARTS[source.index][1][1]
    return ["grasp it"] * switch + ["lift it"] * (source.length - switch)


def test_lerobot_exports_the_subtask_as_a_text_feature(tmp_path):
    episodes = _in_order(_dataset_with_subtasks(tmp_path / "tiny"))
    export_lerobot(tmp_path / "tiny", tmp_path / "out")
    out = tmp_path / "out"
    info = json.loads((out / "meta/info.json").read_text())
    assert info["features"]["subtask"] == {"dtype": "string", "shape": [1], "names": None}
    frames = pq.read_table(out / "data/chunk-000/file-000.parquet").to_pydict()
    assert frames["subtask"] == [t for source in episodes for t in _expected(source)]
    tasks = pq.read_table(out / "meta/tasks.parquet").to_pydict()["task"]
    assert "grasp it" not in tasks  # task_index stays the episode's instruction
    stats = json.loads((out / "meta/stats.json").read_text())
    assert "subtask" not in stats  # LeRobot computes no statistics of text


def test_gr00t_exports_the_subtask_as_a_second_annotation(tmp_path):
    episodes = _in_order(_dataset_with_subtasks(tmp_path / "tiny"))
    export_gr00t(tmp_path / "tiny", tmp_path / "out")
    out = tmp_path / "out"
    modality = json.loads((out / "meta/modality.json").read_text())
    assert modality["annotation"] == {"human.task_description": {}, "human.subtask_description": {}}
    tasks = {
        row["task_index"]: row["task"]
        for row in map(json.loads, (out / "meta/tasks.jsonl").read_text().splitlines())
    }
    rows = [json.loads(line) for line in (out / "meta/episodes.jsonl").read_text().splitlines()]
    for n, (source, row) in enumerate(zip(episodes, rows, strict=True)):
        table = pq.read_table(out / f"data/chunk-000/episode_{n:06d}.parquet").to_pydict()
        texts = [tasks[i] for i in table["annotation.human.subtask_description"]]
        assert texts == _expected(source)
        assert {tasks[i] for i in table["annotation.human.task_description"]} == {
            source.instruction
        }
        assert row["tasks"] == [source.instruction]
        spans = row["sub_tasks"]  # N1.6's episode sub_tasks: [start, end) and the text
        covered = [text for s in spans for text in [s["text"]] * (s["end"] - s["start"])]
        assert covered == _expected(source) and spans[0]["start"] == 0


def test_a_bad_subtask_start_is_a_dataset_error(tmp_path):
    root = tmp_path / "tiny"
    _dataset_with_subtasks(root)
    lines = [json.loads(line) for line in (root / "episodes.jsonl").read_text().splitlines()]
    lines[0]["provenance"]["subtask_starts"] = [[5, 0]]  # no subtask 5
    (root / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    argv = ["export", str(root), "--to", "lerobot", str(tmp_path / "out")]
    assert main(argv) == 2
    assert not (tmp_path / "out").exists()


# --- generation: the steps each subtask starts at ------------------------------------------------


@pytest.mark.sim
@pytest.mark.slow
def test_a_generated_episode_records_its_subtask_starts(tmp_path):
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import ShardTask
    from demofactory.seeds.resolve import resolve_spec

    path = _write_spec(tmp_path, CUBE_BOWL, lambda raw: _with_subtasks(raw, [PICK_UP, PUT_IN]))
    cameras = [{"name": "frontcam", "width": 32, "height": 32}]
    resolved = resolve_spec(load_spec(path, {"cameras": cameras}))
    worker = ShardWorker(resolved.spec, resolved.demos, resolved.scene)
    attempt = worker.run_attempt(ShardTask(0, (0,)), 0)
    assert attempt.success, attempt.reason
    episode = worker.make_episode(attempt)
    starts = episode.provenance["subtask_starts"]
    assert [index for index, _ in starts] == [0, 1]
    steps = [step for _, step in starts]
    assert steps[0] == 0 and 0 < steps[1] < len(episode.actions)
    texts = episode.provenance["subtask_instructions"]
    colour = episode.provenance["language"]["attributes"]["cube"]["color"]
    assert texts == [f"pick up the {colour} cube", "put it in the bowl"]
    assert np.all(np.isfinite(episode.actions))
