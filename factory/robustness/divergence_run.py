"""`factory divergence DATASET [--spec SPEC]`: every episode scored under N other physics draws
(without --spec: the spec the dataset records).

    factory divergence out/stack --spec scene_specs/stack_lowdim.yaml --draws 4 \\
        [--ranges ranges.yaml]        # a `physics:` fragment instead of the spec's ranges

    checks (nothing written when one fails): the dataset was made from this spec (the parts a
      replay depends on), physics ranges exist, every episode records its start
    ──► the episodes, read from the shards (checksums first), one replay per trajectory
          (appearance variants share their actions and physics)
        ──► under the recorded draw, its first steps: they must give the recorded states,
              which are then the reference (else the whole replay is)
        ──► under N draws (demofactory.robustness.divergence) ──► provenance["divergence"]
    ──► generation.json (atomically; a resumed or extended `factory run` rebuilds episodes.jsonl
        from it, scores included), then episodes.jsonl ──► a summary (JSON)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import yaml
from demofactory.build.output_dir import GENERATION_FILENAME, load_generation, require_dataset_info
from demofactory.errors import SpecError, UserError
from demofactory.generators.records import AnnotatedDemo
from demofactory.robustness.adr import adr_physics
from demofactory.robustness.divergence import divergence_draws, replay, score_episode
from demofactory.robustness.divergence_report import summarize_divergence
from demofactory.seeds.cross_robot import annotate_seed
from demofactory.seeds.demos import load_seed_demos
from demofactory.shards import DatasetError, save_episodes
from demofactory.shards.export_source import load_source, read_episodes
from demofactory.shards.format import dumps_json, write_text_atomic
from demofactory.shards.journal import journal_path
from demofactory.shards.metadata import EpisodeRecord
from demofactory.simulation.physics import recorded_physics
from demofactory.simulation.scene import Scene
from demofactory.specs.sections import PhysicsSpec
from demofactory.specs.spec import SceneSpec
from pydantic import ValidationError
from tqdm import tqdm

# The spec parts a replay depends on: the model (task, scene, objects, the seed robosuite
# builds it with) and the start every attempt takes (the first seed demo's first state).
REPLAY_KEYS = ("task", "scene", "objects", "seed", "seed_demos")
CHECK_STEPS = 20  # steps of the replay under the recorded draw compared bit for bit (see below)


def load_ranges(path: Path) -> PhysicsSpec:
    """A YAML file's `physics:` section (a spec fragment); UserError naming the file and field."""
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as err:
        raise UserError(f"{path}: --ranges: cannot read ({err.strerror})") from None
    except yaml.YAMLError as err:
        raise UserError(f"{path}: --ranges: not YAML ({str(err).splitlines()[0]})") from None
    except RecursionError:
        raise UserError(f"{path}: --ranges: YAML nested too deep to read") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("physics"), dict):
        raise SpecError(
            path, "physics", "expected a physics: section, e.g. physics: {mass: {cube: [0.8, 2]}}"
        )
    try:
        return PhysicsSpec.model_validate(raw["physics"])
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in ("physics", *first["loc"]))
        raise SpecError(path, where, first["msg"]) from None


def divergence_ranges(
    spec: SceneSpec, dataset: Path, ranges: Path | None
) -> tuple[PhysicsSpec, str]:
    """The ranges to draw from and where they came from: --ranges, the ranges ADR settled on
    for the dataset (when the spec runs ADR), or the spec's `physics:` section."""
    if ranges is not None:
        return load_ranges(ranges), str(ranges)
    adr = spec.generation.adr
    if adr is not None and adr.enabled:
        found = adr_physics(dataset)
        if found is not None:
            return found, f"{GENERATION_FILENAME} adr"
    # A spec read back from the dataset (no --spec) has no file: name where it was stored.
    where = spec.path if spec.path != Path("<memory>") else dataset / "dataset_info.json spec"
    if spec.physics is None:
        raise UserError(
            f"{where}: physics: the spec has no physics ranges to draw from; add a physics: "
            "section or pass --ranges FILE (a YAML physics: fragment)"
        )
    return spec.physics, f"{where} physics"


