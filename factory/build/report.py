"""What a dataset holds, for `factory inspect` and the end of `factory run`."""

from __future__ import annotations

from pathlib import Path

from demofactory.build.output_dir import GENERATION_FILENAME, load_generation
from demofactory.errors import UserError
from demofactory.robustness.divergence_report import format_divergence, summarize_divergence
from demofactory.shards import DatasetError, load_dataset_info, load_episodes, load_manifest
from demofactory.shards.shard_layout import dataset_shard_layout


def summarize(dataset_dir: Path) -> dict:
    """Attempts, successes, episodes, steps, shards, bytes, cameras and wall time of a dataset.

    A malformed file raises `DatasetError` naming it (the CLI prints it as one line).
    """
    info = load_dataset_info(dataset_dir)
    manifest = load_manifest(dataset_dir)
    generation = load_generation(dataset_dir)
    if info is None:
        raise UserError(f"{dataset_dir}: not a demofactory dataset (no dataset_info.json)")
    spec = info.get("spec")
    if (
        not isinstance(spec, dict)
        or not isinstance(spec.get("generation"), dict)
        or "attempts" not in spec["generation"]
        or not isinstance(spec.get("subtasks"), list)
        or "name" not in info
    ):
        raise DatasetError(
            f"{dataset_dir / 'dataset_info.json'}: no spec recorded (expected its 'name' and "
            "'spec' with 'generation' and 'subtasks', as `factory run` writes them)"
        )
    listed = {s.name for s in manifest.shards}
    shards = [v for k, v in generation.get("shards", {}).items() if k in listed]
    attempts = sum(s["attempts"] for s in shards)
    successes = sum(s["successes"] for s in shards)
    failures: dict[str, int] = {}
    for s in shards:
        for kind, n in s["failures"].items():
            failures[kind] = failures.get(kind, 0) + n
    planned = info["spec"]["generation"]["attempts"]
    target = info["spec"]["generation"].get("target_successes")
    seeds = info.get("source") == "seed_demos"  # written by `factory seeds`: nothing was generated
    if manifest.shards and not seeds and not (dataset_dir / GENERATION_FILENAME).exists():
        attempts = successes = None  # unknown, not zero: the record of them is gone
    subtasks = _subtask_table(info["spec"]["subtasks"], shards)
    return {
        "path": str(dataset_dir),
        "name": info["name"],
        "env": info["env"],
        "attempts": attempts,
        "attempts_planned": planned,
        "complete": attempts is not None
        and (attempts >= planned or (target is not None and successes >= target))
        or seeds,
        "source": info.get("source", "generated"),
        "target_successes": target,
        "successes": successes,
        "success_rate": round(successes / attempts, 4)
        if attempts
        else None
        if attempts is None
        else 0.0,
        "failures": dict(sorted(failures.items())),
        "retries": sum(row["retries"] for row in subtasks),
        "transit": info["spec"]["generation"].get("transit", "direct"),
        "subtasks": subtasks,
        "episodes": manifest.total_episodes,
        "steps": manifest.total_samples,
        "shards": len(manifest.shards),
        "bytes": manifest.total_bytes,
        "shard_layout": dataset_shard_layout(info),
        "cameras": [f"{c['name']} {c['width']}x{c['height']}" for c in info["cameras"]],
        "wall_s": generation.get("wall_s", 0.0),
        # `factory divergence` scores (or generation.robustness's), when episodes carry them
        "divergence": summarize_divergence(load_episodes(dataset_dir)),
        **_robot_table(shards),
        **_detail_table(shards),
    }


def _detail_table(shards: list[dict]) -> dict:
    """{"render_detail": ...}: render.detail's meshes, as the dataset's first worker decimated
    them, and the meshes kept at full detail (most any worker kept, per reason); {} for
    `full` or a dataset without cameras."""
    found = [s["render_detail"] for s in shards if s.get("render_detail", {}).get("meshes")]
    if not found or found[0]["detail"] == "full":
        return {}
    kept: dict[str, int] = {}
    for entry in found:
        for reason, n in entry["kept_full"].items():
            kept[reason] = max(kept.get(reason, 0), n)
    return {"render_detail": {**found[0], "kept_full": dict(sorted(kept.items()))}}


