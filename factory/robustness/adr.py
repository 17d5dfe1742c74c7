"""Automatic domain randomization (`generation.adr`): how wide the physics ranges can go.

    spec physics: ranges R, adr: start f0, step s, threshold t, probe batch n, rounds k
        ──► round r: ranges at fraction f (each range f of its way from nominal to R)
              ──► n probe attempts (seeds from (spec seed, ADR_STREAM, r, i)), each under
                  its own draw ──► success rate
              ──► rate >= t: f = min(1, f + s)  (widen);  else f = max(0, f - s)  (narrow)
        ──► the fraction of the last round that passed (0: nominal physics)
        ──► generation.json "adr": {history, fraction, physics}; every shard's attempts draw
            from those ranges (ShardWorker.load_adr), on resume too

Run once per dataset by the driver, before any shard, in its own process: the result depends
only on the spec, so a shard's bytes still depend only on the spec and its index. One fraction
for all ranges (not one per parameter as in OpenAI's ADR): a probe batch's success rate cannot
say which parameter made it fail, and one boundary needs ~k batches, not ~k per parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from demofactory.build.output_dir import GENERATION_FILENAME, load_generation
from demofactory.generators.mimicgen import AttemptPlan, generate_attempt
from demofactory.shards.format import dumps_json, write_text_atomic
from demofactory.simulation.physics import draw_physics, physics_rng
from demofactory.specs.sections import AdrSpec, PhysicsSpec

ADR_STREAM = 0x616472  # "adr": probe seeds apart from the dataset's attempts


def scaled_physics(spec: PhysicsSpec, fraction: float) -> PhysicsSpec:
    """`spec`'s ranges at `fraction` of their way from nominal (0: nominal, 1: as written)."""

    def scale(rng: tuple[float, float]) -> tuple[float, float]:
        return (1.0 + fraction * (rng[0] - 1.0), 1.0 + fraction * (rng[1] - 1.0))

    fields = {
        name: {target: scale(rng) for target, rng in getattr(spec, name).items()}
        for name in ("friction", "mass", "size", "joint_damping", "joint_armature")
    }
    for name in ("kp", "damping_ratio"):
        value = getattr(spec, name)
        fields[name] = None if value is None else scale(value)
    if spec.delay is not None:  # whole steps: rounded (0.5 up), from no delay to the range
        fields["delay"] = tuple(int(np.floor(fraction * d + 0.5)) for d in spec.delay)
    fields["gravity_tilt"] = fraction * spec.gravity_tilt
    return PhysicsSpec(**fields)


def probe_seed(spec_seed: int, round_index: int, probe: int) -> int:
    state = np.random.SeedSequence([spec_seed, ADR_STREAM, round_index, probe])
    words = state.generate_state(2, dtype=np.uint32)
    return int((int(words[0]) << 31) ^ int(words[1]))


def run_adr(
    adr: AdrSpec,
    physics: PhysicsSpec,
    spec_seed: int,
    attempt: Callable[[int, PhysicsSpec], bool],
    log: Callable[[str], None] = lambda line: None,
) -> dict:
    """The widening schedule. `attempt(seed, ranges)`: one generation attempt seeded `seed`
    under a draw from `ranges`; True if it succeeded. Returns what generation.json keeps."""
    fraction, passed, history = adr.start, None, []
    for round_index in range(adr.rounds):
        ranges = scaled_physics(physics, fraction)
        successes = sum(
            attempt(probe_seed(spec_seed, round_index, i), ranges)
            for i in range(adr.probe_attempts)
        )
        rate = successes / adr.probe_attempts
        ok = rate >= adr.threshold
        history.append(
            {"round": round_index, "fraction": fraction, "success_rate": rate, "widen": ok}
        )
        log(f"adr round {round_index}: ranges at {fraction:.2f}, success {rate:.0%}")
        if ok:
            passed = fraction
            if fraction >= 1.0:
                break  # the ranges as written pass: nothing wider to try
            fraction = min(1.0, round(fraction + adr.step, 9))
        else:
            fraction = max(0.0, round(fraction - adr.step, 9))
    final = 0.0 if passed is None else passed
    return {
        "history": history,
        "fraction": final,
        "threshold": adr.threshold,
        "physics": scaled_physics(physics, final).model_dump(mode="json"),
    }


def scene_attempt(scene, demos: Sequence, params) -> Callable[[int, PhysicsSpec], bool]:
    """`run_adr`'s attempt in a `demofactory.simulation.scene.Scene`: draw, apply, generate."""

    def attempt(seed: int, ranges: PhysicsSpec) -> bool:
        scene.set_physics(draw_physics(ranges, physics_rng(seed), scene.physics.gravity))
        try:
            return generate_attempt(scene, demos, AttemptPlan(-1, -1, seed), params).success
        finally:
            scene.set_physics(None)

    return attempt


def ensure_adr(resolved, out_dir: Path, log: Callable[[str], None] = lambda line: None) -> None:
    """Run ADR for `resolved.spec` unless generation.json holds its result already (a resumed
    run); written into generation.json before any shard runs."""
    spec = resolved.spec
    adr = spec.generation.adr
    if adr is None or not adr.enabled or spec.physics is None:
        return
    data = load_generation(out_dir)
    if "adr" in data:
        return
    attempt = scene_attempt(resolved.scene, resolved.demos, resolved.params)
    data["adr"] = run_adr(adr, spec.physics, spec.seed, attempt, log)
    write_text_atomic(out_dir / GENERATION_FILENAME, dumps_json(data, indent=2))


def adr_physics(out_dir: Path) -> PhysicsSpec | None:
    """The ranges ADR settled on for the dataset in `out_dir` (None when it ran no ADR)."""
    found = load_generation(out_dir).get("adr")
    return None if found is None else PhysicsSpec.model_validate(found["physics"])


def plot_adr(result: dict, path: Path, width: int = 480, height: int = 240) -> Path:
    """A PNG of the schedule: per round, the fraction (line) and the success rate (bars)."""
    from PIL import Image, ImageDraw

    history = result["history"]
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    left, right, top, bottom = 40, width - 10, 20, height - 30
    draw.rectangle([left, top, right, bottom], outline="black")
    count = max(len(history), 1)
    slot = (right - left) / count

    def y(value: float) -> float:
        return bottom - value * (bottom - top)

    threshold = y(result.get("threshold", 0.0))
    draw.line([left, threshold, right, threshold], fill=(200, 0, 0))
    points = []
    for i, entry in enumerate(history):
        x0 = left + i * slot
        colour = (150, 200, 150) if entry["widen"] else (230, 170, 170)
        draw.rectangle([x0 + 2, y(entry["success_rate"]), x0 + slot - 2, bottom], fill=colour)
        points.append((x0 + slot / 2, y(entry["fraction"])))
    if len(points) > 1:
        draw.line(points, fill=(0, 0, 200), width=2)
    for x, yy in points:
        draw.ellipse([x - 3, yy - 3, x + 3, yy + 3], fill=(0, 0, 200))
    draw.text((left, 4), "ADR: range fraction (blue), probe success (bars), threshold", "black")
    draw.text(
        (left, bottom + 8), f"rounds: {len(history)}, final {result['fraction']:.2f}", "black"
    )
    draw.text((4, top - 4), "1", "black")
    draw.text((4, bottom - 8), "0", "black")
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return path
