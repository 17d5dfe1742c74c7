"""Surface distance between two geoms, around a MuJoCo 3.9 bug in `mj_geomDistance`.

MuJoCo's mj_geomDistance (native CCD) sometimes returns exactly 0.0 for geoms well apart
(google-deepmind/mujoco#3383): measured on Stack, the Panda hand's mesh or a finger pad against
a cube 2-20 cm away, in 80 of 5,440 hand-geom/cube pairs over one attempt's states. It does so
only when a distance under `distmax` exists: a pair further apart than `distmax` reads
`distmax`, as documented. So a 0.0 is checked by halving `distmax` (`surface_distance`). A 0.0
from geoms really touching stays 0 (every smaller `distmax` reads 0 too).

mj_geomDistance is still what computes every distance here: the bug needs no other geometry
code, only a second look at one value (TOLERANCE: the bracket a 0.0's distance is narrowed to).
"""

from __future__ import annotations

import mujoco

TOLERANCE = 1e-5  # metres: a suspect 0.0 is resolved to within this


def surface_distance(
    model: mujoco.MjModel, data: mujoco.MjData, a: int, b: int, distmax: float
) -> float:
    """Signed surface distance between geoms a and b (negative: penetrating), at most
    `distmax` (`distmax` itself: further apart than that), as mj_geomDistance documents it."""
    distance = mujoco.mj_geomDistance(model, data, a, b, distmax, None)
    if distance != 0.0:
        return distance
    lo, hi = 0.0, distmax  # the distance is in [lo, hi]
    while hi - lo > TOLERANCE:
        mid = 0.5 * (lo + hi)
        probe = mujoco.mj_geomDistance(model, data, a, b, mid, None)
        if probe >= mid:
            lo = mid  # no distance under mid: the pair is at least mid apart
        elif probe != 0.0:
            return probe  # a distance read, not the bug's 0.0
        else:
            hi = mid
    return 0.0 if lo == 0.0 else 0.5 * (lo + hi)
