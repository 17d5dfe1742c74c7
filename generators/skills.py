"""Skill windows: the contact-rich part of a demo's segment, and the person's pauses inside it.

A person's segment is two motions: a free-space approach (detours, hesitations, a hand that
rises 40 cm before it reaches) and a skill (grasp, insert, press, release) near the reference
object. Replayed whole and re-targeted, the approach sweeps through whatever now stands in its
way; SkillMimicGen (Garrett et al., 2024) replays only the skill and plans the approach. Its
boundaries are marked by hand there; here they are found from the demo:

    events   = onsets of contact between the hand (or what it holds) and the reference object,
               and changes of the gripper command, inside the segment
    anchor   = the last event (a regrasp: the second grasp), else the segment's last step
    window   = [the step after the hand was last `margin` m away from its pose at the anchor
                (positions in the reference object's frame), segment end)

`paused_steps` marks steps where nothing moved (hand, fingers, objects) and the command did not
change: the generator drops all but the first `keep` of each such run from a replayed window.
Pure numpy: the annotation (`demofactory.seeds.annotate`) supplies the per-step arrays.
"""

from __future__ import annotations

import numpy as np

CONTACT_GAP = 5  # steps: contact broken for fewer steps than this is one contact (a slip)


def relative_positions(eef_poses: np.ndarray, object_poses: np.ndarray) -> np.ndarray:
    """[T, 3] hand positions in the object's frame at each step (eef, object: [T, 4, 4])."""
    offset = eef_poses[:, :3, 3] - object_poses[:, :3, 3]
    return np.einsum("tji,tj->ti", object_poses[:, :3, :3], offset)


def event_steps(contact: np.ndarray, gripper: np.ndarray, start: int, end: int) -> np.ndarray:
    """Steps in [start, end) where a contact starts (after a gap of CONTACT_GAP steps or more,
    or at `start`) or the gripper command changes sign."""
    touch = np.asarray(contact[start:end], dtype=bool)
    onsets = []
    gap = CONTACT_GAP
    for i, now in enumerate(touch):
        if now and gap >= CONTACT_GAP:
            onsets.append(start + i)
        gap = 0 if now else gap + 1
    sign = np.sign(np.asarray(gripper[start:end], dtype=np.float64))
    changes = start + 1 + np.flatnonzero(sign[1:] != sign[:-1])
    return np.unique(np.concatenate([np.array(onsets, dtype=int), changes.astype(int)]))


def skill_start(
    rel: np.ndarray,
    contact: np.ndarray,
    gripper: np.ndarray,
    start: int,
    end: int,
    margin: float,
) -> int:
    """Where the skill window of the segment [start, end) opens (see the module docstring).

    rel: [T, 3] hand positions in the reference object's frame (`relative_positions`).
    contact: [T] bool, the hand or a held object touches the reference object.
    gripper: [T] the gripper command.
    """
    if end - start < 2:
        return start
    events = event_steps(contact, gripper, start, end)
    anchor = int(events[-1]) if events.size else end - 1
    away = np.linalg.norm(rel[start : anchor + 1] - rel[anchor], axis=1) > margin
    if not away.any():
        return start
    return min(start + int(np.flatnonzero(away)[-1]) + 1, end - 1)


def paused_steps(
    eef_poses: np.ndarray,
    gripper: np.ndarray,
    fingers: np.ndarray,
    objects: np.ndarray,
    keep: int = 2,
    move: float = 1.5e-3,
    turn: float = 0.01,
    finger_move: float = 2e-4,
    object_move: float = 5e-4,
) -> np.ndarray:
    """[T] bool: steps to drop as a pause (all but the first `keep` of each still run).

    A step is still when, from it to the next, the hand moves under `move` m and turns under
    `turn` rad, the fingers move under `finger_move` m, no object moves `object_move` m, and
    the gripper command keeps its sign. eef_poses: [T, 4, 4]; gripper: [T]; fingers: [T, F]
    finger joint positions; objects: [T, K, 3] object positions.
    """
    count = len(eef_poses)
    still = np.zeros(count, dtype=bool)
    if count < 2:
        return still
    pos = eef_poses[:, :3, 3]
    moved = np.linalg.norm(np.diff(pos, axis=0), axis=1) < move
    rot = np.einsum("tji,tjk->tik", eef_poses[:-1, :3, :3], eef_poses[1:, :3, :3])
    angle = np.arccos(np.clip((np.trace(rot, axis1=1, axis2=2) - 1) / 2, -1.0, 1.0)) < turn
    finger = np.abs(np.diff(fingers, axis=0)).max(axis=1, initial=0.0) < finger_move
    obj = np.linalg.norm(np.diff(objects, axis=0), axis=2).max(axis=1, initial=0.0) < object_move
    sign = np.sign(gripper)
    same = sign[1:] == sign[:-1]
    still[:-1] = moved & angle & finger & obj & same
    drop = np.zeros(count, dtype=bool)
    run = 0
    for t in range(count):
        run = run + 1 if still[t] else 0
        drop[t] = run > keep
    return drop


def last_sign_change(gripper: np.ndarray, start: int, stop: int) -> int | None:
    """The last step in (start, stop] whose gripper command's sign differs from the step
    before (the person closing the hand for the grasp), or None."""
    sign = np.sign(np.asarray(gripper[start : stop + 1], dtype=np.float64))
    changes = np.flatnonzero(sign[1:] != sign[:-1])
    return start + 1 + int(changes[-1]) if changes.size else None


def straight_approach(pose: np.ndarray, distance: float, speed: float) -> np.ndarray:
    """[K, 4, 4] poses along the hand's own z axis (palm to fingertips) from `distance` m short
    of `pose` up to just before it, `speed` m a step: a grasp approached the way a gripper
    is made to, not the person's slide into it. `pose` itself is not included."""
    steps = max(1, int(np.ceil(distance / speed)))
    poses = np.repeat(np.asarray(pose, dtype=np.float64)[None], steps, axis=0)
    back = np.linspace(distance, distance / steps, steps)
    poses[:, :3, 3] = pose[:3, 3] - back[:, None] * pose[:3, 2]
    return poses
