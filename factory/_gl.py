"""MUJOCO_GL's default, set in one place: before mujoco (robosuite) is first imported.

Offscreen rendering needs its GL backend chosen before mujoco is imported, and the backend
cannot change afterwards. Every entry point imports the `factory` package first (the CLI,
the tests' conftest, the benchmarks, a Ray worker unpickling its worker factory), and its
`__init__` calls `use_default_gl()`: the Makefile and the tests set nothing themselves.
A user's own MUJOCO_GL (osmesa, or egl with MUJOCO_EGL_DEVICE_ID) is kept.
"""

from __future__ import annotations

import os

# Mesa's EGL: software rendering without a display, and GPU rendering where there is one.
DEFAULT_MUJOCO_GL = "egl"


def use_default_gl() -> str:
    """Set MUJOCO_GL (and PyOpenGL's matching platform) unless the user did; returns it."""
    os.environ.setdefault("MUJOCO_GL", DEFAULT_MUJOCO_GL)
    os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
    return os.environ["MUJOCO_GL"]
