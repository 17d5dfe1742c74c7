"""`factory train-eval` on a mixed-robot dataset (demofactory.train.mixed): each robot's
observations normalized with its own statistics, a robot's live observation padded and tagged as
its stored steps were. The run on a real Panda + Sawyer shard is in
tests/robots/test_mixed_robots.py, which builds that shard once for its module."""

from __future__ import annotations

import numpy as np
import torch
from demofactory.train.mixed import EmbodimentPolicy, OnRobot


def _policy() -> EmbodimentPolicy:
    torch.manual_seed(0)
    policy = EmbodimentPolicy(obs_dim=4, robots=2, horizon=3, hidden=8, layers=1)
    policy.set_robot_normalization(0, np.array([1.0, 2, 3, 4]), np.array([1.0, 1, 2, 2]))
    policy.set_robot_normalization(1, np.array([-1.0, 0, 0, 0]), np.array([4.0, 4, 4, 4]))
    return policy


def test_each_robots_observation_is_normalized_with_its_own_statistics():
    policy = _policy()
    obs = torch.tensor([[3.0, 2, 7, 0, 1, 0], [3.0, 2, 7, 0, 0, 1]])
    out = policy.normalize_obs(obs).numpy()
    np.testing.assert_allclose(out[0], [2.0, 0, 2, -2, 1, 0])  # (x - mean0) / std0, by hand
    np.testing.assert_allclose(out[1], [1.0, 0.5, 1.75, 0, 0, 1])  # (x - mean1) / std1
    saved = policy.state_dict()  # the per-robot statistics travel with the weights
    assert saved["robot_obs_std"].shape == (2, 4)


def test_a_robot_in_a_rollout_sees_its_proprio_padded_and_its_one_hot():
    policy = _policy()
    # a robot whose proprio is 2 wide in a dataset padded to 3: [p0, p1, object] -> 4 + one-hot
    on_robot = OnRobot(policy, robot_id=1, own=2, width=3)
    live = np.array([0.5, -0.5, 2.0], dtype=np.float32)
    stored = np.array([0.5, -0.5, 0.0, 2.0, 0.0, 1.0], dtype=np.float32)
    np.testing.assert_allclose(on_robot.act(live), policy.act(stored))
    other = OnRobot(policy, robot_id=0, own=2, width=3).act(live)
    assert not np.allclose(other, policy.act(stored))  # the one-hot changes what it does
