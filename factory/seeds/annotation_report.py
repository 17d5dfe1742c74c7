"""What `factory annotate` shows: per demo, each segment's reference object and why it ended,
and a PNG timeline of the predicates over the demo (`--plot`).

    AnnotatedDemo ──► segment rows (subtask, object, start, end, reason)  ──► text or JSON
                  ──► timeline: one lane per predicate + gripper + segments ──► PNG
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from demofactory.generators.records import AnnotatedDemo
from demofactory.seeds.annotate import subtask_predicates
from demofactory.specs.spec import SceneSpec
from PIL import Image, ImageDraw, ImageFont

LANE, LABEL_WIDTH, PLOT_WIDTH, MARGIN = 22, 330, 900, 10
# One colour per segment, cycling; predicates are drawn in the colour of their subtask.
PALETTE = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
]


def segment_rows(spec: SceneSpec, demo: AnnotatedDemo) -> list[dict]:
    """One row per segment, in the demo's order."""
    rows = []
    for position, index in enumerate(demo.order):
        start, end = demo.segment(position)
        sub = spec.subtasks[index]
        reason = demo.end_reasons[index] if demo.end_reasons else (sub.ends_when or "success")
        skill, _ = demo.skill(position)
        paused = int(demo.paused[skill:end].sum()) if demo.paused is not None else 0
        rows.append(
            {
                "subtask": index,
                "object": sub.object,
                "ends_when": sub.ends_when or "success",
                "start": start,
                "end": end,
                "reason": reason,
                "skill_start": skill,
                "skill_reason": demo.skill_reasons[index] if demo.skill_reasons else "",
                "paused_steps": paused,
            }
        )
    return rows


def format_rows(label: str, length: int, rows: list[dict]) -> str:
    lines = [f"{label}  ({length} steps)"]
    for row in rows:
        lines.append(
            f"  subtask {row['subtask']}  {row['object']:<12} "
            f"steps {row['start']:>5} .. {row['end']:<5}"
            f"  ends: {row['reason']}"
        )
        lines.append(
            f"      skill window {row['skill_start']:>5} .. {row['end']:<5}"
            f" ({row['skill_reason']}; {row['paused_steps']} paused steps dropped)"
        )
    return "\n".join(lines)


def plot_timeline(spec: SceneSpec, demo: AnnotatedDemo, path: Path) -> Path:
    """A PNG: per subtask predicate, where it holds; the gripper command; the segments as cut."""
    labels = [str(p) for p in subtask_predicates(spec.subtasks)]
    for i, used in enumerate(demo.ended_by):  # a grasp this demo never made: what ended it
        labels[i] = f"{labels[i]} -> {used}" if used else labels[i]
    holds = (
        demo.holds if demo.holds is not None else np.zeros((demo.demo.length, len(labels)), bool)
    )
    lanes = len(labels) + 2
    image = Image.new(
        "RGB",
        (LABEL_WIDTH + PLOT_WIDTH + 2 * MARGIN + 30, (lanes + 2) * LANE + 2 * MARGIN),
        "white",
    )
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    length = demo.demo.length

    def x(t: int) -> int:
        return LABEL_WIDTH + MARGIN + int(round(t / max(length, 1) * PLOT_WIDTH))

    def lane_top(lane: int) -> int:
        return MARGIN + (lane + 1) * LANE

    draw.text((MARGIN, MARGIN), f"{demo.demo.label}: {length} steps", fill="black", font=font)
    for i, label in enumerate(labels):
        colour = PALETTE[i % len(PALETTE)]
        _lane(draw, font, lane_top(i), f"{i}: {label}", holds[:, i], x, colour)
    _lane(draw, font, lane_top(len(labels)), "gripper closed", demo.gripper > 0, x, (60, 60, 60))
    top = lane_top(len(labels) + 1)
    draw.text((MARGIN, top + 5), "segments (pale: approach; full: skill)", fill="black", font=font)
    for position, index in enumerate(demo.order):
        start, end = demo.segment(position)
        colour = PALETTE[index % len(PALETTE)]
        skill, _ = demo.skill(position)
        # The approach (planned by transit: plan) pale, the skill window in full colour.
        pale = tuple(int(c + (255 - c) * 0.65) for c in colour)
        draw.rectangle([x(start), top + 2, max(x(end) - 1, x(start)), top + LANE - 2], fill=pale)
        draw.rectangle([x(skill), top + 2, max(x(end) - 1, x(skill)), top + LANE - 2], fill=colour)
        draw.text((x(start) + 2, top + 5), spec.subtasks[index].object, fill="black", font=font)
    axis = lane_top(lanes)
    for t in np.linspace(0, length, 6).astype(int):
        draw.line([x(t), axis, x(t), axis + 4], fill="black")
        draw.text((x(t) - 8, axis + 6), str(t), fill="black", font=font)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return path


def _lane(
    draw: ImageDraw.ImageDraw, font, top: int, label: str, held: np.ndarray, x, colour
) -> None:
    draw.text((MARGIN, top + 5), label[:52], fill="black", font=font)
    draw.rectangle([x(0), top + 2, x(len(held)), top + LANE - 2], outline=(200, 200, 200))
    padded = np.concatenate([[False], held, [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    for start, stop in zip(edges[::2], edges[1::2], strict=True):
        draw.rectangle(
            [x(int(start)), top + 4, max(x(int(stop)) - 1, x(int(start))), top + LANE - 4],
            fill=colour,
        )
