"""A language-conditioned image policy: instruction + camera frames + proprio -> action chunk.

    instruction ──► WordLevel tokenizer (fitted on the dataset's instructions) ──► ids [B, L]
        ──► BertModel (tiny config, trained from scratch) ──► masked mean ──► text [B, E]
    frames [B, C, 3, h, w] in [0, 1], one encoder per camera:
        conv ─► conv ─► FiLM(text) ─► conv ─► FiLM(text) ─► 1x1 conv ─► spatial softmax
        ──► keypoints [B, 2K] per camera (expected x, y in [-1, 1] of K feature maps)
    proprio [B, 9] (+ time), normalized ─┐
    keypoints of every camera ───────────┼─► MLP ─► normalized action chunk [B, H, 7]
    text ────────────────────────────────┘

No object pose enters: the observation is the robot's own state (`ObsLayout` with no objects),
so where the cube is, and which cube the instruction names, must come from the pixels. FiLM
lets the instruction choose what the keypoints track (the named colour), which is what target
selection needs; spatial softmax keypoints are the usual image encoder for manipulation BC
(robomimic, Levine et al. 2016).

The tokenizer travels with the policy (`save_vla` / `load_vla`: its JSON, the architecture,
the normalization buffers and the weights in one file).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from demofactory.train.policy import ACTION_DIM, NormalizedPolicy, mlp
from tokenizers import Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import WordLevel
from tokenizers.processors import TemplateProcessing
from tokenizers.trainers import WordLevelTrainer
from torch import nn
from torch.nn import functional as F
from transformers import BertConfig, BertModel

PAD, UNK, CLS = "[PAD]", "[UNK]", "[CLS]"
MAX_TOKENS = 24  # "raise the red block off the table" is 8 words; room for longer phrasings


# ---------------------------------------------------------------- tokenizer


def fit_tokenizer(texts: Sequence[str], max_tokens: int = MAX_TOKENS) -> Tokenizer:
    """A word-level tokenizer over `texts` (lower-cased, split on whitespace and punctuation),
    prefixing [CLS] and padding every encoding to `max_tokens`.

    Word level, not BPE: the instructions are a few templates over a small closed vocabulary,
    and an unseen word should become [UNK], not pieces of other words.
    """
    tokenizer = Tokenizer(WordLevel(unk_token=UNK))
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents()]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(
        list(texts), WordLevelTrainer(special_tokens=[PAD, UNK, CLS], min_frequency=1)
    )
    tokenizer.post_processor = TemplateProcessing(
        single=f"{CLS} $A", special_tokens=[(CLS, tokenizer.token_to_id(CLS))]
    )
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id(PAD), pad_token=PAD, length=max_tokens)
    tokenizer.enable_truncation(max_tokens)
    return tokenizer


def encode_texts(tokenizer: Tokenizer, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """texts -> token ids [B, L] int64 and attention mask [B, L] int64 (1 on real tokens)."""
    encodings = tokenizer.encode_batch(list(texts))
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    return ids, mask


# ---------------------------------------------------------------- model


@dataclass(frozen=True)
class VlaArch:
    """What it takes to rebuild a VlaPolicy (saved with its weights)."""

    obs_dim: int  # proprio (+ time): no object pose
    horizon: int  # H: actions per chunk
    cameras: int  # C: frames per step, each with its own encoder
    image_shape: tuple[int, int, int]  # (3, h, w) of every camera
    vocab_size: int
    max_tokens: int = MAX_TOKENS
    text_dim: int = 64  # E: BERT hidden size
    text_layers: int = 2
    channels: int = 32  # conv width
    keypoints: int = 16  # K: spatial-softmax maps per camera
    fine_keypoints: int = 0  # K_f: more maps read at conv1's resolution (h/2 x w/2); 0: none
    hidden: int = 256  # MLP head width
    layers: int = 3  # MLP head hidden layers
    aux_dim: int = 0  # 3 x objects: the auxiliary position head's outputs (0: no such head)


def spatial_softmax(maps: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """Feature maps [B, K, h, w] -> expected (x, y) of each map's softmax [B, 2K], in [-1, 1]."""
    b, k, h, w = maps.shape
    weights = torch.softmax(maps.reshape(b, k, h * w) / temperature, dim=-1).view(b, k, h, w)
    ys = torch.linspace(-1.0, 1.0, h, device=maps.device)
    xs = torch.linspace(-1.0, 1.0, w, device=maps.device)
    x = (weights.sum(dim=2) * xs).sum(dim=-1)
    y = (weights.sum(dim=3) * ys).sum(dim=-1)
    return torch.cat([x, y], dim=-1)


