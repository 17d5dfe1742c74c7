"""Divergence: how far an episode's actions, replayed open loop, drift under other physics.

    episode: actions [T, 7], provenance (placement, fixtures, physics), reference states [T, N]
      ──► N draws from the physics ranges, seeded (episode seed, DIVERGENCE_STREAM, draw index)
      ──► per draw: Scene.set_physics(draw) ──► reset to the recorded start ──► step each action
            ──► states [T, N] ──► eef and object positions (forward kinematics of each state)
            ──► success: the task's predicate held on the last success_hold_steps steps,
                the rule generation keeps an attempt by (demofactory.generators.mimicgen)
      ──► score (provenance["divergence"]): success share, position error vs the reference
            (mean and max over time, averaged over the draws), the per-draw successes

Why not `mujoco.rollout`: it steps a control sequence known in advance (ctrl per physics step),
but here the OSC controller computes the torques from the state at every substep; only the
delta-pose commands are known. The replay steps `Scene.step` (demofactory.simulation.fast_step when
`task.fast_control`: robosuite's OSC math without its per-substep overhead).

Used by `factory divergence` (factory/robustness/divergence_run.py: the reference is the episode
replayed
under its recorded draw) and by `generation.robustness` in the pipeline (the reference is the
attempt's own states).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import mujoco
import numpy as np
from demofactory.generators.records import AnnotatedDemo, Attempt
from demofactory.generators.scene_api import Placement
from demofactory.simulation.physics import PhysicsDraw, draw_physics, recorded_physics
from demofactory.simulation.scene import Scene
from demofactory.specs.sections import PhysicsSpec, RobustnessSpec

DIVERGENCE_STREAM = 0x64697667  # "divg": the divergence draws' SeedSequence key
DIGITS = 6  # errors in metres rounded to micrometres in provenance


def divergence_rng(episode_seed: int, index: int) -> np.random.Generator:
    """The generator of draw `index` of an episode: its own stream, apart from the attempt's
    physics draw (demofactory.simulation.physics.physics_rng) and every other draw of the
    attempt."""
    return np.random.default_rng(np.random.SeedSequence([episode_seed, DIVERGENCE_STREAM, index]))


def divergence_draws(
    spec: PhysicsSpec, episode_seed: int, draws: int, gravity: Sequence[float]
) -> list[PhysicsDraw]:
    """`draws` physics draws from `spec`'s ranges for the episode seeded `episode_seed`."""
    return [draw_physics(spec, divergence_rng(episode_seed, i), gravity) for i in range(draws)]


@dataclass(frozen=True)
class Replay:
    """One open-loop replay. states: [t, N] float64 before each action (t < T when the
    simulation went unstable at step t); success: the task held at the end (False when
    unstable)."""

    states: np.ndarray
    success: bool
    stable: bool


def replay(
    scene: Scene,
    first_demo: AnnotatedDemo,
    provenance: Mapping,
    actions: np.ndarray,
    draw: PhysicsDraw | None,
    hold: int,
) -> Replay:
    """`actions` [T, 7] from the episode's recorded start under `draw` (as
    demofactory.simulation.resimulate.resimulate), checking the task's success after each of the
    last `hold`
    steps. A simulator error or a non-finite state ends the replay as a failure."""
    scene.set_physics(draw)
    fixtures = provenance.get("fixtures", first_demo.fixture_poses)
    placement = Placement.from_json(provenance["placement"])
    scene.reset_to(first_demo.start_state, placement, fixtures=fixtures)
    states = np.empty((len(actions), scene.state_size))
    held, t = len(actions) >= hold, 0
    try:
        for t, action in enumerate(actions):
            states[t] = scene.get_state()
            if not np.isfinite(states[t]).all():
                return Replay(states[:t], False, False)
            scene.step(action)
            if t >= len(actions) - hold:
                held = held and scene.success()
    except Exception:  # MuJoCo instabilities and controller errors: as generation counts them
        return Replay(states[:t], False, False)
    stable = bool(np.isfinite(scene.get_state()).all())
    return Replay(states, held and stable, stable)


@dataclass(frozen=True)
class Track:
    """Positions over time, metres, world frame: eef [T, 3] (the grip site) and per spec
    object [T, 3] (its body origin)."""

    eef: np.ndarray
    objects: Mapping[str, np.ndarray]


