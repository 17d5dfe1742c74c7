"""`bench_render.py --detail`: `render.detail` against full meshes, on the same states.

    .venv/bin/python benchmarks/bench_render.py --detail auto [--sizes 84,128,224]
        [--cameras agentview,robot0_eye_in_hand] [--frames 60] [--rounds 3] [--images docs/images]

Per camera and size: frames/s of the factory's renderer (RGB, render only) with full meshes
and with the detail asked for, interleaved `--rounds` times (best round each: a shared machine
slows some rounds), `ratio` = detail / full; the same per CPU second of this process
(`cpu_ratio`: frames per core, which other agents' load disturbs far less than wall time);
and the pictures compared: PSNR over all frames
(from the mean squared error of every pixel; `psnr_worst_frame_db` too), SSIM (mean of the
frames'), and the largest per-pixel error (0-255, the largest channel) with the frame, row and
column where it is. Writes `render_detail_errors.png` (per camera and size, a row: full,
decimated, the error x4, enlarged to 224 px, the largest error circled) and
`render_detail_pair.png` (full | decimated, the first camera at the smallest size, enlarged)
into `--images`. Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

import numpy as np
from demofactory.seeds.resolve import resolve_spec
from demofactory.simulation.render import FrameRenderer
from demofactory.specs.spec import CameraSpec, load_spec
from PIL import Image, ImageDraw

PSNR_TARGET_DB = 35.0


def psnr_db(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR of uint8 images (any shape, compared whole): inf when equal."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """SSIM of two [H, W, 3] uint8 images (Wang et al. 2004: Gaussian window sigma 1.5,
    K1 0.01, K2 0.03), the mean over pixels and channels.

    Written here with scipy's Gaussian filter: scikit-image is not a dependency of the project
    and this is its whole formula (skimage's `structural_similarity(gaussian_weights=True,
    sigma=1.5, use_sample_covariance=False, channel_axis=-1)` computes the same)."""
    from scipy.ndimage import gaussian_filter

    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    out = []
    for ch in range(a.shape[-1]):
        x, y = a[..., ch].astype(np.float64), b[..., ch].astype(np.float64)

        def blur(img):
            return gaussian_filter(img, 1.5, truncate=3.5)

        mx, my = blur(x), blur(y)
        vx, vy, cxy = blur(x * x) - mx * mx, blur(y * y) - my * my, blur(x * y) - mx * my
        num = (2 * mx * my + c1) * (2 * cxy + c2)
        den = (mx * mx + my * my + c1) * (vx + vy + c2)
        out.append(np.mean(num / den))
    return float(np.mean(out))


def _render_all(renderer: FrameRenderer, scene, states, camera: str) -> tuple[list, float, float]:
    """The images, frames per wall second and frames per CPU second (all of this process's
    threads: Mesa's llvmpipe renders on several)."""
    images = []
    start, cpu = time.perf_counter(), time.process_time()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for state in states:
        scene.set_state(state)
        images.append(renderer.render_current()[camera])
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    _FAULTS[id(renderer)] = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / len(
        states
    )
    return images, len(states) / wall, len(states) / max(cpu, 1e-9)


_FAULTS: dict[int, float] = {}  # renderer -> minor page faults per frame, its latest pass


def _faces_per_frame(renderer: FrameRenderer, camera: str, faces_drawn: int) -> float:
    """Mesh faces sent to GL per frame: the render model's, less those view culling skipped."""
    frames, _, culled = renderer.culled.get(camera, (0, 0, 0))
    return round(faces_drawn - (culled / frames if frames else 0), 1)


def compare(full: list[np.ndarray], other: list[np.ndarray]) -> dict:
    """PSNR, SSIM and the largest per-pixel error of `other` against `full` (same states)."""
    a, b = np.stack(full), np.stack(other)
    err = np.abs(a.astype(np.int16) - b.astype(np.int16)).max(axis=-1)  # [T, H, W]
    frame, row, col = (int(i) for i in np.unravel_index(int(np.argmax(err)), err.shape))
    per_frame = [psnr_db(x, y) for x, y in zip(full, other, strict=True)]
    return {
        "psnr_db": round(psnr_db(a, b), 2),
        "psnr_worst_frame_db": round(min(per_frame), 2),
        "ssim": round(float(np.mean([ssim(x, y) for x, y in zip(full, other, strict=True)])), 5),
        "max_pixel_error": int(err[frame, row, col]),
        "max_pixel_error_at": {"frame": frame, "row": row, "col": col},
        "pixels_over_32": int(np.count_nonzero(err > 32)),
        "pixels": int(err.size),
    }


def error_row(full: np.ndarray, other: np.ndarray, at: dict, height: int = 224) -> Image.Image:
    """full | decimated | error x4, each enlarged to `height` px, the largest error circled."""
    err = np.abs(full.astype(np.int16) - other.astype(np.int16)).max(axis=-1)
    heat = np.clip(err * 4, 0, 255).astype(np.uint8)
    row = np.concatenate([full, other, np.stack([heat] * 3, axis=-1)], axis=1)
    scale = height / full.shape[0]
    size = (round(row.shape[1] * scale), height)
    img = Image.fromarray(row).resize(size, Image.NEAREST)
    draw = ImageDraw.Draw(img)
    w = full.shape[1]
    for panel in (1, 2):
        cx, cy = (panel * w + at["col"] + 0.5) * scale, (at["row"] + 0.5) * scale
        r = 12
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], outline=(255, 0, 0), width=2)
    return img


def detail_main(args) -> None:
    spec = load_spec(args.spec)
    resolved = resolve_spec(spec)
    scene, states = resolved.scene, resolved.demos[0].demo.states
    picks = np.linspace(0, len(states) - 1, min(args.frames, len(states))).round().astype(int)
    states = states[picks]
    detail = int(args.detail) if str(args.detail).isdigit() else args.detail
    sizes = [int(s) for s in args.sizes.split(",")]
    cameras = args.cameras.split(",")
    images_dir = Path(args.images)
    results, rows, pair = [], [], None
    for camera in cameras:
        for size in sizes:
            cam = CameraSpec(name=camera, width=size, height=size)
            full_r = FrameRenderer(scene, [cam], spec.render.model_copy(update={"detail": "full"}))
            start = time.perf_counter()
            dec_r = FrameRenderer(scene, [cam], spec.render.model_copy(update={"detail": detail}))
            build_s = time.perf_counter() - start
            _render_all(full_r, scene, states[:1], camera)  # GL contexts made, warm
            _render_all(dec_r, scene, states[:1], camera)
            fps = {"full": [], "detail": []}
            cpu_fps = {"full": [], "detail": []}
            for _ in range(args.rounds):  # interleaved: both see the same machine load
                full_images, f, c = _render_all(full_r, scene, states, camera)
                fps["full"].append(round(f, 1))
                cpu_fps["full"].append(round(c, 1))
                dec_images, f, c = _render_all(dec_r, scene, states, camera)
                fps["detail"].append(round(f, 1))
                cpu_fps["detail"].append(round(c, 1))
            quality = compare(full_images, dec_images)
            at = quality["max_pixel_error_at"]
            frame = at["frame"]
            rows.append(error_row(full_images[frame], dec_images[frame], at))
            if camera == cameras[0] and size == min(sizes):  # where auto decimates most
                mid = len(states) // 2
                pair = Image.fromarray(np.concatenate([full_images[mid], dec_images[mid]], 1))
                pair = pair.resize((pair.width * 224 // size, 224), Image.NEAREST)
            results.append(
                {
                    "camera": camera,
                    "size": size,
                    "full_fps": max(fps["full"]),
                    "detail_fps": max(fps["detail"]),
                    "ratio": round(max(fps["detail"]) / max(fps["full"]), 2),
                    "full_fps_per_cpu_s": max(cpu_fps["full"]),
                    "detail_fps_per_cpu_s": max(cpu_fps["detail"]),
                    "cpu_ratio": round(max(cpu_fps["detail"]) / max(cpu_fps["full"]), 2),
                    "per_round": fps,
                    "per_round_cpu": cpu_fps,
                    **quality,
                    "psnr_ok": bool(quality["psnr_db"] >= PSNR_TARGET_DB),
                    "render_model_build_s": round(build_s, 2),
                    "faces_per_frame": {
                        "full": dec_r.detail.faces_full,
                        "detail": _faces_per_frame(dec_r, camera, dec_r.detail.faces_drawn),
                    },
                    "geoms_culled_per_frame": round(
                        dec_r.culled[camera][1] / max(dec_r.culled[camera][0], 1), 1
                    )
                    if camera in dec_r.culled
                    else 0,
                    # frames composited over a kept static picture / drawn anew / drawn whole
                    "static_layer_frames": dec_r.static_layer_frames.get(camera),
                    "minor_page_faults_per_frame": {
                        "full": round(_FAULTS[id(full_r)], 1),
                        "detail": round(_FAULTS[id(dec_r)], 1),
                    },
                    "meshes": dec_r.detail.to_json(),
                }
            )
            full_r.close()
            dec_r.close()
    images_dir.mkdir(parents=True, exist_ok=True)
    width = max(r.width for r in rows)
    sheet = Image.new("RGB", (width, sum(r.height for r in rows)), (255, 255, 255))
    y = 0
    for r in rows:
        sheet.paste(r, (0, y))
        y += r.height
    sheet.save(images_dir / "render_detail_errors.png")
    if pair is not None:
        pair.save(images_dir / "render_detail_pair.png")
    print(
        json.dumps(
            {
                "benchmark": "render_detail",
                "spec": args.spec,
                "detail": detail,
                "frames": len(states),
                "rounds": args.rounds,
                "mujoco_gl": os.environ.get("MUJOCO_GL"),
                "load_average_1min": round(os.getloadavg()[0], 2),
                "cpus": os.cpu_count(),
                "psnr_target_db": PSNR_TARGET_DB,
                "all_psnr_ok": all(r["psnr_ok"] for r in results),
                "results": results,
                "images": [
                    str(images_dir / "render_detail_errors.png"),
                    str(images_dir / "render_detail_pair.png"),
                ],
            }
        )
    )
