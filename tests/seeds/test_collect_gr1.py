"""`factory collect` on one robot with two arms and dexterous hands (GR1ArmsOnly): a scripted
robosuite Device (no display) drives the right arm and hand to put the can in the bowl while the
left arm, not driven, holds; the demo is recorded in the dataset's action order (per arm: arm,
then hand), reads back as a single-robot two-arm seed demo, and `factory annotate` cuts it."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest

from tests.conftest import SPECS, collect_one, device_reading, write_spec

os.environ.setdefault("PYNPUT_BACKEND", "dummy")  # robosuite.devices imports pynput: no display

# One GR-1 env for the collection (~3 s), ~250 control steps through env.step (~4 s).
pytestmark = [pytest.mark.sim, pytest.mark.slow]

SPEC = SPECS / "gr1_pick_place.yaml"


def _pose(pos, rot) -> np.ndarray:
    out = np.eye(4)
    out[:3, :3], out[:3, 3] = rot, pos
    return out


def _gr1_driver(env):
    """A robosuite Device driving GR-1's right arm (robosuite's `active_arm`) through the
    spec's scripted waypoints: beside the can, close the hand (the device's grasp toggle), lift,
    over the bowl, down, open, back. Inputs are the normalized deltas a key press gives
    (`pose_to_delta_action`, closed loop), the hand kept as it started."""
    from demofactory.generators.poses import pose_to_delta_action
    from robosuite.devices.device import Device

    class Driver(Device):
        def start_control(self):
            self._reset_internal_state()
            self.t, self.phase, self.phase_t, self.target = 0, 0, 0, None
            self.arms_at = []  # the active arm at each step

        def _eef(self) -> np.ndarray:
            data, robot = self.env.sim.data, self.env.robots[0]
            site = robot.eef_site_id["right"]
            return _pose(data.site_xpos[site], data.site_xmat[site].reshape(3, 3))

        def _plan(self):
            env, model = self.env, self.env.sim.model
            can = np.array(env.sim.data.body_xpos[model.body_name2id(env.objects["can"].root_body)])
            bowl = np.array(
                env.sim.data.body_xpos[model.body_name2id(env.objects["bowl"].root_body)]
            )
            rot = self._eef()[:3, :3].copy()
            side = np.array([-0.08, -0.058, 0.0])
            return [
                (_pose(can + side + [-0.08, 0, 0.01], rot), 60),
                (_pose(can + side + [0, 0, 0.01], rot), 40),
                ("close", 25),
                (_pose(can + side + [0, 0, 0.09], rot), 30),
                (_pose(bowl + side + [0, 0, 0.1], rot), 60),
                (_pose(bowl + side + [0, 0, 0.065], rot), 20),
                ("open", 20),
                (_pose(bowl + side + [-0.08, 0, 0.095], rot), 40),
            ]

        def get_controller_state(self):
            if self.t == 0:
                self.phases = self._plan()  # after the reset: where the can is now
            self.arms_at.append(self.active_arm)
            grasp = int(self.grasp)  # input2action took the arm before this call: its grasp
            self.t += 1
            dpos, drot = np.zeros(3), np.zeros(3)
            if self.phase < len(self.phases):
                what, limit = self.phases[self.phase]
                self.phase_t += 1
                done = self.phase_t >= limit
                if isinstance(what, str):  # robosuite's keyboard: space toggles the grasp
                    self.grasp_states[self.active_robot][self.active_arm_index] = what == "close"
                else:
                    controller = self.env.robots[0].part_controllers["right"]
                    scale = np.asarray(controller.output_max) / np.asarray(controller.input_max)
                    now = self._eef()
                    delta = pose_to_delta_action(
                        what, now, scale[:3], scale[3:6], controller.origin_ori
                    )
                    dpos, drot = delta[:3], delta[3:6]
                    done = done or np.linalg.norm(what[:3, 3] - now[:3, 3]) < 0.003
                if done:
                    self.phase, self.phase_t = self.phase + 1, 0
            return device_reading(dpos, drot, grasp)

        def _postprocess_device_outputs(self, dpos, drotation):
            return dpos, drotation

    return Driver(env)


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """(spec, demo file, device) of one GR-1 demo collected through `collect`."""
    from demofactory.specs.spec import load_spec

    spec = load_spec(SPEC, {"cameras": []})
    out = tmp_path_factory.mktemp("collect_gr1") / "demo.hdf5"
    return spec, out, collect_one(spec, out, _gr1_driver)


def test_the_demo_is_recorded_per_arm_and_the_idle_arm_holds(collected):
    from demofactory.seeds.demos import load_seed_demos

    spec, out, device = collected
    with h5py.File(out) as f:
        info = json.loads(f["data"].attrs["env_info"])
        actions = f["data/demo_1/actions"][()]
    assert info["robots"] == ["GR1ArmsOnly"] and info["env_configuration"] == "single-robot"
    assert actions.shape[1] == 24 and set(device.arms_at) == {"right"}
    right_arm, right_hand = actions[:, 0:6], actions[:, 6:12]
    left_arm, left_hand = actions[:, 12:18], actions[:, 18:24]
    assert np.abs(right_arm).max() > 0.5  # driven
    assert not left_arm.any()  # the left arm never moved
    # the hands: robosuite's device sends a hand's grasp_qpos; the left one held open
    open_, closed = (np.asarray(g) for g in ([-1.5, -1.5, -1.5, -1.5, -3, 3], [1.5] * 4 + [3, 3]))
    assert (left_hand == open_).all()
    assert (right_hand == closed).all(axis=1).any() and (right_hand[0] == open_).all()
    (demo,) = load_seed_demos(out, arms=2, robots=1)
    assert demo.robot == "GR1ArmsOnly"


def test_annotate_cuts_the_collected_demo(collected, tmp_path, capsys):
    from demofactory.cli.main import main

    _, out, _ = collected
    path = write_spec(tmp_path / "gr1.yaml", "gr1_pick_place.yaml", seed_demos=[str(out)])
    assert main(["annotate", str(path)]) == 0
    text = capsys.readouterr().out
    assert "right subtask 0 grasp" in text and "all(grasped(can), lifted(can, 0.03)) holds" in text
    assert "left  subtask 2 rest" in text
