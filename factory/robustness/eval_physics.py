"""`factory train-eval --eval-physics RANGES`: roll a policy out under physics it was not shown.

RANGES: a YAML file holding a `physics:` fragment (the spec section's schema), or the same
as inline YAML/JSON, e.g. scene_specs/physics/shifted.yaml:
    physics: {friction: {cube: 0.5}, mass: {cube: 2.0}, kp: 0.6, delay: 2}
    ──► load_eval_physics: PhysicsSpec (pydantic, errors as the spec loader words them)
        and the scene's PhysicsTargets (unknown objects, bodies, joints), both naming RANGES
    ──► rollout i: draw_physics(ranges, physics_rng(eval_seed i)) (the physics draw's own
        stream: the placement drawn from the same seed is the nominal run's), set on the
        scene before the rollout's reset; a fixed value draws itself every time
    ──► after the last rollout: the scene's own physics back (nominal in train-eval)
    ──► report: "eval_physics" (source and ranges) and per rollout "physics" (its draw)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml
from demofactory.errors import SpecError, UserError
from demofactory.simulation.physics import PhysicsDraw, draw_physics, physics_rng
from demofactory.specs.sections import PhysicsSpec, StrictModel
from demofactory.specs.spec import _describe  # the spec loader's wording of pydantic errors
from pydantic import ValidationError

INLINE = "--eval-physics"  # what errors name when RANGES is inline text, not a file


class _RangesFile(StrictModel):
    # `physics` at the top, as in a spec: errors then carry the spec's own paths (physics.kp).
    physics: PhysicsSpec


@dataclass(frozen=True)
class EvalPhysics:
    """Evaluation physics: `ranges` (a PhysicsSpec) read from `source` (a file, or INLINE)."""

    source: str
    ranges: PhysicsSpec

    def draw(self, seed: int, gravity) -> PhysicsDraw:
        """The draw of the rollout seeded `seed`; `gravity`: the model's nominal vector."""
        return draw_physics(self.ranges, physics_rng(seed), gravity)

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "physics": self.ranges.model_dump(mode="json", exclude_defaults=True),
        }


def parse_eval_physics(value: str) -> EvalPhysics:
    """RANGES as a file path or, when no such file exists and it looks like a mapping, inline
    YAML/JSON. Pure (no scene): SpecError/UserError name the file (or the flag) and the field."""
    path = Path(value)
    inline = not path.is_file() and value.lstrip().startswith("{")
    if not inline and not path.is_file():
        raise UserError(
            f"{INLINE} {value}: no such file (expected a YAML file holding a physics: mapping, "
            "e.g. scene_specs/physics/shifted.yaml, or inline YAML such as '{physics: {kp: 0.6}}')"
        )
    where = INLINE if inline else str(path)
    try:
        raw = yaml.safe_load(value if inline else path.read_text())
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as err:
        raise UserError(f"{where}: not readable YAML ({str(err).splitlines()[0]})") from None
    except RecursionError:  # PyYAML composes recursively
        raise UserError(f"{where}: not readable YAML (nested too deep)") from None
    if not isinstance(raw, dict) or "physics" not in raw:
        raise SpecError(
            where,
            "physics",
            "expected a mapping with one key, physics (e.g. "
            "physics: {mass: {cube: 2.0}, kp: 0.6, delay: 2})",
        )
    extra = sorted(str(k) for k in raw if k != "physics")
    if extra:
        raise SpecError(where, extra[0], "unknown key (expected only: physics)")
    try:
        ranges = _RangesFile.model_validate(raw).physics
    except ValidationError as err:
        raise SpecError(where, *_describe(err)) from None
    return EvalPhysics(where, ranges)


def load_eval_physics(value: str, scene) -> EvalPhysics:
    """`parse_eval_physics`, then every target resolved in `scene` (a
    `demofactory.simulation.scene.Scene`), so
    that a bad object or joint fails before training starts."""
    physics = parse_eval_physics(value)
    targets = dataclasses.replace(scene.physics.model_physics.targets, where=physics.source)
    targets.check(physics.ranges)
    return physics


@contextmanager
def rollout_physics(scene, physics: EvalPhysics | None) -> Iterator[Callable[[int], dict | None]]:
    """Yields `set_for(seed)`: sets the rollout's draw on `scene` (applied at its next reset)
    and returns it as JSON (None without eval physics). On exit the scene's physics before
    the block is back, whatever happened inside."""
    before = scene.physics.draw

    def set_for(seed: int) -> dict | None:
        if physics is None:
            return None
        draw = physics.draw(seed, scene.physics.gravity)
        scene.set_physics(draw)
        return draw.to_json()

    try:
        yield set_for
    finally:
        if physics is not None:
            scene.set_physics(before)


def describe(physics: EvalPhysics | None) -> str:
    """One line for the progress log."""
    if physics is None:
        return "nominal physics"
    return f"eval physics from {physics.source}: {json.dumps(physics.to_json()['physics'])}"
