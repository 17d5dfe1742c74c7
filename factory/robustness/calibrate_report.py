"""What `factory calibrate` writes: the `physics:` spec fragment and the HTML report.

The fragment is a spec that `extends:` the calibrated one and adds the fitted values as fixed
numbers (95 % confidence intervals as comments), so it runs as it is (`factory run
lift.calibrated.yaml`) or serves as the parent of another spec (`extends: lift.calibrated.yaml`).

The report is assembled from mujoco.sysid's report sections (parameter table, confidence
intervals, covariance, optimisation trace, signals). sysid's `default_report` itself needs
`ModelSequences` (MuJoCo ctrl recordings, see factory/robustness/calibrate.py) and renders videos;
the
sections take plain ParameterDicts and TimeSeries, which we have.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from demofactory.robustness.calibrate import Calibration, observed_columns

# The physics: section's layout: kinds with a target map target -> value, the others are numbers.
TARGETED = ("friction", "mass", "joint_damping", "joint_armature")


def fragment_text(cal: Calibration, spec_path: Path, out: Path, command: str) -> str:
    """The YAML of the fragment: `extends:` the spec (relative to `out`), then `physics:`."""
    parent = os.path.relpath(Path(spec_path).resolve(), Path(out).resolve().parent)
    lines = [
        f"# {command}",
        f"# Fitted by mujoco.sysid from {len(cal.recordings)} recordings; cost (0.5 |r|^2) "
        f"{cal.cost_initial:.4g} at the start (nominal values), {cal.cost_fitted:.4g} fitted.",
        "# Scales of the model's nominal values; the comments give 95 % confidence intervals.",
        f"extends: {parent}",
        "physics:",
    ]
    values = cal.values()
    for kind in dict.fromkeys(c.kind for c in cal.choices):
        if kind in TARGETED:
            lines.append(f"  {kind}:")
        for c in (c for c in cal.choices if c.kind == kind):
            value = values[c.name]
            if kind == "delay":
                tried = ", ".join(f"{k}: {v:.3g}" for k, v in sorted(cal.delay_costs.items()))
                key, note = f"  delay: {int(round(value))}", f"whole steps; cost per delay {tried}"
            else:
                key = (
                    f"    {c.target}: {value:.4g}" if kind in TARGETED else f"  {kind}: {value:.4g}"
                )
                note = _interval(value, cal.half_widths[c.name])
            lines.append(f"{key:<28}# {note}")
    return "\n".join(lines) + "\n"


def _interval(value: float, half: float) -> str:
    if not np.isfinite(half):
        return "95 % CI unbounded: the recordings do not constrain it"
    return f"95 % CI [{value - half:.4g}, {value + half:.4g}]"


def report_html(cal: Calibration, scene, title: str) -> str:
    """The HTML report: sysid's sections over our parameters and replays."""
    from mujoco.sysid.report.builder import ReportBuilder
    from mujoco.sysid.report.sections.covariance import Covariance
    from mujoco.sysid.report.sections.group import GroupSection
    from mujoco.sysid.report.sections.insights import AutomatedInsights
    from mujoco.sysid.report.sections.optimization_trace import OptimizationTrace
    from mujoco.sysid.report.sections.parameter_distribution import ParameterDistribution
    from mujoco.sysid.report.sections.parameters import ParametersTable
    from mujoco.sysid.report.sections.signals import SignalReport

    builder = ReportBuilder(title)
    builder.add_section(AutomatedInsights("Automated Insights", cal.fitted))
    builder.add_section(ParametersTable("Parameters", cal.fitted, cal.initial, anchor="parameters"))
    builder.add_section(
        ParameterDistribution(
            title="Parameter Distribution (95 % confidence)",
            opt_params=cal.fitted,
            initial_params=cal.initial,
            confidence_intervals=np.array(
                [cal.half_widths[c.name] for c in cal.choices if c.kind != "delay"]
            ),
            anchor="param_dist",
        )
    )
    builder.add_section(
        Covariance(
            title="Covariance and Correlation",
            anchor="cov",
            covariance=cal.covariance,
            parameter_dict=cal.fitted,
        )
    )
    signals = [
        SignalReport(
            f"{rec.source.name if rec.source else 'recording'}: {rec.name}",
            scene.model,
            ts_dict=_series(scene, rec.states, cal.replays, i),
            collapsible=True,
        )
        for i, rec in enumerate(cal.recordings)
    ]
    builder.add_section(GroupSection("Recorded vs simulated qpos", signals, anchor="signals"))
    extras = cal.result.get("extras") or {}
    if extras.get("objective"):
        builder.add_section(
            OptimizationTrace(
                title="Optimization Trace",
                anchor="opt",
                objective=extras["objective"],
                candidate=extras.get("candidate"),
                bounds=cal.fitted.get_bounds(),
                param_names=cal.fitted.get_non_frozen_parameter_names(),
            )
        )
    return builder.build()


def _series(scene, recorded: np.ndarray, replays: dict[str, list[np.ndarray]], i: int) -> dict:
    """sysid TimeSeries (recorded, initial, fitted) of the compared state columns, one scalar
    signal each (sysid's SignalReport lays out one subplot per signal name)."""
    from mujoco.sysid import SignalType, TimeSeries

    joints, pos, _ = observed_columns(scene)  # orientations: in the residual, not plotted
    columns = np.concatenate([joints, pos])
    names = [_qpos_name(scene.model, int(c) - 1) for c in columns]
    mapping = {name: (SignalType.MjStateQPos, np.array([k])) for k, name in enumerate(names)}
    times = recorded[:, 0] - recorded[0, 0]
    if not np.all(np.diff(times) > 0):  # a recording without sim time: control steps instead
        times = np.arange(len(recorded), dtype=np.float64)
    series = {"recorded": recorded}
    series.update({label: states[i] for label, states in replays.items()})
    return {
        label: TimeSeries(times, states[:, columns], mapping) for label, states in series.items()
    }


def _qpos_name(model, adr: int) -> str:
    """A qpos entry's name: its joint's, with x/y/z for a free joint's position."""
    joint = int(np.flatnonzero(model.jnt_qposadr <= adr)[-1])
    name = model.joint(joint).name or model.body(int(model.jnt_bodyid[joint])).name
    offset = adr - int(model.jnt_qposadr[joint])
    return f"{name} {'xyz'[offset]}" if model.jnt_type[joint] == 0 and offset < 3 else name


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file beside it (no half-written file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
