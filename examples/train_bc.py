"""Behaviour cloning on a demofactory dataset: shards stream through `make_loader` into a
DataLoader.

    .venv/bin/python examples/train_bc.py out/stack --steps 500 --batch-size 64 --workers 2

A tiny policy: a small CNN over one camera image, concatenated with the
normalized state, predicts the normalized action chunk [H, A]; the loss is the
MSE over the steps that `action_mask` marks real (not padding past the episode
end). A dataset without cameras trains a state-only MLP. Prints a JSON line of
the loss every `--log-every` steps, then one JSON summary: steps, first_loss
(the first batch, before any update), last_loss (the last batch) and
samples_per_s (from the second step on: the first waits for the workers to start).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from demofactory.shards import load_dataset_info
from demofactory.shards.loader import make_loader
from torch import nn
from torch.utils.data import DataLoader


class Policy(nn.Module):
    """state [B, S] (+ image uint8 [B, 3, H, W]) -> normalized action chunk [B, horizon, A]."""

    def __init__(self, state_dim: int, action_dim: int, horizon: int, use_image: bool):
        super().__init__()
        self.chunk = (horizon, action_dim)
        self.encoder = (
            nn.Sequential(
                nn.Conv2d(3, 16, 5, stride=2, padding=2),
                nn.ReLU(),
                nn.Conv2d(16, 32, 3, stride=2, padding=1),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(4),
                nn.Flatten(),
                nn.Linear(32 * 4 * 4, 64),
                nn.ReLU(),
            )
            if use_image
            else None
        )
        features = state_dim + (64 if use_image else 0)
        self.head = nn.Sequential(
            nn.Linear(features, 256), nn.ReLU(), nn.Linear(256, horizon * action_dim)
        )

    def forward(self, state: torch.Tensor, image: torch.Tensor | None = None) -> torch.Tensor:
        if self.encoder is not None:
            state = torch.cat([self.encoder(image.float() / 255.0), state], dim=-1)
        return self.head(state).view(-1, *self.chunk)


def masked_mse(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the [B, H] chunk steps where `mask` is True."""
    per_step = ((pred - target) ** 2).mean(dim=-1)
    return (per_step * mask).sum() / mask.sum().clamp(min=1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", help="dataset directory (with manifest.json and stats.json)")
    parser.add_argument(
        "--camera", help="camera to train on; default: the first in dataset_info.json"
    )
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--horizon", type=int, default=16, help="actions per predicted chunk")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads for the policy (the workers need the other cores)",
    )
    parser.add_argument("--log-every", type=int, default=10)
    args = parser.parse_args(argv)
    for name in ("steps", "batch_size", "horizon", "threads", "log_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.workers < 0:
        parser.error(f"--workers must be >= 0 (0: load in this process), got {args.workers}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    # A tiny model gains nothing from more threads; on busy cores their hand-offs made steps
    # 20x slower.
    torch.set_num_threads(args.threads)
    cameras = [c["name"] for c in (load_dataset_info(args.dataset) or {}).get("cameras", [])]
    camera = args.camera or (cameras[0] if cameras else None)
    # Resampled: shards drawn with replacement, endlessly, so --steps is not bound to the epoch
    # size.
    dataset = make_loader(
        args.dataset,
        cameras=[camera] if camera else [],
        action_horizon=args.horizon,
        normalization="mean_std",
        shuffle_buffer=1000,
        seed=args.seed,
        resampled=True,
    )
    batches = iter(DataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers))

    first = next(batches)
    policy = Policy(
        first["state"].shape[-1], first["action_chunk"].shape[-1], args.horizon, camera is not None
    )
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr)
    losses: list[float] = []
    start = time.perf_counter()
    for step in range(args.steps):
        if step == 1:
            start = time.perf_counter()  # the first batch waited for the workers to start
        batch = first if step == 0 else next(batches)
        image = batch["images"][camera] if camera else None
        loss = masked_mse(
            policy(batch["state"], image), batch["action_chunk"], batch["action_mask"]
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step % args.log_every == 0 or step == args.steps - 1:
            print(json.dumps({"step": step, "loss": round(losses[-1], 5)}), flush=True)
    timed = (args.steps - 1) * args.batch_size
    print(
        json.dumps(
            {
                "steps": args.steps,
                "first_loss": losses[0],
                "last_loss": losses[-1],
                "samples_per_s": round(timed / (time.perf_counter() - start), 1) if timed else None,
            }
        )
    )


if __name__ == "__main__":
    main()
