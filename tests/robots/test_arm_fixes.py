"""The arm-frame repair (demofactory.robots.arm_fixes): robosuite's IIWA carries its controller
frame on the
link its first joint turns; the factory builds it on the fixed base, and leaves other arms be."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from demofactory.robots import arm_fixes
from demofactory.robots.support import supported_robots
from demofactory.simulation.scene import Scene
from demofactory.specs.spec import load_spec

from tests.conftest import SPECS


def _site_chain_joints(robot_model, site_name: str) -> list[str]:
    """Names of the joints on the bodies from the model's root down to the site's body."""
    chain = arm_fixes._chain(robot_model.worldbody, _site(robot_model, site_name))
    return [j.get("name") for body in chain[1:-1] for j in body if j.tag == "joint"]


def _site(robot_model, site_name: str):
    from robosuite.utils.mjcf_utils import find_elements

    return find_elements(robot_model.worldbody, "site", {"name": site_name}, return_first=True)


def test_iiwa_frame_moves_to_its_fixed_base_and_no_other_arm_changes():
    import robosuite.models.robots as robot_models

    arm_fixes.install()
    for robot in supported_robots():
        original = getattr(robot_models, robot)()  # robosuite's own class, unrepaired
        site = f"{original.naming_prefix}right_center"
        before = dict(_site(original, site).attrib)
        joints_before = _site_chain_joints(original, site)
        moved = arm_fixes.center_on_fixed_link(original)
        if robot == "IIWA":
            assert joints_before == ["robot0_joint_1"] and moved == [site]
            host = arm_fixes._chain(original.worldbody, _site(original, site))[-2]
            assert host.get("name") == "robot0_fixed_base_link"
            # link_1 sits 0.15 above the fixed base, unturned: the site's pose at zero joints
            np.testing.assert_allclose(_floats(_site(original, site).get("pos")), [0, 0, 0.15])
        else:
            assert moved == [] and dict(_site(original, site).attrib) == before, robot
        assert _site_chain_joints(original, site) == [], robot  # on a body nothing moves
        assert arm_fixes.center_on_fixed_link(original) == []  # idempotent


def _floats(text: str) -> np.ndarray:
    return np.array(text.split(), dtype=np.float64)


def test_install_keeps_robosuites_names_and_classes():
    import robosuite.models.robots as robot_models
    from robosuite.models.robots.robot_model import REGISTERED_ROBOTS

    names = set(REGISTERED_ROBOTS)
    arm_fixes.install()
    arm_fixes.install()
    assert set(REGISTERED_ROBOTS) == names  # no new robot name (robosuite's metaclass registers)
    iiwa = REGISTERED_ROBOTS["IIWA"]
    assert iiwa.__name__ == "IIWA" and issubclass(iiwa, robot_models.IIWA)
    assert REGISTERED_ROBOTS["GR1"] is robot_models.GR1  # a legged robot's frame rides its torso


@pytest.mark.sim
def test_iiwa_frame_stays_put_as_its_first_joint_turns_and_it_steps_fast():
    scene = Scene(load_spec(SPECS / "lift_lowdim.yaml", {"task.robot": "IIWA"}))
    assert scene.fast_control, scene.fast_control_note  # robosuite's own model: off by 1e-1
    model, data = scene.model, scene.data
    site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, "robot0_right_center")
    link = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "robot0_link_1")
    scene.reset()
    joint = model.jnt_qposadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, "robot0_joint_1")]
    assert data.qpos[joint] == 0.0  # the home pose: the frame where robosuite's model had it
    np.testing.assert_allclose(data.site_xpos[site], data.xpos[link], atol=1e-12)
    np.testing.assert_allclose(data.site_xmat[site], data.xmat[link], atol=1e-12)
    home = data.site_xmat[site].copy()
    for _ in range(10):
        scene.env.step(np.array([0.0, 1.0, 0.0, 0.0, 0.0, 0.5, -1.0]))  # sideways, and a yaw
    assert abs(data.qpos[joint]) > 0.02  # the first joint turned
    np.testing.assert_array_equal(data.site_xmat[site], home)  # the controller's frame did not


@pytest.mark.sim
def test_robosuites_own_iiwa_falls_back_to_env_step_and_says_why(monkeypatch):
    # Without the repair the fast loop's check against env.step (demofactory.simulation.fast_step)
    # catches it.
    import robosuite.models.robots as robot_models
    from robosuite.models.robots.robot_model import REGISTERED_ROBOTS

    monkeypatch.setattr(arm_fixes, "install", lambda: None)
    monkeypatch.setitem(REGISTERED_ROBOTS, "IIWA", robot_models.IIWA)
    scene = Scene(load_spec(SPECS / "lift_lowdim.yaml", {"task.robot": "IIWA"}))
    assert not scene.fast_control
    assert "differ from robosuite's env.step" in scene.fast_control_note
