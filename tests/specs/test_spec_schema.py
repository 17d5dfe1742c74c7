"""The spec documents itself: descriptions on every field, `factory spec-help`, the JSON Schema
and the spec reference's tables (docs/spec_reference.md) generated from them (and kept in step),
and `extends:` between specs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from demofactory.errors import SpecError, UserError
from demofactory.specs import docs as spec_docs
from demofactory.specs.spec import SceneSpec, load_raw_spec, load_spec
from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "scene_specs"
REGENERATE = f"run `{spec_docs.WRITE_COMMAND}` in the repository root (or `make schema`)"


def _models(model: type[BaseModel] = SceneSpec) -> list[type[BaseModel]]:
    found = [model]
    for doc in spec_docs.field_docs(model):
        if doc.section is not None and doc.section not in found:
            found += [m for m in _models(doc.section) if m not in found]
    return found


def test_every_field_has_a_description():
    missing = [
        f"{model.__name__}.{name}"
        for model in _models()
        for name, info in model.model_fields.items()
        if not (info.description or "").strip()
    ]
    assert not missing, f"fields without Field(description=...): {missing}"


def test_schema_json_matches_the_models():
    committed = (REPO / spec_docs.SCHEMA_FILE).read_text()
    assert committed == spec_docs.schema_text(), f"scene_specs/schema.json is stale: {REGENERATE}"


def test_reference_tables_match_the_models():
    page = (REPO / spec_docs.REFERENCE_FILE).read_text()
    assert spec_docs.render_reference(page) == page, (
        f"spec reference tables are stale: {REGENERATE}"
    )


def test_predicate_docs_cover_the_registry():
    assert spec_docs.check_predicate_docs() == []
    assert "`inside(a, bin)`" in spec_docs.reference_blocks()["predicate-table"]


@pytest.mark.parametrize("path", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_specs_name_the_schema_and_are_written_by_hand(path):
    text = path.read_text()
    assert text.splitlines()[0] == spec_docs.SCHEMA_LINE, f"{path.name}: first line"
    assert "&id0" not in text and "*id0" not in text, f"{path.name}: YAML anchors"
    assert "\n- " not in text and "\n  - 0\n" not in text, f"{path.name}: a machine dump's lists"


def test_schema_accepts_extends_and_requires_fields_only_without_it():
    schema = spec_docs.json_schema()
    assert "extends" in schema["properties"]
    assert schema["if"] == {"required": ["extends"]}
    assert {"name", "task", "subtasks"} <= set(schema["else"]["required"])


@pytest.mark.parametrize("path", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_specs_pass_the_json_schema(path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((REPO / spec_docs.SCHEMA_FILE).read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
    assert errors == [], f"{path.name}: what an editor would flag"
    broken = load_raw_spec(SPECS / "lift.yaml")
    del broken["task"]["env"]
    broken["generation"]["atempts"] = 3
    messages = " ".join(e.message for e in validator.iter_errors(broken))
    assert "'env' is a required property" in messages and "'atempts'" in messages


def test_lookup_and_help_text():
    assert spec_docs.lookup("generation.transit").allowed == ("direct", "over", "plan")
    text = spec_docs.spec_help("generation")
    for name in SceneSpec.model_fields["generation"].annotation.model_fields:
        assert f"  {name} " in text
    top = spec_docs.spec_help()
    for name in SceneSpec.model_fields:
        assert f"  {name} " in top
    assert "inside(a, bin)" in spec_docs.spec_help("subtasks.ends_when")
    with pytest.raises(UserError, match="generation.attempts"):
        spec_docs.lookup("generation.atempts")


def _factory(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "demofactory.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_spec_help_through_the_cli():
    result = _factory("spec-help", "generation.transit")
    assert result.returncode == 0, result.stderr
    assert "allowed values: direct, over" in result.stdout
    result = _factory("spec-help", "generation.nope")
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "'generation.nope'" in lines[0] and "generation.transit" in lines[0]
    result = _factory("spec-help", "--json-schema")
    assert json.loads(result.stdout) == spec_docs.json_schema()
    assert "spec-help" in _factory("validate", "--help").stdout


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_extends_merges_mappings_and_replaces_lists(tmp_path):
    sub = tmp_path / "variants"
    sub.mkdir()
    child = _write(
        sub / "child.yaml",
        {
            "extends": str(SPECS / "stack.yaml"),  # absolute: joined to the folder, stays itself
            "name": "child",
            "placement": {"objects": {"cubeA": {"yaw": [-1.0, 1.0]}}},
            "cameras": [],
        },
    )
    spec, parent = load_spec(child), load_spec(SPECS / "stack.yaml")
    assert spec.placement.objects["cubeA"].yaw == (-1.0, 1.0)
    assert spec.placement.objects["cubeA"].x == parent.placement.objects["cubeA"].x
    assert spec.placement.objects["cubeB"] == parent.placement.objects["cubeB"]
    assert spec.cameras == [] and spec.instructions == parent.instructions
    # The parent's seed demos, relative to the parent, are rewritten relative to the child.
    assert spec.resolve_path(spec.seed_demos[0]) == parent.resolve_path(parent.seed_demos[0])
    assert "extends" not in load_raw_spec(child)


def test_a_variant_has_the_fingerprint_of_the_spec_it_spells_out(tmp_path):
    flat = load_raw_spec(SPECS / "stack_d0.yaml")
    assert "extends" not in flat and flat["name"] == "stack_d0"
    # Written out whole elsewhere, with the same seed demo paths relative to the new file.
    flat["seed_demos"] = [os.path.relpath(SPECS / d, tmp_path) for d in flat["seed_demos"]]
    spelled, variant = (
        load_spec(_write(tmp_path / "d0.yaml", flat)),
        load_spec(SPECS / "stack_d0.yaml"),
    )
    assert spelled.model_dump(exclude={"seed_demos"}) == variant.model_dump(exclude={"seed_demos"})
    assert spelled.resolve_path(spelled.seed_demos[0]) == variant.resolve_path(
        variant.seed_demos[0]
    )
    flat["seed_demos"] = variant.seed_demos
    assert load_spec(_write(SPECS.parent / tmp_path / "d0b.yaml", flat)).fingerprint() == (
        variant.fingerprint()
    )


def test_extends_errors_name_the_file_and_the_field(tmp_path):
    missing = _write(tmp_path / "a.yaml", {"extends": "nowhere.yaml", "name": "a"})
    with pytest.raises(SpecError) as info:
        load_spec(missing)
    assert info.value.where == str(missing) and info.value.field == "extends"
    assert "nowhere.yaml" in info.value.message
    _write(tmp_path / "b.yaml", {"extends": "c.yaml"})
    cycle = _write(tmp_path / "c.yaml", {"extends": "b.yaml"})
    with pytest.raises(SpecError) as info:
        load_spec(cycle)
    assert info.value.field == "extends" and "cycle" in info.value.message
    result = _factory("validate", str(cycle))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1 and ": extends: " in result.stderr
