"""The orchestrator: CLI, scene specs, simulation adapter, pipeline, reports."""

import os

# Offscreen rendering needs its GL backend chosen before mujoco is first imported, by
# whichever module gets there first: Mesa's EGL by default (osmesa also works).
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
