"""`factory calibrate`, the command: check every input, fit, then write the fragment and report.

spec + recordings + --params ──► checked (nothing written on a bad input)
  ──► demofactory.robustness.calibrate.calibrate (the fit) ──►
  demofactory.robustness.calibrate_report (fragment, HTML)
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from demofactory.errors import SpecError
from demofactory.robustness.calibrate import (
    Calibration,
    ModelEditor,
    calibrate,
    load_recordings,
    parse_params,
)
from demofactory.robustness.calibrate_report import fragment_text, report_html, write_atomically
from demofactory.simulation.scene import Scene
from demofactory.specs.spec import load_spec


def run_calibration(
    spec_path: Path,
    recording_paths: list[Path],
    param_tokens: list[str],
    out: Path,
    report: Path,
    command: str,
    max_steps: int | None = None,
    max_iters: int = 30,
    log: TextIO | None = None,
    overrides: dict | None = None,
) -> Calibration:
    """Check everything (params, spec, recordings, targets), fit, then write `out` and `report`.

    Every check runs before the fit and nothing is written before it ends: a bad input leaves
    no file behind.
    """
    choices = parse_params(param_tokens)
    spec = load_spec(spec_path, overrides)  # the command's --set
    try:
        scene = Scene(spec)
    except SpecError:
        raise
    except Exception as err:  # robosuite raises bare exceptions for unusable combinations
        raise SpecError(
            spec.path, "task", f"robosuite cannot build {spec.task.env}: {err}"
        ) from None
    recordings = load_recordings(recording_paths, scene, max_steps)
    ModelEditor(scene, choices)  # the targets exist: a UserError before the fit otherwise
    result = calibrate(scene, recordings, choices, max_iters=max_iters, log=log)
    write_atomically(out, fragment_text(result, spec.path, out, command))
    write_atomically(report, report_html(result, scene, f"factory calibrate: {spec.name}"))
    return result
