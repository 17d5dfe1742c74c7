"""`factory collect` on two arms: a scripted robosuite Device (no display) lifts TwoArmLift's pot
one arm at a time, switching the active robot as a person at one keyboard does (`=`); the demo
file it writes reads back as a two-arm seed demo, and `factory annotate` cuts it."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest
from demofactory.specs.spec import load_spec

from tests.conftest import SPECS, collect_one, device_reading, write_spec

os.environ.setdefault("PYNPUT_BACKEND", "dummy")  # robosuite.devices imports pynput: no display

# One TwoArmLift env for the collection (~5 s on 2 cores), another to restore its states.
pytestmark = [pytest.mark.sim, pytest.mark.slow]

SPEC = SPECS / "two_arm_lift.yaml"
HORIZON = 500  # a person lifts one side at a time: longer than the scripted seeds' 145 steps
LIFT_STEP = 0.03  # metres a hand rises before the other one's turn


def _pose(pos, rot) -> np.ndarray:
    out = np.eye(4)
    out[:3, :3], out[:3, 3] = rot, pos
    return out


def _two_arm_driver(env):
    """A robosuite Device that drives the right hand over handle 0, down and closed, switches to
    the left robot (robosuite's `=`: `active_robot`), does the same on handle 1, then raises the
    hands in turns, `LIFT_STEP` each, switching every time. Inputs are the normalized deltas a
    keyboard's key presses would give (`pose_to_delta_action`, closed loop), the rotation
    unmixed from robosuite's raw roll/pitch/yaw order."""
    from demofactory.generators.poses import pose_to_delta_action
    from demofactory.seeds.script import TOP_DOWN, nearer_half_turn, rpy_to_mat, yaw_of
    from robosuite.devices.device import Device

    class Driver(Device):
        def start_control(self):
            self._reset_internal_state()
            self.t, self.phase, self.phase_t, self.target = 0, 0, 0, None
            self.active_at = []  # the active robot at each step

        def _eef(self, robot: int) -> np.ndarray:
            data, r = self.env.sim.data, self.env.robots[robot]
            site = r.eef_site_id["right"]
            return _pose(data.site_xpos[site], data.site_xmat[site].reshape(3, 3))

        def _plan(self):
            """(robot, target or 'close' or 'switch', max steps) per phase."""
            env = self.env
            pot = env.sim.data.body_xmat[env.sim.model.body_name2id("pot_root")].reshape(3, 3)
            rot = nearer_half_turn(rpy_to_mat((0, 0, yaw_of(pot))) @ TOP_DOWN)
            plan = []
            for robot, handle in ((0, env._handle0_xpos), (1, env._handle1_xpos)):
                handle = np.array(handle)
                plan += [
                    (robot, _pose(handle + [0, 0, 0.12], rot), 80),
                    (robot, _pose(handle, rot), 50),
                    (robot, "close", 15),
                    (robot, "switch", 1),
                ]
            for k in range(12):
                plan += [(k % 2, "up", 30), (k % 2, "switch", 1)]
            return plan

        def get_controller_state(self):
            if self.t == 0:
                self.phases = self._plan()  # after the reset: where the pot is now
            plan = self.phases
            self.active_at.append(self.active_robot)
            grasp = int(self.grasp)  # input2action took the robot before this call: its grasp
            self.t += 1
            dpos, drot = np.zeros(3), np.zeros(3)
            if self.phase < len(plan):
                robot, what, limit = plan[self.phase]
                kind = what if isinstance(what, str) else "move"
                self.phase_t += 1
                done = self.phase_t >= limit
                if kind == "switch":  # robosuite's keyboard: "=" switches the active robot
                    self.active_robot = (self.active_robot + 1) % self.num_robots
                    done = True
                elif kind == "close":
                    self.grasp_states[self.active_robot][0] = True
                else:
                    if self.target is None:
                        if kind == "up":
                            self.target = self._eef(robot)
                            self.target[2, 3] += LIFT_STEP
                        else:
                            self.target = what
                    controller = self.env.robots[robot].part_controllers["right"]
                    scale = np.asarray(controller.output_max) / np.asarray(controller.input_max)
                    frame = controller.origin_ori
                    now = self._eef(robot)
                    delta = pose_to_delta_action(self.target, now, scale[:3], scale[3:6], frame)
                    dpos, drot = delta[:3], delta[3:6]
                    done = done or np.linalg.norm(self.target[:3, 3] - now[:3, 3]) < 0.004
                if done:
                    self.phase, self.phase_t, self.target = self.phase + 1, 0, None
            return device_reading(dpos, drot, grasp)

        def _postprocess_device_outputs(self, dpos, drotation):
            return dpos, drotation

    return Driver(env)


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """(spec, demo file, device) of one two-arm demo collected through `collect`."""
    spec = load_spec(SPEC, {"task.horizon": HORIZON})
    out = tmp_path_factory.mktemp("collect2") / "demo.hdf5"
    return spec, out, collect_one(spec, out, _two_arm_driver)


def test_two_arm_demo_is_robosuite_hdf5_naming_both_robots(collected):
    spec, out, device = collected
    with h5py.File(out) as f:
        info = json.loads(f["data"].attrs["env_info"])
        actions = f["data/demo_1/actions"][()]
        states = f["data/demo_1/states"][()]
        assert f["data"].attrs["env"] == "TwoArmLift"
        assert "model_file" in f["data/demo_1"].attrs
    assert info["robots"] == ["Panda", "Panda"] and info["env_configuration"] == "parallel"
    assert actions.shape == (len(states), 14) and len(actions) < HORIZON
    assert len(device.active_at) == len(actions)  # one device reading a recorded step

    from demofactory.seeds.demos import load_seed_demos

    (demo,) = load_seed_demos(out, arms=2)
    assert demo.robot == "Panda" and demo.actions.shape == actions.shape


def test_the_inactive_arm_holds_still(collected):
    spec, out, device = collected
    with h5py.File(out) as f:
        actions = f["data/demo_1/actions"][()]
    active = np.array(device.active_at)
    assert set(active) == {0, 1} and (np.diff(active) != 0).sum() >= 10  # switched, in turns
    for robot in (0, 1):
        idle = actions[active != robot, 7 * robot : 7 * robot + 7]
        assert np.array_equal(idle[:, :6], np.zeros_like(idle[:, :6]))  # no arm motion
        driven = actions[active == robot, 7 * robot : 7 * robot + 6]
        assert np.abs(driven).max() > 0.5  # and it moved when driven
    # the left hand holds its gripper command open until driven; the right one, closed on its
    # handle, holds closed while the left one is driven
    first_left = int(np.argmax(active == 1))
    assert np.all(actions[:first_left, 13] == -1.0)
    assert np.all(actions[active == 1, 6] == 1.0)

    from demofactory.simulation.bimanual import TwoArmScene

    with h5py.File(out) as f:
        states = f["data/demo_1/states"][()]
    scene = TwoArmScene(spec)  # the left hand, not yet driven, where it started
    scene.set_state(states[0])
    left_at_start = scene.eef_pose_of("left")[:3, 3]
    scene.set_state(states[first_left])
    assert np.linalg.norm(scene.eef_pose_of("left")[:3, 3] - left_at_start) < 0.01


def test_recorded_states_restore_in_generations_scene(collected):
    """The states restore in the scene generation builds (not the collection env): the pot on
    the table and both hands open at the start, lifted in both hands at the end."""
    from demofactory.simulation.bimanual import TwoArmScene

    spec, out, _ = collected
    with h5py.File(out) as f:
        states = f["data/demo_1/states"][()]
    scene = TwoArmScene(spec)
    assert states.shape[1] == scene.state_size
    scene.set_state(states[0])
    assert not scene.success()
    assert not any(scene.holds_for(arm, "grasped(pot)") for arm in ("right", "left"))
    scene.set_state(states[-1])
    assert scene.success()
    scene.note_grippers(np.tile([0, 0, 0, 0, 0, 0, 1.0], 2))
    assert all(scene.holds_for(arm, "grasped(pot)") for arm in ("right", "left"))


def test_annotate_cuts_the_collected_demo(collected, tmp_path, capsys):
    from demofactory.cli.main import main

    _, out, _ = collected
    path = write_spec(tmp_path / "two_arm_lift.yaml", "two_arm_lift.yaml", seed_demos=[str(out)])
    assert main(["annotate", str(path)]) == 0
    text = capsys.readouterr().out
    assert "right subtask 0 right_grasp" in text and "left  subtask 3 left_lift" in text