def check_dataset_spec(dataset: Path, spec: SceneSpec) -> dict:
    """dataset_info.json, checked to come from `spec` in every part a replay depends on."""
    info = require_dataset_info(dataset)
    robots = sorted(info.get("embodiments") or {})
    if len(robots) > 1:  # its episodes replay in one robot's scene each
        raise UserError(
            f"{dataset}: a mixed-robot dataset ({', '.join(robots)}); divergence replays in one "
            "robot's scene: score a dataset per robot (task.robot)"
        )
    made = info.get("spec") or {}
    ours = spec.model_dump(mode="json")
    differ = [key for key in REPLAY_KEYS if made.get(key) != ours.get(key)]
    if differ:
        raise UserError(
            f"{dataset}: made from spec {info.get('name')!r} whose {', '.join(differ)} differ "
            f"from --spec {spec.path}; pass the spec the dataset was made from"
        )
    if not (dataset / GENERATION_FILENAME).is_file():
        raise UserError(
            f"{dataset}: no {GENERATION_FILENAME}: not a generated dataset (seed demos?); "
            "expected the output of `factory run`"
        )
    if journal_path(dataset).exists():  # its generation.json is not the whole story yet
        raise UserError(
            f"{dataset}: {journal_path(dataset).name} holds shards of an unfinished `factory run`; "
            "run the same command again to finish it first"
        )
    return info


def first_seed_demo(spec: SceneSpec, scene: Scene) -> AnnotatedDemo:
    """The demo every attempt starts from (generation resets to its first state)."""
    if not spec.seed_demos:
        raise SpecError(spec.path, "seed_demos", "the first seed demo is every episode's start")
    first = load_seed_demos(spec.resolve_path(spec.seed_demos[0]))[0]
    return annotate_seed(scene, first, {})


def score_dataset(
    dataset: Path,
    spec: SceneSpec,
    draws: int = 4,
    ranges: Path | None = None,
    show_progress: bool = True,
    log: Callable[[str], None] = lambda line: None,
) -> dict:
    """Score every episode of `dataset` (see the module doc) and write the scores; returns the
    summary. Raises UserError/DatasetError before writing anything."""
    from demofactory.build.output_dir import lock_output_dir

    _load_checked(dataset, spec, ranges)  # a first look, to refuse before the scene is built
    start = time.perf_counter()
    scene = Scene(spec)
    first = first_seed_demo(spec, scene)
    with lock_output_dir(dataset, command="divergence"):
        # Read again under the lock: the episodes it rewrites are those it read, and a
        # `factory run` that extended the dataset since the first look would otherwise be undone.
        source, physics, origin = _load_checked(dataset, spec, ranges)
        scores = _score_all(source, scene, first, physics, draws, show_progress)
        scores_s = time.perf_counter() - start
        for score in scores.values():
            score["ranges"] = origin
        records = write_scores(dataset, source.records, scores)
    summary = {
        **summarize_divergence(records),
        "dataset": str(dataset),
        "draws": draws,
        "ranges": origin,
        "trajectories": len(scores),
        "reference_exact": sum(s["reference"]["exact"] for s in scores.values()),
        "wall_s": round(scores_s, 3),
    }
    inexact = len(scores) - summary["reference_exact"]
    if inexact:
        log(
            f"warning: {inexact} of {len(scores)} trajectories do not replay to their recorded "
            "states under their recorded physics (a dataset made before actions were executed as "
            "the float32 they are stored as?); errors are measured against the replay"
        )
    return summary


def _load_checked(dataset: Path, spec: SceneSpec, ranges: Path | None):
    """The dataset's episodes to score, and the physics ranges; a UserError/DatasetError
    when the dataset and `spec` do not go together."""
    check_dataset_spec(dataset, spec)
    physics, origin = divergence_ranges(spec, dataset, ranges)
    source = load_source(dataset)
    missing = [r.index for r in source.records if "placement" not in r.provenance]
    if missing:
        raise DatasetError(
            f"{dataset}: episodes {missing[:5]} record no placement in their provenance; "
            "expected episodes made by `factory run`"
        )
    return source, physics, origin


