"""The orchestrator: CLI, scene specs, simulation adapter, pipeline, reports."""

from demofactory._gl import use_default_gl

# Before any module of the package can import mujoco: the one place MUJOCO_GL's default is set.
use_default_gl()
