"""GPU rendering in a Ray actor: which EGL device renders, from the GPUs Ray assigned.

    ray.get_gpu_ids() ──► egl_device_for ──► MUJOCO_EGL_DEVICE_ID (+ MUJOCO_GL=egl)
                                            set before the first mujoco.Renderer of the process

MuJoCo's EGL backend enumerates every GPU of the machine (CUDA_VISIBLE_DEVICES does not
apply to EGL) and, without MUJOCO_EGL_DEVICE_ID, renders on the first one: every actor of
an 8-GPU node would share GPU 0. Ray's GPU ids are already physical: they are entries of the
node's CUDA_VISIBLE_DEVICES when the raylet started with one, otherwise ordinals 0..n-1.
An ordinal is the EGL index provided CUDA and EGL count GPUs in the same order, which holds
with CUDA_DEVICE_ORDER=PCI_BUS_ID (cluster/cluster.yaml sets it). A UUID (`GPU-…`) is
looked up in the machine's GPU list (nvidia-smi order = PCI order = EGL order).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from demofactory.cluster.errors import ClusterError, GpuRenderError

__all__ = ["GpuRenderError", "apply_gpu_render_env", "egl_device_for", "gpu_render_env"]


def egl_device_for(
    gpu_ids: Sequence[str | int], physical_uuids: Sequence[str] | None = None
) -> int | None:
    """The EGL device index for the first GPU in `gpu_ids` (as `ray.get_gpu_ids()` returns them).

    None when no GPU was assigned. `physical_uuids` is the machine's GPU UUIDs in PCI order,
    needed only when the ids are UUIDs. Fractional GPUs give several actors the same id;
    they then share that device, as Ray intended.
    """
    if not gpu_ids:
        return None
    first = str(gpu_ids[0]).strip()
    if first.isdigit():
        return int(first)
    if first.startswith("MIG-"):
        raise GpuRenderError(
            f"Ray assigned MIG instance {first}: EGL cannot render on a MIG slice; "
            "give the render workers whole GPUs"
        )
    if physical_uuids is None:
        physical_uuids = physical_gpu_uuids()
    for index, uuid in enumerate(physical_uuids):
        if uuid.strip() == first:
            return index
    raise GpuRenderError(
        f"Ray assigned GPU {first}, which is not among this machine's GPUs {list(physical_uuids)}"
    )


def gpu_render_env(
    gpu_ids: Sequence[str | int], physical_uuids: Sequence[str] | None = None
) -> dict[str, str]:
    """Environment variables that make MuJoCo render on the assigned GPU ({} when none)."""
    device = egl_device_for(gpu_ids, physical_uuids)
    if device is None:
        return {}
    return {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl", "MUJOCO_EGL_DEVICE_ID": str(device)}


def physical_gpu_uuids() -> list[str]:
    """This machine's GPU UUIDs in nvidia-smi (PCI bus) order."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise GpuRenderError(f"cannot list this machine's GPUs with nvidia-smi ({err})") from None
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def apply_gpu_render_env(gpu_ids: Sequence[str | int]) -> dict[str, str]:
    """Set the rendering environment of this process for `gpu_ids`; returns what was set."""
    env = gpu_render_env(gpu_ids)
    if env and "mujoco" in sys.modules and os.environ.get("MUJOCO_GL") != "egl":
        # mujoco picked its GL backend at import; EGL_DEVICE_ID alone is read later, at the
        # first renderer.
        raise GpuRenderError(
            f"mujoco was imported with MUJOCO_GL={os.environ.get('MUJOCO_GL')!r} "
            "before the GPU was assigned; it cannot switch to EGL now"
        )
    os.environ.update(env)
    return env


GPU_WAIT_ENV = "DEMOFACTORY_GPU_WAIT_S"
GPU_WAIT_S = (
    600.0  # how long workers asking for GPUs may wait for a GPU node to join a remote cluster
)


def gpu_wait_s() -> float:
    """Seconds to wait for a GPU node to join: $DEMOFACTORY_GPU_WAIT_S, else GPU_WAIT_S."""
    try:
        return max(0.0, float(os.environ.get(GPU_WAIT_ENV, GPU_WAIT_S)))
    except ValueError:
        raise ClusterError(
            f"${GPU_WAIT_ENV}: expected a number of seconds, got {os.environ[GPU_WAIT_ENV]!r}"
        ) from None