def track(scene: Scene, states: np.ndarray) -> Track:
    """Forward kinematics of each state under the physics now applied (a size draw moves the
    bodies inside an object), in a scratch MjData: the scene's own is left alone. From states,
    not read while stepping: after a step MuJoCo's positions are the last substep's."""
    model = scene.model
    data = mujoco.MjData(model)
    site, nq = scene.grip_site, model.nq
    bodies = {name: scene.bodies[name] for name in scene.spec.objects}
    eef = np.empty((len(states), 3))
    objects = {name: np.empty((len(states), 3)) for name in bodies}
    for t, state in enumerate(states):
        data.qpos[:] = state[1 : 1 + nq]
        mujoco.mj_kinematics(model, data)
        eef[t] = data.site_xpos[site]
        for name, body in bodies.items():
            objects[name][t] = data.xpos[body]
    return Track(eef, objects)


def position_error(path: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """(mean, max) over time of the distance between two [T, 3] paths; a path cut short by an
    instability counts its steps only (none: 0, 0)."""
    if not len(path):
        return 0.0, 0.0
    distance = np.linalg.norm(path - reference[: len(path)], axis=1)
    return float(distance.mean()), float(distance.max())


def score_replays(reference: Track, replays: Sequence[tuple[Replay, Track]]) -> dict:
    """The JSON score of an episode from its draws' replays (provenance["divergence"])."""
    n = len(replays)
    successes = [r.success for r, _ in replays]

    def averaged(errors: list[tuple[float, float]]) -> dict:
        return {
            "mean": round(sum(e[0] for e in errors) / n, DIGITS),
            "max": round(sum(e[1] for e in errors) / n, DIGITS),
        }

    return {
        "draws": n,
        "success_share": sum(successes) / n,
        "successes": successes,
        "unstable": sum(not r.stable for r, _ in replays),
        "eef_error_m": averaged([position_error(t.eef, reference.eef) for _, t in replays]),
        "object_error_m": {
            name: averaged([position_error(t.objects[name], path) for _, t in replays])
            for name, path in reference.objects.items()
        },
    }


def score_episode(
    scene: Scene,
    first_demo: AnnotatedDemo,
    provenance: Mapping,
    actions: np.ndarray,
    reference_states: np.ndarray,
    draws: Sequence[PhysicsDraw],
    hold: int,
) -> dict:
    """The divergence score of one episode under `draws` against `reference_states` [T, N]
    (its states under the recorded physics). The scene is left under the recorded draw."""
    recorded = recorded_physics(provenance)
    scene.set_physics(recorded)
    reference = track(scene, reference_states)
    replays = []
    for draw in draws:
        run = replay(scene, first_demo, provenance, actions, draw, hold)
        replays.append((run, track(scene, run.states)))
    scene.set_physics(recorded)  # the episode's own physics again (rendering needs it)
    return score_replays(reference, replays)


@dataclass(frozen=True)
class RobustnessFilter:
    """generation.robustness as a per-attempt filter (`demofactory.build.pipeline.AttemptFilter`): a
    success
    replayed open loop under `robust.draws` other physics draws (score in provenance.divergence);
    below `robust.min_success_share` it fails as "fragile"."""

    robust: RobustnessSpec
    hold_steps: int  # generation.success_hold_steps

    def __call__(
        self,
        scene: Scene,
        demos: Sequence[AnnotatedDemo],
        physics: PhysicsSpec | None,
        attempt: Attempt,
    ) -> Attempt:
        if not attempt.success:
            return attempt
        robust = self.robust
        draws = divergence_draws(physics, attempt.seed, robust.draws, scene.physics.gravity)
        score = score_episode(
            scene,
            demos[0],
            attempt.provenance,
            attempt.actions,
            attempt.states,
            draws,
            self.hold_steps,
        )
        attempt.provenance["divergence"] = score
        if score["success_share"] >= robust.min_success_share:
            return attempt
        reason = (
            f"fragile: succeeded under {sum(score['successes'])} of {robust.draws} physics "
            f"draws, generation.robustness.min_success_share is {robust.min_success_share}"
        )
        return replace(attempt, success=False, reason=reason)