class FilmEncoder(nn.Module):
    """One camera's frames [B, 3, h, w] in [0, 1], modulated by the text [B, E]
    -> [B, 2 (K + K_f)]: the coarse keypoints, then the fine ones.

    The coarse maps are h/4 x w/4: a cell of an 84 px agentview frame is ~4 cm of table, and a
    sharp softmax peak reads out its cell's centre. The fine maps (`fine_keypoints`) read
    conv1's h/2 x w/2 features, FiLM-modulated too: a small object's colour is a conv1-level
    feature, and half the cell size halves that quantization for a 1x1 conv's cost.
    """

    def __init__(self, text_dim: int, channels: int, keypoints: int, fine_keypoints: int = 0):
        super().__init__()
        half = channels // 2
        self.conv1 = nn.Conv2d(3, half, 5, stride=2, padding=2)
        self.conv2 = nn.Conv2d(half, channels, 3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(channels, channels, 3, stride=1, padding=1)
        self.film = nn.Linear(text_dim, 4 * channels)  # (gamma, beta) after conv2 and conv3
        nn.init.zeros_(self.film.weight)  # start as the plain CNN: FiLM is the identity
        nn.init.zeros_(self.film.bias)
        self.points = nn.Conv2d(channels, keypoints, 1)
        self.temperature = nn.Parameter(torch.ones(1))
        self.fine = None
        if fine_keypoints:
            self.fine_film = nn.Linear(text_dim, 2 * half)  # (gamma, beta) after conv1
            nn.init.zeros_(self.fine_film.weight)
            nn.init.zeros_(self.fine_film.bias)
            self.fine = nn.Conv2d(half, fine_keypoints, 1)
            # A sharp start: a few-pixel object must stand out of a plain table's softmax
            # (at 1.0 the maps' expectations sat near the frame's centre for 2,000 steps).
            self.fine_temperature = nn.Parameter(torch.full((1,), 0.1))

    def forward(self, image: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        g2, b2, g3, b3 = (p[..., None, None] for p in self.film(text).chunk(4, dim=-1))
        x1 = F.relu(self.conv1(image))
        # No normalization layer before FiLM: GroupNorm doubled the encoder's CPU time (measured).
        x = F.relu(self.conv2(x1) * (1 + g2) + b2)
        x = F.relu(self.conv3(x) * (1 + g3) + b3)
        coarse = spatial_softmax(self.points(x), self.temperature)
        if self.fine is None:
            return coarse
        g1, b1 = (p[..., None, None] for p in self.fine_film(text).chunk(2, dim=-1))
        fine = self.fine(F.relu(x1 * (1 + g1) + b1))
        return torch.cat([coarse, spatial_softmax(fine, self.fine_temperature)], dim=-1)


class VlaPolicy(NormalizedPolicy):
    """Instruction ids [B, L] + frames [B, C, 3, h, w] + observation [B, D] -> actions [B, H, A].

    Like `ChunkPolicy`: normalization buffers, `forward` in normalized units. `act` takes a raw
    observation and uint8 frames and needs `text` (from `embed`, computed once per rollout:
    the instruction does not change within one).
    """

    def __init__(self, arch: VlaArch):
        super().__init__()
        self.arch = arch
        self.horizon, self.action_dim = arch.horizon, ACTION_DIM
        self.text = BertModel(
            BertConfig(
                vocab_size=arch.vocab_size,
                hidden_size=arch.text_dim,
                num_hidden_layers=arch.text_layers,
                num_attention_heads=2,
                intermediate_size=2 * arch.text_dim,
                max_position_embeddings=arch.max_tokens,
                type_vocab_size=1,
                pad_token_id=0,
                hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
            ),
            add_pooling_layer=False,
        )
        self.vision = nn.ModuleList(
            FilmEncoder(arch.text_dim, arch.channels, arch.keypoints, arch.fine_keypoints)
            for _ in range(arch.cameras)
        )
        points = arch.cameras * 2 * (arch.keypoints + arch.fine_keypoints)
        width = arch.obs_dim + points + arch.text_dim
        self.head = mlp([width] + [arch.hidden] * arch.layers, arch.horizon * ACTION_DIM)
        # Training only: the objects' positions (normalized) as an affine map of the keypoints.
        # Affine on purpose: it pushes keypoints to sit on the objects, as in Levine et al.'s
        # pose pretraining of their spatial-softmax encoder; rollouts never call it.
        self.aux = nn.Linear(points, arch.aux_dim) if arch.aux_dim else None
        if arch.aux_dim:  # the targets' normalization, saved with the weights
            self.register_buffer("aux_mean", torch.zeros(arch.aux_dim))
            self.register_buffer("aux_std", torch.ones(arch.aux_dim))
        self.register_normalization(arch.obs_dim, ACTION_DIM)

    def embed(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Token ids [B, L] and mask [B, L] -> text features [B, E]: the mean over real tokens."""
        hidden = self.text(input_ids=ids, attention_mask=mask).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)

    def forward(
        self, obs_normalized: torch.Tensor, images: torch.Tensor, text: torch.Tensor
    ) -> torch.Tensor:
        """obs [B, D] normalized, images [B, C, 3, h, w] in [0, 1], text [B, E] (from `embed`)."""
        return self.forward_with_points(obs_normalized, images, text)[0]

    def forward_with_points(
        self, obs_normalized: torch.Tensor, images: torch.Tensor, text: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward`'s chunk [B, H, A] and the keypoints of every camera [B, C * 2(K + K_f)]."""
        points = torch.cat([enc(images[:, i], text) for i, enc in enumerate(self.vision)], dim=-1)
        x = torch.cat([obs_normalized, points, text], dim=-1)
        return self.head(x).view(-1, self.horizon, self.action_dim), points

    def locate(self, points: torch.Tensor) -> torch.Tensor:
        """Keypoints [B, C * 2(K + K_f)] -> the auxiliary head's object positions [B, aux_dim]
        in metres (world frame): what the encoder knows of where the objects are."""
        if self.aux is None:
            raise ValueError("this policy was trained without the auxiliary loss (aux_dim 0)")
        return self.aux(points) * self.aux_std + self.aux_mean

    @torch.no_grad()
    def act(self, obs: np.ndarray, images: np.ndarray, text: torch.Tensor) -> np.ndarray:
        """One raw observation [D], frames [C, h, w, 3] uint8 and text [1, E] -> raw actions
        [H, A] float64 (not yet clipped or thresholded)."""
        x = self.normalize_obs(torch.as_tensor(obs, dtype=torch.float32)[None])
        pixels = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))[None]
        chunk = self.forward(x, pixels.float() / 255.0, text)[0] * self.act_std + self.act_mean
        return chunk.double().numpy()


class InstructedPolicy:
    """A VlaPolicy bound to one instruction: the `act(obs, frames)` that rollouts call."""

    def __init__(self, policy: VlaPolicy, tokenizer: Tokenizer, instruction: str):
        ids, mask = encode_texts(tokenizer, [instruction])
        with torch.no_grad():
            self.text = policy.embed(torch.from_numpy(ids), torch.from_numpy(mask))
        self.policy, self.instruction = policy, instruction

    def act(self, obs: np.ndarray, images: np.ndarray) -> np.ndarray:
        return self.policy.act(obs, images, self.text)


# ---------------------------------------------------------------- save / load


def save_vla(
    path: Path, policy: VlaPolicy, tokenizer: Tokenizer, config: dict, layout: dict
) -> None:
    """One file: weights, architecture, tokenizer JSON, the train-eval config and the layout."""
    torch.save(
        {
            "kind": "vla",
            "state_dict": policy.state_dict(),
            "arch": asdict(policy.arch),
            "tokenizer": tokenizer.to_str(),
            "config": config,
            "layout": layout,
        },
        path,
    )


def load_vla(path: Path) -> tuple[VlaPolicy, Tokenizer, dict]:
    """The policy (in eval mode), its tokenizer and the whole saved record."""
    saved = torch.load(path, weights_only=False)
    arch = saved["arch"]
    policy = VlaPolicy(VlaArch(**{**arch, "image_shape": tuple(arch["image_shape"])}))
    policy.load_state_dict(saved["state_dict"])
    policy.eval()
    return policy, Tokenizer.from_str(saved["tokenizer"]), saved
