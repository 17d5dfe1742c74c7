"""The generative texture bank, run end to end through a tiny randomly initialised Stable Diffusion.

The pipeline is real diffusers/transformers code (UNet, VAE, CLIP text model, CLIP BPE tokenizer,
DDIM scheduler) built from tiny configs with random weights and saved with `save_pretrained`:
nothing is downloaded. Only its size is fake.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from demofactory.generators import texture_bank as tb
from demofactory.generators.errors import TextureBankError
from demofactory.shards.format import DatasetError
from demofactory.specs.spec import TextureBankSpec

SIZE = 64  # pixels: 8x8 latents


def _byte_chars() -> list[str]:
    """The 256 printable stand-ins for bytes used by byte-level BPE (as in GPT-2 and CLIP)."""
    keep = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in chars:
            chars[b], extra = chr(256 + extra), extra + 1
    return [chars[b] for b in range(256)]


def make_tiny_pipeline(folder: Path) -> Path:
    """A tiny random StableDiffusionPipeline saved to `folder` (save_pretrained layout)."""
    return make_random_pipeline(folder, "tiny")


def make_random_pipeline(folder: Path, arch: str = "tiny") -> Path:
    """A random StableDiffusionPipeline saved to `folder`: `tiny`, or `sd15` (Stable Diffusion 1.5's
    published architecture at full size, 1.07 B parameters, saved in float16; for benchmarks).

    The tokenizer is byte-level with no merges in both (its vocabulary is not public data here);
    the sd15 text encoder keeps CLIP ViT-L/14's 49,408-token embedding table.
    """
    import torch
    from diffusers import (
        AutoencoderKL,
        DDIMScheduler,
        StableDiffusionPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    if arch not in ("tiny", "sd15"):
        raise ValueError(f"arch must be tiny or sd15, got {arch!r}")
    chars = _byte_chars()
    vocab = {tok: i for i, tok in enumerate(chars + [c + "</w>" for c in chars])}
    bos, eos = len(vocab), len(vocab) + 1
    vocab.update({"<|startoftext|>": bos, "<|endoftext|>": eos})
    tok_dir = folder.parent / f"{folder.name}-vocab"
    tok_dir.mkdir(parents=True)
    (tok_dir / "vocab.json").write_text(json.dumps(vocab))
    (tok_dir / "merges.txt").write_text("#version: 0.2\n")  # no merges: one token per byte
    tokenizer = CLIPTokenizer(
        str(tok_dir / "vocab.json"), str(tok_dir / "merges.txt"), model_max_length=77
    )

    torch.manual_seed(0)
    ids = dict(bos_token_id=bos, eos_token_id=eos, pad_token_id=eos, max_position_embeddings=77)
    if arch == "tiny":
        text_config = CLIPTextConfig(
            vocab_size=len(vocab),
            hidden_size=16,
            intermediate_size=32,
            num_attention_heads=2,
            num_hidden_layers=2,
            projection_dim=16,
            **ids,
        )
        unet_config = dict(
            sample_size=SIZE // 8,
            block_out_channels=(8, 16),
            layers_per_block=1,
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
            cross_attention_dim=16,
            attention_head_dim=2,
            norm_num_groups=4,
        )
        vae_config = dict(block_out_channels=(8,) * 4, norm_num_groups=4, sample_size=SIZE)
        build_device, dtype = "cpu", torch.float32
    else:
        text_config = CLIPTextConfig(
            vocab_size=49408,
            hidden_size=768,
            intermediate_size=3072,
            num_attention_heads=12,
            num_hidden_layers=12,
            projection_dim=768,
            hidden_act="quick_gelu",
            **ids,
        )
        unet_config = dict(
            sample_size=64,
            block_out_channels=(320, 640, 1280, 1280),
            layers_per_block=2,
            down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
            up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
            cross_attention_dim=768,
            attention_head_dim=8,
            norm_num_groups=32,
        )
        vae_config = dict(
            block_out_channels=(128, 256, 512, 512),
            layers_per_block=2,
            norm_num_groups=32,
            sample_size=512,
        )
        # random init is much faster there
        build_device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.float16
    with torch.device(build_device):
        unet = UNet2DConditionModel(in_channels=4, out_channels=4, **unet_config)
        vae = AutoencoderKL(
            in_channels=3,
            out_channels=3,
            latent_channels=4,
            down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4,
            **vae_config,
        )
        text_encoder = CLIPTextModel(text_config)
    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.to(dtype=dtype).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return make_tiny_pipeline(tmp_path_factory.mktemp("sd") / "tiny-sd")


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """Tiny convs on a busy 2-core machine: one thread is ~30x faster than two spinning ones."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """Every test gets its own shared cache, never ~/.cache."""
    monkeypatch.setenv(tb.CACHE_ENV, str(tmp_path / "cache"))


def _bank(model: Path | str, **changes) -> TextureBankSpec:
    fields = dict(
        model=str(model),
        prompts=["a wooden table top", "grey concrete floor"],
        per_prompt=2,
        steps=2,
        size=SIZE,
        seed=7,
        device="cpu",
    )
    return TextureBankSpec(**{**fields, **changes})


def _bytes(paths: list[Path]) -> list[bytes]:
    return [p.read_bytes() for p in paths]


def test_fill_bank_then_load(tiny_model, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(tb.CACHE_ENV, "off")
    bank = _bank(tiny_model)
    paths = tb.ensure_texture_bank(bank, tmp_path / "ds", progress=True)
    assert "textures" in capsys.readouterr().err  # the tqdm bar
    assert [p.parent for p in paths] == [tmp_path / "ds" / "textures"] * 4
    assert sorted(p.name for p in (tmp_path / "ds" / "textures").glob("*.png")) == sorted(
        p.name for p in paths
    )

    index = json.loads((tmp_path / "ds" / "textures" / "bank.json").read_text())
    assert index["model"] == str(tiny_model) and index["bank_key"] == tb.bank_key(bank)
    assert index["tileable"] is True and index["size"] == SIZE
    assert [(e["prompt"], e["index"]) for e in index["images"]] == [
        ("a wooden table top", 0),
        ("a wooden table top", 1),
        ("grey concrete floor", 0),
        ("grey concrete floor", 1),
    ]
    assert [e["seed"] for e in index["images"]] == [
        tb.image_seed(7, i, j) for i in range(2) for j in range(2)
    ]
    assert all(e["made_on"] == "cpu/float32" for e in index["images"])

    images = tb.load_texture_bank(tmp_path / "ds")
    assert len(images) == 4
    for image, path, entry in zip(images, paths, index["images"], strict=True):
        assert image.shape == (SIZE, SIZE, 3) and image.dtype == np.uint8
        assert entry["file"] == path.name and entry["sha256"] == tb.sha256_file(path)
    assert len({img.tobytes() for img in images}) == 4  # every seed and prompt gives its own image
    assert all(img.std() > 0 for img in images)


def test_same_spec_same_bytes_other_seed_other_images(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv(tb.CACHE_ENV, "off")  # force every image to be generated again
    first = tb.ensure_texture_bank(_bank(tiny_model), tmp_path / "a", progress=False)
    again = tb.ensure_texture_bank(_bank(tiny_model), tmp_path / "b", progress=False)
    assert _bytes(first) == _bytes(again)

    other = tb.ensure_texture_bank(_bank(tiny_model, seed=8), tmp_path / "c", progress=False)
    for a, b in zip(
        tb.load_texture_bank(tmp_path / "a"), tb.load_texture_bank(tmp_path / "c"), strict=True
    ):
        assert np.abs(a.astype(int) - b.astype(int)).mean() > 1.0
    assert {p.name for p in first}.isdisjoint(p.name for p in other)


def test_cache_hit_does_not_load_the_model(tiny_model, tmp_path):
    model = shutil.copytree(tiny_model, tmp_path / "model")
    bank = _bank(model)
    made = tb.ensure_texture_bank(bank, tmp_path / "a", progress=False)
    expected = _bytes(made)
    shutil.rmtree(model)  # from here on, loading the pipeline can only fail

    assert (
        _bytes(tb.ensure_texture_bank(bank, tmp_path / "a", progress=False)) == expected
    )  # the dataset's own
    index = json.loads((tmp_path / "a" / "textures" / "bank.json").read_text())
    assert {e["made_on"] for e in index["images"]} == {"cpu/float32"}  # provenance kept on reuse
    tb.check_texture_model(bank, tmp_path / "a")
    copied = tb.ensure_texture_bank(bank, tmp_path / "b", progress=False)  # from the shared cache
    assert _bytes(copied) == expected
    index = json.loads((tmp_path / "b" / "textures" / "bank.json").read_text())
    assert {e["made_on"] for e in index["images"]} == {"cache"}

    with pytest.raises(TextureBankError, match="cannot load"):  # the model really is gone
        tb.ensure_texture_bank(_bank(model, steps=3), tmp_path / "c", progress=False)


def test_changed_bank_replaces_the_old_images(tiny_model, tmp_path):
    tb.ensure_texture_bank(_bank(tiny_model), tmp_path / "ds", progress=False)
    paths = tb.ensure_texture_bank(
        _bank(tiny_model, prompts=["red brick wall"], per_prompt=1), tmp_path / "ds"
    )
    assert sorted((tmp_path / "ds" / "textures").glob("*.png")) == paths
    assert len(tb.load_texture_bank(tmp_path / "ds")) == 1


def test_model_id_from_the_hugging_face_cache(tiny_model, tmp_path, monkeypatch):
    """A hub id already in the local cache (the layout `hf download` leaves) loads offline."""
    import huggingface_hub

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--demofactory--tiny-sd"
    shutil.copytree(tiny_model, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))

    bank = _bank("demofactory/tiny-sd", per_prompt=1)
    tb.check_texture_model(bank, tmp_path / "ds")
    paths = tb.ensure_texture_bank(bank, tmp_path / "ds", progress=False)
    index = json.loads((tmp_path / "ds" / "textures" / "bank.json").read_text())
    assert len(paths) == 2 and index["model_ref"] == "demofactory/tiny-sd"


def test_missing_model_id_is_a_user_error(tmp_path):
    bank = _bank("demofactory-test/no-such-model")
    with pytest.raises(TextureBankError, match="demofactory-test/no-such-model") as resolve_err:
        tb.check_texture_model(bank, tmp_path / "ds", spec_path=tmp_path / "spec.yaml")
    message = str(resolve_err.value)
    assert "\n" not in message and "hf download demofactory-test/no-such-model" in message
    assert "appearance.textures.bank.model" in message and "spec.yaml" in message
    with pytest.raises(TextureBankError, match="demofactory-test/no-such-model.*save_pretrained"):
        tb.ensure_texture_bank(bank, tmp_path / "ds", progress=False)


def test_folder_that_is_not_a_pipeline_is_a_user_error(tmp_path):
    junk = tmp_path / "not-a-model"
    junk.mkdir()
    (junk / "weights.bin").write_bytes(b"\0" * 64)
    with pytest.raises(TextureBankError, match="not-a-model.*model_index.json"):
        tb.check_texture_model(_bank(junk), tmp_path / "ds")
    with pytest.raises(TextureBankError, match="cannot load .*not-a-model"):
        tb.ensure_texture_bank(_bank(junk), tmp_path / "ds", progress=False)
    (junk / "model_index.json").write_text('{"_class_name": "NoSuchPipeline"}')
    with pytest.raises(TextureBankError, match="cannot load .*not-a-model"):
        tb.ensure_texture_bank(_bank(junk), tmp_path / "ds", progress=False)


def test_relative_model_folder_resolves_against_the_spec(tiny_model, tmp_path):
    spec_path = tiny_model.parent / "scene.yaml"
    assert tb.local_model_dir("tiny-sd", spec_path) == tiny_model
    assert (
        tb.local_model_dir("./gone", spec_path) == tiny_model.parent / "gone"
    )  # a path, even missing
    assert tb.local_model_dir("org/model-id", spec_path) is None  # a hub id
    tb.check_texture_model(_bank("tiny-sd"), tmp_path / "ds", spec_path=spec_path)


def test_textures_tile(tiny_model):
    """Circular padding makes generation shift-equivariant on the torus: no borders, no seam."""
    import torch

    pipe = tb.load_texture_pipeline(str(tiny_model), "cpu")
    assert pipe.vae_scale_factor == 8  # as in Stable Diffusion: 8x8 latents for 64x64 pixels
    latents = torch.randn(1, 4, SIZE // 8, SIZE // 8, generator=torch.Generator().manual_seed(0))
    shift = 2  # latents; the UNet downsamples once, so an even shift stays on its grid

    def run(lat):
        return pipe(
            prompt="tiles",
            num_inference_steps=2,
            height=SIZE,
            width=SIZE,
            latents=lat,
            output_type="np",
        ).images[0]

    image = run(latents)
    rolled = run(torch.roll(latents, shifts=(shift, -shift), dims=(2, 3)))
    np.testing.assert_allclose(
        rolled, np.roll(image, (8 * shift, -8 * shift), axis=(0, 1)), atol=1e-4
    )
    assert np.abs(image - np.roll(image, 8, axis=0)).mean() > 1e-3  # not trivially constant


def test_keys_and_seeds():
    bank = _bank("org/model")
    assert tb.image_seed(0, 1, 2) == tb.image_seed(0, 1, 2) < 2**63
    assert len({tb.image_seed(s, i, j) for s in range(2) for i in range(3) for j in range(3)}) == 18
    key = tb.bank_key(bank)
    assert key == tb.bank_key(
        _bank("org/model", device="cuda", share=0.1)
    )  # not in the pixels' key
    assert tb.bank_key(_bank("org/other")) != key
    for change in (
        {"prompts": ["x"]},
        {"steps": 3},
        {"size": 72},
        {"guidance_scale": 1.0},
        {"seed": 1},
        {"per_prompt": 3},
    ):
        assert tb.bank_key(_bank("org/model", **change)) != key, change


def test_load_without_bank_and_with_a_damaged_file(tiny_model, tmp_path):
    assert tb.load_texture_bank(tmp_path / "empty") == []
    paths = tb.ensure_texture_bank(_bank(tiny_model, per_prompt=1), tmp_path / "ds", progress=False)
    assert tb.verify_texture_bank(tmp_path / "ds") == []
    paths[0].write_bytes(paths[0].read_bytes()[:-1] + b"\1")
    paths[1].unlink()
    problems = tb.verify_texture_bank(tmp_path / "ds")
    assert problems == [
        f"{paths[0]}: sha256 differs from {paths[0].parent / 'bank.json'}",
        f"{paths[1]}: missing (listed in {paths[0].parent / 'bank.json'})",
    ]
    with pytest.raises(DatasetError, match="sha256"):
        tb.load_texture_bank(tmp_path / "ds")


def test_factory_run_with_a_bank_end_to_end(tiny_model, tmp_path, ray_cluster, capsys, monkeypatch):
    """The whole path: `factory run` fills the bank, Ray workers load it and paint it on the
    table, every episode records the bank image it got; a resume needs no model; validate
    names a model that is not there."""
    import tarfile

    from demofactory.cli.main import main
    from demofactory.shards import load_episodes

    from tests.conftest import write_spec

    appearance = {
        "variants_per_trajectory": 2,
        "keep_original": False,
        "textures": {
            "surfaces": ["table"],
            "patterns": ["solid"],
            "bank": {
                "model": str(tiny_model),
                "prompts": ["a wooden table top"],
                "per_prompt": 1,
                "steps": 2,
                "size": SIZE,
                "seed": 3,
                "device": "cpu",
                "share": 1.0,
            },
        },
    }
    spec = write_spec(
        tmp_path / "bank.yaml",
        name="bank_lift",
        task={"horizon": 300},
        generation={"attempts": 1, "attempts_per_shard": 1},
        cameras=[{"name": "agentview", "width": 32, "height": 32}],
        appearance=appearance,
    )
    out = tmp_path / "out"
    assert main(["run", str(spec), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    assert len(tb.load_texture_bank(out)) == 1
    episodes = load_episodes(out)
    assert [e.index for e in episodes] == [0, 1]  # attempt 0 x K = 2 variants
    for record in episodes:
        table = record.provenance["appearance"]["surfaces"]["table"]
        assert table["bank_image"] == 0, table
    with tarfile.open(out / "shards" / "shard-000000.tar") as tar:
        first = [m.name for m in tar.getmembers() if m.name.endswith("_t0000.agentview.jpg")]
    assert len(first) == 2
    assert main(["verify", str(out)]) == 0

    # The bank is complete: resuming (more attempts) never needs the model.
    moved = tiny_model.with_name("moved-away")
    tiny_model.rename(moved)
    try:
        assert (
            main(
                [
                    "run",
                    str(spec),
                    "--out",
                    str(out),
                    "--workers",
                    "1",
                    "--no-progress",
                    "--attempts",
                    "2",
                ]
            )
            == 0
        )
        assert [e.index for e in load_episodes(out)][:2] == [0, 1]
        capsys.readouterr()
        monkeypatch.setenv(tb.CACHE_ENV, "off")  # (the shared cache holds the image now)
        assert main(["validate", str(spec)]) == 2  # a fresh dataset would need it
        err = capsys.readouterr().err.strip().splitlines()
        assert (
            len(err) == 1
            and str(tiny_model) in err[0]
            and "appearance.textures.bank.model" in err[0]
        ), err
    finally:
        moved.rename(tiny_model)
    texture = sorted((out / "textures").glob("*.png"))[0]
    texture.write_bytes(texture.read_bytes()[:-1] + b"\0")
    capsys.readouterr()
    assert main(["verify", str(out)]) == 2
    assert f"textures/{texture.name}: sha256 differs" in capsys.readouterr().err
