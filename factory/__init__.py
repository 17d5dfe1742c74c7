"""The orchestrator: CLI, scene specs, simulation adapter, pipeline, reports."""

from demofactory._blas import use_one_blas_thread
from demofactory._gl import use_default_gl

# Before any module of the package can import mujoco: the one place MUJOCO_GL's default is set.
use_default_gl()
# Before numpy: one OpenBLAS thread (a control step's small matrices, demofactory/_blas.py).
use_one_blas_thread()