def _score_all(source, scene, first, physics, draws, show_progress) -> dict[int, dict]:
    """seed -> score, one per trajectory (its variants share it)."""
    hold = scene.spec.generation.success_hold_steps
    scores: dict[int, dict] = {}
    bar = tqdm(
        total=len(source.records),
        desc="divergence",
        unit="ep",
        disable=not show_progress,
        dynamic_ncols=True,
    )
    with bar:
        for episode in read_episodes(source):
            record = episode.record
            if record.seed not in scores:
                scores[record.seed] = score_recorded(
                    scene, first, record, episode.actions, episode.sim_states, physics, draws, hold
                )
            bar.update(1)
    return scores


def score_recorded(scene, first, record, actions, recorded_states, physics, draws, hold) -> dict:
    """An episode's score against its recorded states, once a replay under its recorded draw
    gives them back; score["reference"] says how that check went.

    The check replays the first CHECK_STEPS steps only: MuJoCo is deterministic, so a replay
    that starts from the same state with the same model and the same actions and agrees bit for
    bit over those steps agrees over the rest (a different model, start or action rounding shows
    from the first step on), and a whole replay would cost a fifth of the score. When it does not
    agree (a dataset made before generation executed actions as the float32 it stores), the whole
    replay under the recorded draw becomes the reference.
    """
    provenance = record.provenance
    recorded = recorded_physics(provenance)
    check = replay(scene, first, provenance, actions[:CHECK_STEPS], recorded, hold=1)
    n = len(check.states)
    exact = check.stable and np.array_equal(check.states, recorded_states[:n])
    reference = {"exact": bool(exact), "checked_steps": n}
    states = recorded_states
    if not exact:
        own = replay(scene, first, provenance, actions, recorded, hold)
        states = own.states
        same = own.states.shape == recorded_states.shape
        reference.update(
            checked_steps=len(own.states),
            success=own.success,
            max_state_error=float(np.abs(own.states - recorded_states).max()) if same else None,
        )
    chosen = divergence_draws(physics, record.seed, draws, scene.physics.gravity)
    score = score_episode(scene, first, provenance, actions, states, chosen, hold)
    score["reference"] = reference
    return score


def write_scores(
    dataset: Path, records: tuple[EpisodeRecord, ...], scores: Mapping[int, dict]
) -> list[EpisodeRecord]:
    """provenance["divergence"] into generation.json's episode entries (first, atomically),
    then episodes.jsonl; returns the records as written."""
    generation = load_generation(dataset)
    listed = {r.index for r in records}
    found = set()
    for entry in generation["shards"].values():
        for episode in entry.get("episodes", []):
            if episode.get("index") in listed and episode.get("seed") in scores:
                episode["provenance"]["divergence"] = scores[episode["seed"]]
                found.add(episode["index"])
    if found != listed:
        raise DatasetError(
            f"{dataset / GENERATION_FILENAME}: holds no entry for episodes "
            f"{sorted(listed - found)[:5]} that episodes.jsonl lists (run factory verify)"
        )
    updated = [
        EpisodeRecord(
            index=r.index,
            shard=r.shard,
            length=r.length,
            instruction=r.instruction,
            seed=r.seed,
            provenance={**r.provenance, "divergence": scores[r.seed]},
        )
        for r in records
    ]
    path = dataset / GENERATION_FILENAME
    for written, write in (
        (path, lambda: write_text_atomic(path, dumps_json(generation, indent=2))),
        (dataset / "episodes.jsonl", lambda: save_episodes(dataset, updated)),
    ):
        try:
            write()
        except OSError as err:  # a full disk: the atomic writes left the old file in place
            raise UserError(
                f"{written}: cannot write the scores ({err.strerror or err}); the file is as "
                "it was: free some space and run the same command again"
            ) from None
    return updated


def summary_text(summary: dict) -> str:
    """The summary as one JSON line (the command's last output)."""
    return json.dumps(summary, sort_keys=True)
