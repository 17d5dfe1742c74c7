"""Procedural textures: a registry of patterns drawn with numpy only (no model weights).

    make_pattern("checker", rng, 256, colors) -> uint8 [256, 256, 3]

Every pattern takes the same arguments: an explicit `np.random.Generator` for
its own parameters (scale, angle, noise), the side in pixels, and two RGB
colours in [0, 1] that it mixes. The same generator state, side and colours
give the same bytes. `fit_texture` resizes an image to a MuJoCo texture slot.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Colors = np.ndarray  # [2, 3] float, RGB in [0, 1]: the pattern's two colours
# -> [S, S] float mix in [0, 1]
PatternFn = Callable[[np.random.Generator, int, Colors], np.ndarray]


def _solid(rng: np.random.Generator, size: int, colors: Colors) -> np.ndarray:
    return np.zeros((size, size))


def _checker(rng: np.random.Generator, size: int, colors: Colors) -> np.ndarray:
    cells = int(rng.integers(2, 13))  # squares per side
    index = (np.arange(size) * cells) // size
    return ((index[:, None] + index[None, :]) % 2).astype(float)


def _stripes(rng: np.random.Generator, size: int, colors: Colors) -> np.ndarray:
    angle = rng.uniform(0.0, np.pi)
    period = rng.uniform(0.05, 0.35)  # in units of the image side
    duty = rng.uniform(0.3, 0.7)  # share of each period in the first colour
    u = _along(size, angle) / period
    return (u - np.floor(u) >= duty).astype(float)


def _noise(rng: np.random.Generator, size: int, colors: Colors) -> np.ndarray:
    base = int(rng.integers(2, 9))
    return _fractal_noise(rng, size, base, octaves=4)


def _gradient(rng: np.random.Generator, size: int, colors: Colors) -> np.ndarray:
    u = _along(size, rng.uniform(0.0, 2 * np.pi))
    return (u - u.min()) / max(float(np.ptp(u)), 1e-9)


def _wood(rng: np.random.Generator, size: int, colors: Colors) -> np.ndarray:
    # Growth rings: distance from a centre off the image, warped by smooth noise, through a
    # sawtooth.
    centre = rng.uniform(-1.5, 2.5, size=2)
    rings = rng.uniform(8.0, 30.0)  # rings across the image
    warp = rng.uniform(0.02, 0.1) * _fractal_noise(rng, size, 3, octaves=3)
    y, x = np.mgrid[0:size, 0:size] / size
    r = np.hypot(x - centre[0], (y - centre[1]) * 0.25) + warp
    ring = (r * rings) % 1.0
    return ring ** rng.uniform(1.5, 4.0)


PATTERNS: dict[str, PatternFn] = {
    "solid": _solid,
    "checker": _checker,
    "stripes": _stripes,
    "noise": _noise,
    "gradient": _gradient,
    "wood": _wood,
}


def make_pattern(name: str, rng: np.random.Generator, size: int, colors: Colors) -> np.ndarray:
    """A [size, size, 3] uint8 image of pattern `name` mixing the two `colors` ([2, 3] RGB in
    [0, 1])."""
    try:
        fn = PATTERNS[name]
    except KeyError:
        raise ValueError(
            f"unknown pattern {name!r} (expected one of: {', '.join(PATTERNS)})"
        ) from None
    colors = np.asarray(colors, dtype=float).reshape(2, 3)
    mix = np.clip(fn(rng, size, colors), 0.0, 1.0)[..., None]
    image = (1.0 - mix) * colors[0] + mix * colors[1]
    return np.round(np.clip(image, 0.0, 1.0) * 255.0).astype(np.uint8)


def fit_texture(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """`image` [h, w, 3] resized to [height, width, 3] by nearest neighbour (cheap at any
    slot size)."""
    rows = (np.arange(height) * image.shape[0]) // height
    cols = (np.arange(width) * image.shape[1]) // width
    return image[rows][:, cols]


def _along(size: int, angle: float) -> np.ndarray:
    """[size, size] coordinate along direction `angle` (radians), in units of the image side."""
    y, x = np.mgrid[0:size, 0:size] / size
    return x * np.cos(angle) + y * np.sin(angle)


def _fractal_noise(rng: np.random.Generator, size: int, base: int, octaves: int) -> np.ndarray:
    """[size, size] smooth value noise in [0, 1]: `octaves` grids of base * 2**k cells, halving
    weights."""
    total, weight_sum = np.zeros((size, size)), 0.0
    for k in range(octaves):
        weight = 0.5**k
        total += weight * _value_noise(rng, size, base * 2**k)
        weight_sum += weight
    total /= weight_sum
    return (total - total.min()) / max(float(np.ptp(total)), 1e-9)


def _value_noise(rng: np.random.Generator, size: int, cells: int) -> np.ndarray:
    """Random values on a (cells + 1)^2 grid, interpolated with smoothstep weights to
    [size, size]."""
    grid = rng.random((cells + 1, cells + 1))
    t = np.arange(size) * cells / size
    i = t.astype(int)
    f = t - i
    f = f * f * (3.0 - 2.0 * f)
    top = grid[i][:, i] * (1 - f)[None, :] + grid[i][:, i + 1] * f[None, :]
    bottom = grid[i + 1][:, i] * (1 - f)[None, :] + grid[i + 1][:, i + 1] * f[None, :]
    return top * (1 - f)[:, None] + bottom * f[:, None]
