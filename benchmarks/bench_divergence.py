"""What a divergence score costs, in core-seconds per episode, against generating the episode.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_divergence.py [--episodes 3] [--draws 4]

Stack (scene_specs/stack_lowdim.yaml) with a mild `physics:` section. In one process, one
scene: attempts are generated (ShardWorker.run_attempt, the reference cost) until `--episodes`
succeed; each success is scored the way `factory divergence` scores a dataset's episode
(demofactory.robustness.divergence_run.score_recorded: the first steps replayed under its recorded
draw,
checked bit for bit against its states, then `--draws` whole replays under other draws).
Costs are process CPU time (core-seconds), not wall time: the machine is shared. Prints one
JSON object: core-seconds per episode, the projection to core-minutes per 100 episodes against
the 5-minute target, and the ratio of scoring to generation (generation per episode includes its
share of the failed attempts).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import yaml
from demofactory.build.pipeline import ShardWorker
from demofactory.build.records import ShardTask
from demofactory.robustness.divergence_run import CHECK_STEPS, score_recorded
from demofactory.seeds.resolve import resolve_spec
from demofactory.shards.metadata import EpisodeRecord
from demofactory.specs.spec import load_spec

SPECS = Path(__file__).resolve().parent.parent / "scene_specs"
PHYSICS = {
    "friction": {"cubeA": [0.7, 1.3], "gripper": [0.8, 1.2]},
    "mass": {"cubeA": [0.8, 1.5]},
    "kp": [0.8, 1.2],
    "damping_ratio": [0.8, 1.2],
    "delay": [0, 1],
}
TARGET_CORE_MIN_PER_100 = 5.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--draws", type=int, default=4)
    parser.add_argument("--max-attempts", type=int, default=12)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "stack_physics.yaml"
        raw = {"extends": str(SPECS / "stack_lowdim.yaml"), "name": "stack_physics"}
        path.write_text(yaml.safe_dump({**raw, "physics": PHYSICS}, sort_keys=False))
        spec = load_spec(path)
    resolved = resolve_spec(spec)
    scene, demos = resolved.scene, resolved.demos
    worker = ShardWorker(spec, demos, scene)
    hold = spec.generation.success_hold_steps
    generate_s = score_s = 0.0
    attempts, scores, steps = 0, [], 0
    while len(scores) < args.episodes and attempts < args.max_attempts:
        start = time.process_time()
        attempt = worker.run_attempt(ShardTask(0, (attempts,)), attempts)
        generate_s += time.process_time() - start
        attempts += 1
        if not attempt.success:
            continue
        record = EpisodeRecord(0, "", attempt.length, "", attempt.seed, dict(attempt.provenance))
        start = time.process_time()
        score = score_recorded(
            scene, demos[0], record, attempt.actions, attempt.states, spec.physics, args.draws, hold
        )
        score_s += time.process_time() - start
        scores.append(score)
        steps += attempt.length
    if not scores:
        raise SystemExit(f"no success in {attempts} attempts: nothing to score")
    per_episode = score_s / len(scores)
    generation_per_episode = generate_s / len(scores)
    projected = 100 * per_episode / 60
    replayed = args.draws * steps + CHECK_STEPS * len(scores)
    print(
        json.dumps(
            {
                "benchmark": "divergence",
                "spec": "stack_lowdim.yaml + physics",
                "draws": args.draws,
                "episodes": len(scores),
                "attempts": attempts,
                "mean_length": round(steps / len(scores), 1),
                "reference_exact": sum(s["reference"]["exact"] for s in scores),
                "success_shares": [s["success_share"] for s in scores],
                "core_s_per_episode": round(per_episode, 3),
                # the draws' replays, and the check's first CHECK_STEPS under the recorded draw
                "core_ms_per_replayed_step": round(1e3 * score_s / replayed, 3),
                "core_min_per_100_episodes": round(projected, 2),
                "target_core_min_per_100": TARGET_CORE_MIN_PER_100,
                "within_target": projected <= TARGET_CORE_MIN_PER_100,
                "generation_core_s_per_episode": round(generation_per_episode, 3),
                "ratio_to_generation": round(per_episode / generation_per_episode, 3),
            }
        )
    )


if __name__ == "__main__":
    from demofactory.robots import repairs as robot_repairs

    robot_repairs.install()  # before any env is built, as the CLI does
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
