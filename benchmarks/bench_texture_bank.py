"""Texture-bank throughput: images per second through a tiny random Stable Diffusion, and a
cache hit.

    .venv/bin/python benchmarks/bench_texture_bank.py [--images 8] [--size 64] [--steps 2]
                                                      [--threads 1] [--device cpu] [--arch tiny]

    # on a GPU machine: Stable Diffusion 1.5's architecture at full size (random weights)
    python benchmarks/bench_texture_bank.py --arch sd15 --size 512 --steps 25 --device cuda \
        --images 8

Builds the same randomly initialised pipeline as tests/generators/test_texture_bank.py, tiny
or (`--arch sd15`) at Stable Diffusion 1.5's full size (nothing is downloaded; random weights
cost the same arithmetic as trained ones), then in a temporary directory with its own shared
cache times:

- load_s:       `load_texture_pipeline` (offline load from the save_pretrained folder, tiling);
- fill:         `ensure_texture_bank` making `--images` images (one prompt) from scratch,
                pipeline load included, as `images_per_s`;
- render:       `render_texture` alone on the loaded pipeline, as `render_images_per_s`;
- reuse_s:      the same `ensure_texture_bank` call into a new dataset (every image copied from
                the shared cache; the pipeline is not loaded).

Prints one JSON object. The tiny model says what the bank's own overhead (keys, PNG encoding,
atomic writes, the index) costs next to the network; a real Stable Diffusion 1.5 at 512 px and
25 steps is dominated by its UNet (seconds per image on a GPU, minutes on a CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests package

from demofactory.generators import texture_bank as tb  # noqa: E402
from demofactory.generators.params import TextureBankParams  # noqa: E402

from tests.generators.test_texture_bank import make_random_pipeline  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    parser.add_argument("--arch", default="tiny", choices=["tiny", "sd15"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ[tb.CACHE_ENV] = str(root / "cache")
        t0 = time.perf_counter()
        model = make_random_pipeline(root / f"{args.arch}-sd", args.arch)
        build_s = time.perf_counter() - t0
        bank = TextureBankParams(
            model=str(model),
            prompts=("a wooden table top",),
            per_prompt=args.images,
            steps=args.steps,
            size=args.size,
            device=args.device,
        )
        t0 = time.perf_counter()
        pipe = tb.load_texture_pipeline(str(model), args.device)
        load_s = time.perf_counter() - t0
        params = {
            name: sum(p.numel() for p in getattr(pipe, name).parameters())
            for name in ("unet", "vae", "text_encoder")
        }
        # warm-up (kernels, caches)
        tb.render_texture(pipe, bank.prompts[0], tb.image_seed(1, 0, 999), bank)

        t0 = time.perf_counter()
        for j in range(args.images):
            tb.render_texture(pipe, bank.prompts[0], tb.image_seed(1, 0, j), bank)
        render_s = time.perf_counter() - t0
        del pipe

        t0 = time.perf_counter()
        tb.ensure_texture_bank(bank, root / "a", progress=False)
        fill_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        tb.ensure_texture_bank(bank, root / "b", progress=False)
        reuse_s = time.perf_counter() - t0

    print(
        json.dumps(
            {
                "benchmark": "texture_bank",
                "device": tb.resolve_device(args.device),
                "arch": args.arch,
                "parameters": params,
                "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                "threads": args.threads,
                "images": args.images,
                "size": args.size,
                "steps": args.steps,
                "build_and_save_s": round(build_s, 1),
                "load_s": round(load_s, 3),
                "render_s_per_image": round(render_s / args.images, 3),
                "images_per_s": round(args.images / fill_s, 2),
                "render_images_per_s": round(args.images / render_s, 2),
                "reuse_s": round(reuse_s, 3),
                "cpu": platform.processor() or platform.machine(),
                "cpu_count": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