def _robot_table(shards: list[dict]) -> dict:
    """A mixed-robot dataset's {"robots": {robot: attempts, successes, success_rate}}; {}
    for one robot (its shards record no per-robot counts)."""
    table: dict[str, dict] = {}
    for shard in shards:
        for robot, counts in shard.get("robots", {}).items():
            row = table.setdefault(robot, {"attempts": 0, "successes": 0})
            row["attempts"] += counts["attempts"]
            row["successes"] += counts["successes"]
    for row in table.values():
        row["success_rate"] = round(row["successes"] / row["attempts"], 4)
    return {"robots": dict(sorted(table.items()))} if table else {}


def _subtask_table(specs: list[dict], shards: list[dict]) -> list[dict]:
    """Per subtask: attempts that reached it, attempts that failed in it, retries spent, and
    planned transits to it that fell back to the direct bridge (transit: plan)."""
    rows = []
    for i, sub in enumerate(specs):
        counts = [s.get("subtasks", {}).get(str(i), {}) for s in shards]
        rows.append(
            {
                "index": i,
                "name": sub.get("name"),
                "arm": sub.get("arm"),
                "object": sub["object"],
                "ends_when": sub["ends_when"] or "success",
                **{
                    key: sum(c.get(key, 0) for c in counts)
                    for key in ("reached", "failed", "retries", "fallbacks")
                },
            }
        )
    return rows


def _subtask_label(row: dict) -> str:
    """A subtask's arm and name as the spec gives them ('right right_grasp'; '' for neither)."""
    return " ".join(str(part) for part in (row.get("arm"), row.get("name")) if part)


def format_summary(summary: dict) -> str:
    """A few aligned lines for people."""
    if summary["attempts"] is None:
        unknown = (
            f"unknown: {GENERATION_FILENAME} is missing "
            "(run the same `factory run` again to rebuild it)"
        )
        counts = [("attempts", unknown), ("successes", "unknown")]
    else:
        counts = [
            (
                "attempts",
                f"{summary['attempts']} of {summary['attempts_planned']} planned"
                + _completion(summary),
            ),
            ("successes", f"{summary['successes']}  ({summary['success_rate']:.1%})"),
        ]
    rows = [
        ("dataset", f"{summary['path']}  ({summary['name']}, {summary['env']})"),
        *counts,
        ("failures", ", ".join(f"{k}: {v}" for k, v in summary["failures"].items()) or "none"),
        ("retries", str(summary["retries"])),
        ("episodes", str(summary["episodes"])),
        ("steps", str(summary["steps"])),
        (
            "shards",
            f"{summary['shards']}  ({_human_bytes(summary['bytes'])}, "
            f"one sample a{'n episode' if summary['shard_layout'] == 'episode' else ' step'})",
        ),
        ("cameras", ", ".join(summary["cameras"]) or "none (low-dimensional)"),
        ("wall time", f"{summary['wall_s']:.1f} s"),
    ]
    named = any(row.get("name") or row.get("arm") for row in summary["subtasks"])
    width = max((len(_subtask_label(row)) for row in summary["subtasks"]), default=0)
    for row in summary["subtasks"]:
        rows.append(
            (
                f"subtask {row['index']}",
                (f"{_subtask_label(row):<{width}}  " if named else "")
                + f"{row['ends_when']:<22} reached {row['reached']:>5}  "
                f"failed {row['failed']:>5}  retries {row['retries']:>5}"
                + (
                    f"  planning fell back {row['fallbacks']:>5}"
                    if summary.get("transit") == "plan"
                    else ""
                ),
            )
        )
    for robot, row in summary.get("robots", {}).items():
        rows.append(
            (
                f"robot {robot}",
                f"{row['successes']} of {row['attempts']} attempts ({row['success_rate']:.1%})",
            )
        )
    detail = summary.get("render_detail")
    if detail:
        kept = detail["kept_full"]
        rows.append(
            (
                "render detail",
                f"{detail['detail']}: {detail['decimated']} of {detail['meshes']} meshes "
                f"decimated, {detail['faces_drawn']} of {detail['faces_full']} faces drawn; "
                f"kept full: {sum(kept.values())}"
                + (" (" + ", ".join(f"{k}: {v}" for k, v in kept.items()) + ")" if kept else ""),
            )
        )
    rows.extend(format_divergence(summary.get("divergence", {})))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _completion(summary: dict) -> str:
    if summary.get("source") == "seed_demos":
        return "  (human seed demos, written by `factory seeds`: nothing generated)"
    target = summary.get("target_successes")
    if target is not None and summary["successes"] >= target:
        return f"  (stopped at the target of {target} successes)"
    return "" if summary["complete"] else "  (incomplete: run again to resume)"
