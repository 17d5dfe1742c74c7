"""Generative texture bank: a diffusers text-to-image pipeline fills DIR/textures/ once per dataset.

    TextureBankParams (model, prompts, per_prompt, steps, guidance, size, seed)
    ──► plan: image j of prompt i, seed from (bank seed, i, j),
        key = sha256(model, prompt, seed, ...)
    ──► per image: in DIR/textures/ already? keep ─► in the shared cache? copy ─► else generate
        (the pipeline is loaded offline, once, only if some image is missing)
    ──► PNGs written atomically (temporary name + rename) ──► DIR/textures/bank.json last

The appearance randomizer reads the bank back with `load_texture_bank` and applies the images
as MuJoCo materials. Images are tileable: every Conv2d of the UNet and the VAE pads circularly,
so the generated image is a function on a torus (no borders; see docs/textures.md).

Nothing is downloaded: the model is a local folder in `save_pretrained` layout or a model id
already in the Hugging Face cache. A model that cannot be loaded is a `TextureModelError` saying
how to provide it.

Why one module: planning, the offline model loading (three pipeline families) and the
circular padding are one contract (a bank's key covers all three); they are kept together so
that a change to one is seen beside the key it must change.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import os
import shutil
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from demofactory.generators.errors import TextureBankError, TextureModelError
from demofactory.generators.params import TextureBankParams
from demofactory.shards.fileio import (
    DatasetError,
    atomic_output,
    dumps_json,
    read_json_file,
    sha256_file,
    write_text_atomic,
)
from PIL import Image
from tqdm import tqdm

BANK_DIRNAME = "textures"  # DIR/textures/
INDEX_FILENAME = "bank.json"  # DIR/textures/bank.json, written last
CACHE_ENV = "DEMOFACTORY_CACHE"  # root of the shared cache; "off" disables it
INDEX_FORMAT = 1
# Part of every key: changing how images are made (tiling, seeding, encoding) must change it.
RECIPE = "txt2img-circular-v1"
MODEL_FIELD = "appearance.textures.bank.model"


@dataclass(frozen=True)
class TextureJob:
    """One image of the bank: image `index` of prompt `prompt_index`, made from `seed`."""

    prompt_index: int
    index: int
    prompt: str
    seed: int  # 63-bit, seeds a torch.Generator on the CPU
    key: str  # sha256 hex of everything that determines the pixels

    @property
    def filename(self) -> str:
        return f"p{self.prompt_index:03d}_i{self.index:03d}_{self.key[:16]}.png"


def image_seed(bank_seed: int, prompt_index: int, index: int) -> int:
    """A 63-bit seed from (bank seed, prompt index, image index), independent of anything else."""
    state = np.random.SeedSequence([bank_seed, prompt_index, index]).generate_state(
        2, dtype=np.uint32
    )
    return int((int(state[0]) << 31) ^ int(state[1]))


def local_model_dir(model: str, spec_path: Path | None = None) -> Path | None:
    """`model` as a local folder (relative to the spec's folder), or None when it names a hub id.

    An existing folder wins; a string that looks like a path (absolute, ./, ../, ~) is a folder
    even when it is missing, so that its key and its error name a folder, not a hub id.
    """
    base = spec_path.parent if spec_path is not None else Path.cwd()
    candidate = (base / Path(model).expanduser()).resolve()
    looks_like_path = model.startswith(("/", "./", "../", "~")) or model in (".", "..")
    return candidate if candidate.is_dir() or looks_like_path else None


def model_ref(model: str, spec_path: Path | None = None) -> str:
    """The model's identity in keys: the absolute folder for a local model, else the hub id."""
    folder = local_model_dir(model, spec_path)
    return str(folder) if folder is not None else model


def image_key(
    model: str, prompt: str, seed: int, steps: int, guidance_scale: float, size: int
) -> str:
    """sha256 hex of (model identity, prompt, image seed, steps, guidance, size, recipe)."""
    fields = {
        "guidance_scale": float(guidance_scale),
        "model": model,
        "prompt": prompt,
        "recipe": RECIPE,
        "seed": int(seed),
        "size": int(size),
        "steps": int(steps),
    }
    return hashlib.sha256(dumps_json(fields).encode()).hexdigest()


def plan_textures(bank: TextureBankParams, *, spec_path: Path | None = None) -> list[TextureJob]:
    """Every image of the bank, prompt-major (the index order of bank.json)."""
    ref = model_ref(bank.model, spec_path)
    jobs = []
    for i, prompt in enumerate(bank.prompts):
        for j in range(bank.per_prompt):
            seed = image_seed(bank.seed, i, j)
            key = image_key(ref, prompt, seed, bank.steps, bank.guidance_scale, bank.size)
            jobs.append(TextureJob(i, j, prompt, seed, key))
    return jobs


def bank_key(bank: TextureBankParams, *, spec_path: Path | None = None) -> str:
    """sha256 hex of the whole bank: its image keys in order (device and `share` left out)."""
    keys = [job.key for job in plan_textures(bank, spec_path=spec_path)]
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()


def texture_cache_dir() -> Path | None:
    """The shared cache: `$DEMOFACTORY_CACHE/textures` (default ~/.cache/demofactory/textures).

    None when `DEMOFACTORY_CACHE` is "off" (or empty): each dataset then makes its own images.
    """
    root = os.environ.get(CACHE_ENV)
    if root is not None and root.strip().lower() in ("", "off", "none", "0"):
        return None
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "demofactory"
    return base / BANK_DIRNAME


def _cached_path(cache: Path | None, key: str) -> Path | None:
    return cache / key[:2] / f"{key}.png" if cache is not None else None


def missing_textures(
    bank: TextureBankParams, dataset_dir: Path | None = None, *, spec_path: Path | None = None
) -> list[TextureJob]:
    """The images neither in `dataset_dir/textures/` nor in the shared cache: what to generate."""
    cache = texture_cache_dir()
    folder = Path(dataset_dir) / BANK_DIRNAME if dataset_dir is not None else None
    missing = []
    for job in plan_textures(bank, spec_path=spec_path):
        cached = _cached_path(cache, job.key)
        if folder is not None and (folder / job.filename).is_file():
            continue
        if cached is not None and cached.is_file():
            continue
        missing.append(job)
    return missing


def check_texture_model(
    bank: TextureBankParams, dataset_dir: Path | None = None, *, spec_path: Path | None = None
) -> None:
    """Cheap resolve-time check: if any image must be made, the model must be on disk.

    Reads no weights: a local folder must hold model_index.json, a hub id must have its
    model_index.json in the Hugging Face cache. Raises the same `TextureBankError` as loading.
    """
    if not missing_textures(bank, dataset_dir, spec_path=spec_path):
        return
    if bank.device == "cuda":
        resolve_device(bank.device)  # cuda asked on a machine without one
    folder = local_model_dir(bank.model, spec_path)
    if folder is not None:
        _check_folder(bank.model, folder, spec_path)
        return
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(bank.model, "model_index.json")
    except Exception as exc:  # a malformed repo id, an unreadable cache
        raise _model_error(bank.model, _first_line(exc), spec_path) from exc
    if not isinstance(found, str):
        raise _model_error(bank.model, "not in the local Hugging Face cache", spec_path)


def _check_folder(model: str, folder: Path, spec_path: Path | None) -> Path:
    if not folder.is_dir():
        raise _model_error(model, f"no folder {folder}", spec_path)
    if not (folder / "model_index.json").is_file():
        raise _model_error(model, f"no model_index.json in {folder}", spec_path)
    return folder


def ensure_texture_bank(
    bank: TextureBankParams,
    dataset_dir: Path,
    *,
    spec_path: Path | None = None,
    progress: bool = True,
) -> list[Path]:
    """Make (or reuse) every image of the bank; return their paths in index order.

    Writes `dataset_dir/textures/*.png` and `dataset_dir/textures/bank.json` (last). An image
    already in the dataset or in the shared cache under the same key is reused; the pipeline
    is loaded only when some image is missing, and `TextureBankError` says how to provide a model
    that cannot be loaded offline.
    """
    folder = Path(dataset_dir) / BANK_DIRNAME
    folder.mkdir(parents=True, exist_ok=True)
    for tmp in folder.glob(
        ".*.tmp-*"
    ):  # left by a killed run (the caller holds the dataset's lock)
        tmp.unlink()
    cache = _writable_cache()
    jobs = plan_textures(bank, spec_path=spec_path)
    before = _previous_origins(folder)
    generator = _LazyGenerator(bank, spec_path)
    entries = []
    bar = tqdm(total=len(jobs), desc="textures", unit="img", disable=not progress, file=sys.stderr)
    try:
        for job in jobs:
            made_on = _ensure_image(job, folder, cache, generator)
            made_on = before.get(job.filename, made_on) if made_on == "dataset" else made_on
            entries.append(_index_entry(job, folder / job.filename, made_on))
            bar.update(1)
            bar.set_postfix_str(f"made {generator.made} · reused {len(entries) - generator.made}")
    finally:
        bar.close()
        generator.close()
    _save_index(folder, bank, spec_path, entries)
    _remove_stale(folder, {job.filename for job in jobs})
    return [folder / job.filename for job in jobs]


def _ensure_image(
    job: TextureJob, folder: Path, cache: Path | None, generator: _LazyGenerator
) -> str:
    """Put the job's PNG in `folder`; return where it came from ("dataset", "cache", a device)."""
    target = folder / job.filename
    if target.is_file():
        return "dataset"
    cached = _cached_path(cache, job.key)
    if cached is not None and cached.is_file():
        _copy_atomic(cached, target)
        return "cache"
    data = _encode_png(generator.render(job))
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(cached, data)
    _write_atomic(target, data)
    return generator.made_on


def _previous_origins(folder: Path) -> dict[str, str]:
    """file -> made_on from an existing bank.json, so a re-run keeps each image's provenance."""
    try:
        return {
            str(e["file"]): str(e["made_on"])
            for e in read_json_file(folder / INDEX_FILENAME)["images"]
        }
    except (OSError, DatasetError, KeyError, TypeError):
        return {}  # no index yet (first run, or killed before its end): provenance unknown


def _writable_cache() -> Path | None:
    cache = texture_cache_dir()
    if cache is None:
        return None
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TextureBankError(
            f"{cache}: cannot create the texture cache ({exc.strerror}); set {CACHE_ENV} to a "
            f"writable folder, or {CACHE_ENV}=off"
        ) from exc
    return cache


def _index_entry(job: TextureJob, path: Path, made_on: str) -> dict[str, Any]:
    return {
        "file": job.filename,
        "index": job.index,
        "key": job.key,
        "made_on": made_on,
        "prompt": job.prompt,
        "prompt_index": job.prompt_index,
        "seed": job.seed,
        "sha256": sha256_file(path),
    }


def _save_index(
    folder: Path, bank: TextureBankParams, spec_path: Path | None, entries: list[dict]
) -> None:
    index = {
        "bank_key": bank_key(bank, spec_path=spec_path),
        "format": INDEX_FORMAT,
        "guidance_scale": bank.guidance_scale,
        "images": entries,
        "model": bank.model,
        "model_ref": model_ref(bank.model, spec_path),
        "recipe": RECIPE,
        "seed": bank.seed,
        "size": bank.size,
        "steps": bank.steps,
        "tileable": True,
    }
    write_text_atomic(folder / INDEX_FILENAME, dumps_json(index, indent=1) + "\n")


def _remove_stale(folder: Path, keep: set[str]) -> None:
    """Drop PNGs of an earlier bank (another spec's keys) so the folder holds only the index."""
    for path in folder.glob("p*_i*_*.png"):
        if path.name not in keep:
            path.unlink()


def load_texture_bank(dataset_dir: Path) -> list[np.ndarray]:
    """The bank's images, uint8 [S, S, 3] RGB, in bank.json order; [] when the dataset has no bank.

    A listed file that is missing or whose sha256 differs raises `DatasetError` naming it.
    """
    folder = Path(dataset_dir) / BANK_DIRNAME
    problems = verify_texture_bank(dataset_dir)
    if problems:
        raise DatasetError(problems[0])
    if not (folder / INDEX_FILENAME).is_file():
        return []
    images = []
    for entry in read_json_file(folder / INDEX_FILENAME)["images"]:
        with Image.open(folder / entry["file"]) as image:
            images.append(np.array(image.convert("RGB"), dtype=np.uint8))
    return images


def verify_texture_bank(dataset_dir: Path) -> list[str]:
    """Problems of DIR/textures/, one line each (for `factory verify`); [] when fine or absent."""
    folder = Path(dataset_dir) / BANK_DIRNAME
    index_path = folder / INDEX_FILENAME
    if not index_path.is_file():
        return []
    try:
        entries = read_json_file(index_path)["images"]
        files = [(str(e["file"]), str(e["sha256"])) for e in entries]
    except (DatasetError, KeyError, TypeError) as exc:
        return [f"{index_path}: malformed texture index ({_first_line(exc)})"]
    problems = []
    for name, sha in files:
        path = folder / name
        if not path.is_file():
            problems.append(f"{path}: missing (listed in {index_path})")
        elif sha256_file(path) != sha:
            problems.append(f"{path}: sha256 differs from {index_path}")
    return problems


# ---------------------------------------------------------------- the pipeline (torch, diffusers)


class _LazyGenerator:
    """Loads the pipeline on the first image that must be made, never on a full cache hit."""

    def __init__(self, bank: TextureBankParams, spec_path: Path | None):
        self.bank, self.spec_path = bank, spec_path
        self.pipe: Any = None
        self.made = 0
        self.made_on = ""

    def render(self, job: TextureJob) -> np.ndarray:
        if self.pipe is None:
            self.pipe = load_texture_pipeline(
                self.bank.model, self.bank.device, spec_path=self.spec_path
            )
            self.made_on = f"{self.pipe.device.type}/{str(self.pipe.dtype).removeprefix('torch.')}"
        image = render_texture(self.pipe, job.prompt, job.seed, self.bank)
        self.made += 1
        return image

    def close(self) -> None:
        """Free the weights (GPU memory included) before the workers start."""
        if self.pipe is None:
            return
        device = self.pipe.device.type
        self.pipe = None
        gc.collect()
        if device == "cuda":
            import torch

            torch.cuda.empty_cache()


def resolve_device(device: str) -> str:
    """ "auto" is cuda when torch sees a GPU, else cpu."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise TextureBankError(
            "appearance.textures.bank.device: cuda asked but torch sees no GPU (use auto or cpu)"
        )
    return device


def load_texture_pipeline(
    model: str, device: str = "auto", *, spec_path: Path | None = None
) -> Any:
    """A diffusers text-to-image pipeline, loaded offline, made tileable, on `device`.

    float16 on cuda, float32 on cpu. Any failure to load is one `TextureBankError` line naming the
    model and how to provide it.
    """
    device = resolve_device(device)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read when huggingface_hub is first imported
    import torch

    folder = local_model_dir(model, spec_path)
    source = str(_check_folder(model, folder, spec_path)) if folder is not None else model
    dtype = torch.float16 if device == "cuda" else torch.float32
    try:
        with _quiet_hf():
            from diffusers import AutoPipelineForText2Image

            pipe = AutoPipelineForText2Image.from_pretrained(
                source, dtype=dtype, local_files_only=True, safety_checker=None
            )
    except Exception as exc:  # any failure: missing files, not a pipeline, bad config, bad weights
        raise _model_error(model, _first_line(exc), spec_path) from exc
    make_tileable(pipe)
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(device)


def make_tileable(pipe: Any) -> int:
    """Pad every Conv2d of the UNet and the VAE circularly; return how many convs changed.

    With circular padding (and position-free attention, as in Stable Diffusion's UNet) the
    denoiser and the decoder see the latent as a torus, so the image wraps without a seam.
    """
    import torch

    changed = 0
    for name in ("unet", "vae"):
        module = getattr(pipe, name, None)
        if not isinstance(module, torch.nn.Module):
            continue
        for conv in module.modules():
            if isinstance(conv, torch.nn.Conv2d):
                conv.padding_mode = "circular"  # F.pad(circular) + conv with padding 0
                changed += 1
    return changed


def render_texture(pipe: Any, prompt: str, seed: int, bank: TextureBankParams) -> np.ndarray:
    """One image, uint8 [size, size, 3], from a CPU torch.Generator seeded with `seed`.

    One image per call: its pixels do not depend on which other images were cached.
    """
    import torch

    generator = torch.Generator("cpu").manual_seed(seed)
    with torch.inference_mode():
        out = pipe(
            prompt=prompt,
            num_inference_steps=bank.steps,
            guidance_scale=bank.guidance_scale,
            height=bank.size,
            width=bank.size,
            generator=generator,
            output_type="np",
        )
    image = np.asarray(out.images[0], dtype=np.float32)  # [S, S, 3] in [0, 1]
    return np.round(np.clip(image, 0.0, 1.0) * 255.0).astype(np.uint8)


@contextlib.contextmanager
def _quiet_hf() -> Iterator[None]:
    """Silence diffusers/transformers warnings and loading bars while loading (restored after)."""
    from transformers.utils import logging as tlog  # first: importing diffusers logs through it

    saved = []
    for log in (tlog, _diffusers_logging()):
        saved.append((log, log.get_verbosity(), log.is_progress_bar_enabled()))
        log.set_verbosity_error()
        log.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            # diffusers still passes this deprecated argument to huggingface_hub
            warnings.filterwarnings("ignore", message=".*local_dir_use_symlinks")
            yield
    finally:
        for log, verbosity, bars in saved:
            log.set_verbosity(verbosity)
            if bars:
                log.enable_progress_bar()


def _diffusers_logging() -> Any:
    from diffusers.utils import logging

    return logging


def _model_error(model: str, reason: str, spec_path: Path | None) -> TextureModelError:
    if local_model_dir(model, spec_path) is not None:
        how = (
            f"cannot load {model!r}: {reason}; expected a folder written by "
            "`pipe.save_pretrained(FOLDER)` (model_index.json, unet/, vae/, text_encoder/, "
            "tokenizer/, scheduler/) on a machine that has the model"
        )
    else:
        how = (
            f"cannot load {model!r} offline ({reason}); download it on a connected machine with "
            f"`hf download {model}` (older huggingface_hub: `huggingface-cli download {model}`) "
            "and copy the Hugging Face cache here or point HF_HOME at the copy, or "
            f"`pipe.save_pretrained(FOLDER)` there and set {MODEL_FIELD} to the folder"
        )
    where = str(spec_path) if spec_path is not None else "texture bank"
    return TextureModelError(where, MODEL_FIELD, how)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 200 else line[:197] + "..."


def _encode_png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _write_atomic(path: Path, data: bytes) -> None:
    with atomic_output(path) as f:
        f.write(data)


def _copy_atomic(src: Path, dst: Path) -> None:
    with open(src, "rb") as fin, atomic_output(dst) as fout:
        shutil.copyfileobj(fin, fout)
