"""Failed attempts to look at: a run keeps a few per shard, `factory preview --failures` draws them.

    run_shard: failed Attempt ──► save_failures ──► DIR/failures/shard-000042.npz
        (MuJoCo states [T, N] float64 and a JSON caption per failure; no pickle)
    factory preview DIR --failures ──► load_failures ──► the dataset's spec rebuilt as a Scene,
        fixtures as in the attempt ──► restore states, render ──► DIR/preview/failures.png

Physics-only runs (`cameras: []`) render nothing while they generate; the states are enough to
render a failure afterwards, with the spec's first camera or robosuite's agentview.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from demofactory.errors import UserError
from demofactory.generators.records import Attempt
from demofactory.shards import DATASET_INFO_FILENAME
from demofactory.specs.spec import CameraSpec, load_stored_spec
from PIL import Image, ImageDraw, ImageFont

FAILURES_DIRNAME = "failures"
KEEP_PER_SHARD = 2  # failed attempts kept per shard (the first ones, in attempt order)
FRAMES = 6  # frames drawn per failure, evenly spaced, the last one the attempt's end
TILE = 160  # pixels, when the dataset has no camera of its own


@dataclass(frozen=True)
class Failure:
    """One kept failure: states [T, N] float64 and what is known of it."""

    attempt_id: int
    shard: int
    reason: str
    failed_subtask: int | None
    provenance: dict
    states: np.ndarray


def save_failures(out_dir: Path, shard: int, attempts: Sequence[Attempt]) -> Path | None:
    """Write up to KEEP_PER_SHARD failed attempts of one shard (temporary name, then renamed)."""
    kept = [a for a in attempts if not a.success and len(a.states)][:KEEP_PER_SHARD]
    if not kept:
        return None
    directory = Path(out_dir) / FAILURES_DIRNAME
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"shard-{shard:06d}.npz"
    meta = [
        {
            "attempt_id": a.attempt_id,
            "shard": a.shard,
            "reason": a.reason,
            "failed_subtask": a.failed_subtask,
            "provenance": a.provenance,
        }
        for a in kept
    ]
    arrays = {f"states_{k}": a.states for k, a in enumerate(kept)}
    tmp = path.with_suffix(".tmp.npz")
    with open(tmp, "wb") as handle:
        np.savez_compressed(handle, meta=np.array(json.dumps(meta, default=str)), **arrays)
    os.replace(tmp, path)
    return path


def load_failures(dataset_dir: Path, limit: int) -> list[Failure]:
    """Up to `limit` kept failures, shard by shard; a damaged file is an error naming it."""
    found: list[Failure] = []
    for path in sorted((Path(dataset_dir) / FAILURES_DIRNAME).glob("shard-*.npz")):
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(str(data["meta"]))
                found.extend(
                    Failure(
                        m["attempt_id"],
                        m["shard"],
                        m["reason"],
                        m["failed_subtask"],
                        m["provenance"],
                        np.asarray(data[f"states_{k}"], dtype=np.float64),
                    )
                    for k, m in enumerate(meta)
                )
        except (OSError, ValueError, KeyError) as err:
            raise UserError(f"{path}: unreadable failure record ({err})") from None
        if len(found) >= limit:
            break
    return found[:limit]


def caption(failure: Failure, spec) -> str:
    """ "attempt 17 failed in subtask 1 (object bin, ends when ...): reason"."""
    where = ""
    if failure.failed_subtask is not None and failure.failed_subtask < len(spec.subtasks):
        sub = spec.subtasks[failure.failed_subtask]
        ends = sub.ends_when or "success"
        where = f" in subtask {failure.failed_subtask} ({sub.object}, ends when {ends})"
    disturbed = failure.provenance.get("disturbed_in_transit")
    extra = (
        f"; transit disturbed {', '.join(o for d in disturbed for o in d['objects'])}"
        if disturbed
        else ""
    )
    return f"attempt {failure.attempt_id} failed{where}: {failure.reason}{extra}"


def render_failures(dataset_dir: Path, info: dict, out_path: Path, count: int) -> Path:
    """A sheet, one row per kept failure, FRAMES frames each, captioned with where it failed."""
    # The render path (mujoco, a GL context) only when failures are drawn: the pipeline
    # imports this module for `save_failures`, `factory preview` for the contact sheet.
    from demofactory.simulation.physics import recorded_physics
    from demofactory.simulation.render import FrameRenderer
    from demofactory.simulation.scene import Scene

    failures = load_failures(dataset_dir, count)
    if not failures:
        raise UserError(
            f"{dataset_dir}: no failed attempt was kept ({FAILURES_DIRNAME}/ is empty or absent): "
            "every attempt succeeded, or the dataset was made before failures were kept"
        )
    spec = load_stored_spec(info, dataset_dir / DATASET_INFO_FILENAME)
    scene = Scene(spec)
    camera = (
        spec.cameras[0] if spec.cameras else CameraSpec(name="agentview", width=TILE, height=TILE)
    )
    renderer = FrameRenderer(scene, [camera], spec.render)
    rows = []
    try:
        for failure in failures:
            # its physics draw too: a cube drawn bigger is drawn bigger
            scene.set_physics(recorded_physics(failure.provenance))
            scene.reset(failure.provenance.get("fixtures"))
            steps = np.linspace(0, len(failure.states) - 1, FRAMES).astype(int)
            frames = []
            for t in steps:
                scene.set_state(failure.states[t])
                frames.append(renderer.render_current()[camera.name])
            rows.append((caption(failure, spec), frames, steps))
    finally:
        renderer.close()
    return _sheet(rows, camera.width, camera.height, out_path)


def _sheet(rows, width: int, height: int, out_path: Path) -> Path:
    font = ImageFont.load_default()
    text_h, gap = 14, 4
    sheet = Image.new(
        "RGB",
        (FRAMES * (width + gap) + gap, len(rows) * (height + 2 * text_h + gap) + gap),
        "white",
    )
    draw = ImageDraw.Draw(sheet)
    for r, (text, frames, steps) in enumerate(rows):
        top = gap + r * (height + 2 * text_h + gap)
        draw.text((gap, top), text[: FRAMES * (width + gap) // 6], fill="black", font=font)
        for c, (frame, t) in enumerate(zip(frames, steps, strict=True)):
            left = gap + c * (width + gap)
            sheet.paste(Image.fromarray(frame), (left, top + text_h))
            draw.text((left, top + text_h + height), f"t={t}", fill="black", font=font)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out_path)
    return out_path
