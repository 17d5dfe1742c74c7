"""`factory seeds`: a spec's human seed demos written as a dataset, in the generated ones' format.

    factory seeds scene_specs/lift_lowdim.yaml --out out/lift-seeds

    seed demo hdf5 (states [T, N], actions [T, 7]; two arms: [T, 14]) ──► restore each state
        in the spec's Scene (a TwoArmScene for task.two_arm)
        ──► proprio [T, 9] (eef pos, eef quat xyzw, gripper qpos; two arms: [T, 18], right
            first), sim_state [T, N], the spec's cameras
        ──► Episode ──► write_shard (one shard)
        ──► dataset_info, episodes.jsonl, stats.json, manifest.json

The actions are the human's recorded commands, unchanged; the states are the
recorded MuJoCo states (the ground truth), so a policy trained on this dataset
sees exactly what a generated dataset of the same spec would hold for its seeds.
It is the baseline that `factory train-eval` compares generated data against.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from demofactory.build.output_dir import LOCK_FILENAME
from demofactory.build.run import add_camera_mounts, dataset_info, lock_output_dir
from demofactory.errors import SpecError, UserError
from demofactory.generators.records import SeedDemo
from demofactory.seeds.demos import load_seed_demos
from demofactory.seeds.resolve import Resolved
from demofactory.shards import (
    DatasetError,
    Episode,
    load_dataset_info,
    save_dataset_info,
    shards_dir,
)
from demofactory.shards.dataset import write_dataset
from demofactory.simulation.render import FrameRenderer
from demofactory.simulation.scene import Scene
from demofactory.specs.language import episode_language, paint_objects

SOURCE_MARK = "seed_demos"  # dataset_info.json "source" of a dataset written here


def check_seeds_dir(out_dir: Path, fingerprint: str) -> None:
    """Refuse an output directory holding anything but this spec's seed dataset (rewritten)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir}: output path exists and is not a directory")
    if not out_dir.exists() or all(p.name == LOCK_FILENAME for p in out_dir.iterdir()):
        return  # new, empty, or what a seeds run that stopped at once leaves
    try:
        info = load_dataset_info(out_dir)
    except DatasetError as err:  # the same class, with the way out added
        raise DatasetError(
            f"{out_dir}: unreadable dataset_info.json ({err}); choose another --out"
        ) from None
    if (
        info is None
        or info.get("source") != SOURCE_MARK
        or info.get("spec_fingerprint") != fingerprint
    ):
        raise UserError(
            f"{out_dir}: holds something other than this spec's seed-demo dataset; "
            "choose another --out (an empty or new folder)"
        )


def check_one_robot(spec) -> None:
    """A SpecError for a mixed-robot spec, or for seed demos of another robot than task.robot
    (before any env is built, and before the output folder is looked at): seeds are one robot's
    demos as recorded. It reads the seed demo files, not the env."""
    if spec.task.robots and len(spec.task.robots) > 1:
        raise SpecError(
            spec.path,
            "task.robots",
            "factory seeds writes the seed demos as recorded, by one robot; expected a spec with "
            "task.robot (the robot that recorded them) and no task.robots",
        )
    if spec.task.two_arm is not None:  # a pair of task.robot: both arms' columns checked
        from demofactory.seeds.annotate_bimanual import load_two_arm_demos

        demos = load_two_arm_demos(spec)
    else:
        demos = [d for path in spec.seed_demos for d in load_seed_demos(spec.resolve_path(path))]
    check_recording_robot(spec, demos)


def check_recording_robot(spec, demos) -> None:
    """A SpecError unless every demo was recorded by the spec's one robot: a seed dataset holds
    the demos as recorded (their MuJoCo states fit only a model built with that robot)."""
    recorders = sorted({d.robot for d in demos})
    if len(recorders) > 1:
        raise SpecError(
            spec.path,
            "seed_demos",
            f"recorded by several robots ({', '.join(recorders)}); factory seeds writes the "
            "demos as recorded, in one robot's scene: expected the demo files of one robot",
        )
    others = [r for r in recorders if r != spec.task.robot]
    if others:
        raise SpecError(
            spec.path,
            "task.robot",
            f"{spec.task.robot!r}: the seed demos were recorded by {', '.join(recorders)}, and "
            f"factory seeds writes them as recorded; expected task.robot: {others[0]}",
        )


def seed_episode(scene: Scene, renderer: FrameRenderer, demo: SeedDemo, index: int) -> Episode:
    """Replay one seed demo's states in `scene`: proprio, sim states per step, frames per camera."""
    scene.reset(demo.fixture_poses)
    # [T, 9], or [T, 18] on two arms (demofactory.simulation.bimanual: right, then left)
    proprio = np.empty((demo.length, len(scene.proprio())), dtype=np.float32)
    sim_states = np.empty((demo.length, scene.state_size), dtype=np.float64)
    for t, state in enumerate(demo.states):
        scene.set_state(state)
        proprio[t] = scene.proprio()
        sim_states[t] = scene.get_state()
    # A scene's palette colours are drawn as in generation (seeded by the index) and rendered.
    language = episode_language(scene.spec, index)
    unpaint = paint_objects(scene, language.rgba)
    try:
        frames = renderer.render_frames(demo.states)
    finally:
        unpaint()
    return Episode(
        index=index,
        shard=0,
        instruction=language.instruction,
        seed=index,
        actions=demo.actions.astype(np.float32),
        states=proprio,
        sim_states=sim_states,
        images=frames.images,
        depth=frames.depth,
        segmentation=frames.segmentation,
        provenance={
            "kind": SOURCE_MARK,
            "source": demo.label,
            **({"paraphrases": list(language.paraphrases)} if language.paraphrases else {}),
        },
    )


def write_seed_dataset(resolved: Resolved, out_dir: Path) -> dict:
    """Write every seed demo of `resolved.spec` as one shard in `out_dir`; returns a summary."""
    spec, scene = resolved.spec, resolved.scene
    check_seeds_dir(out_dir, spec.fingerprint())
    if not resolved.demos:
        raise UserError(f"{spec.path}: seed_demos: the spec lists no seed demo to write")
    check_recording_robot(spec, [d.demo for d in resolved.demos])
    out_dir.mkdir(parents=True, exist_ok=True)
    with lock_output_dir(out_dir):  # one writer a dataset, and the folder looked at again
        check_seeds_dir(out_dir, spec.fingerprint())
        return _write_locked(spec, scene, resolved, out_dir)


def _write_locked(spec, scene, resolved: Resolved, out_dir: Path) -> dict:
    shards_dir(out_dir).mkdir(parents=True, exist_ok=True)
    info = add_camera_mounts(dataset_info(spec, scene.state_size), scene)  # two arms: wrists
    info["source"] = SOURCE_MARK
    save_dataset_info(out_dir, info)
    renderer = FrameRenderer(scene, spec.cameras, spec.render)
    try:
        episodes = [seed_episode(scene, renderer, d.demo, i) for i, d in enumerate(resolved.demos)]
    finally:
        renderer.close()
    # the manifest last: the dataset counts once listed
    manifest = write_dataset(out_dir, episodes, info, layout=spec.output.shard_layout)
    return {
        "out": str(out_dir),
        "episodes": len(episodes),
        "steps": manifest.total_samples,
        "cameras": [c.name for c in spec.cameras],
        "sources": [d.demo.label for d in resolved.demos],
    }
