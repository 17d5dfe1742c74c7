"""The warp kernels of demofactory.simulation.mjwarp (imported only with the gpu extra).

`osc_torques`: `demofactory.simulation.fast_step.osc_torques` for every world at once, a thread
a world, the same formulas and order (Cholesky solves, no inverses), in float32 like the rest of
MuJoCo Warp. Hand-written because neither robosuite nor mujoco_warp has a batched OSC; the
scratch arrays are global (one row a world) so that the arm's size is not a compile-time
constant.
"""

from __future__ import annotations

import warp as wp

NULL_KP = 10.0  # robosuite's nullspace posture gains (fast_step.osc_torques)


@wp.kernel
def gather_point(
    site_xpos: wp.array2d(dtype=wp.vec3), site: int, point: wp.array(dtype=wp.vec3)
):  # pragma: no cover - compiled
    w = wp.tid()
    point[w] = site_xpos[w, site]


@wp.func
def _put_frame(
    out: wp.array3d(dtype=float), w: int, i: int, pos: wp.vec3, rot: wp.mat33
):  # pragma: no cover - compiled
    for a in range(3):
        out[w, i, a] = pos[a]
        for b in range(3):
            out[w, i, 3 + 3 * a + b] = rot[a, b]


@wp.kernel
def gather_frames(
    xpos: wp.array2d(dtype=wp.vec3),
    xmat: wp.array2d(dtype=wp.mat33),
    site_xpos: wp.array2d(dtype=wp.vec3),
    site_xmat: wp.array2d(dtype=wp.mat33),
    bodies: wp.array(dtype=int),
    sites: wp.array(dtype=int),
    out: wp.array3d(dtype=float),
):  # pragma: no cover - compiled
    """out[w, i] = position (3) and row-major rotation (9) of the i-th frame asked for in
    world w: the bodies first, then the sites."""
    w, i = wp.tid()
    nbody = bodies.shape[0]
    if i < nbody:
        _put_frame(out, w, i, xpos[w, bodies[i]], xmat[w, bodies[i]])
    else:
        site = sites[i - nbody]
        _put_frame(out, w, i, site_xpos[w, site], site_xmat[w, site])


@wp.func
def _cholesky(a: wp.array3d(dtype=float), w: int, n: int):  # pragma: no cover - compiled
    """a[w, :n, :n] = L L^T in place (L in the lower triangle)."""
    for i in range(n):
        for j in range(i + 1):
            acc = a[w, i, j]
            for k in range(j):
                acc = acc - a[w, i, k] * a[w, j, k]
            if i == j:
                a[w, i, j] = wp.sqrt(acc)
            else:
                a[w, i, j] = acc / a[w, j, j]


@wp.func
def _solve(
    low: wp.array3d(dtype=float), w: int, x: wp.array3d(dtype=float), row: int, n: int
):  # pragma: no cover - compiled
    """x[w, row, :n] <- (L L^T)^-1 x[w, row, :n], L the lower triangle of low[w]."""
    for i in range(n):
        acc = x[w, row, i]
        for k in range(i):
            acc = acc - low[w, i, k] * x[w, row, k]
        x[w, row, i] = acc / low[w, i, i]
    for step in range(n):
        i = n - 1 - step
        acc = x[w, row, i]
        for k in range(i + 1, n):
            acc = acc - low[w, k, i] * x[w, row, k]
        x[w, row, i] = acc / low[w, i, i]


@wp.kernel
def osc_torques(
    active: wp.array(dtype=int),
    jacp: wp.array3d(dtype=float),
    jacr: wp.array3d(dtype=float),
    mass_full: wp.array3d(dtype=float),
    qvel: wp.array2d(dtype=float),
    qpos: wp.array2d(dtype=float),
    qfrc_bias: wp.array2d(dtype=float),
    site_xpos: wp.array2d(dtype=wp.vec3),
    site_xmat: wp.array2d(dtype=wp.mat33),
    site: int,
    goal_pos: wp.array(dtype=wp.vec3),
    goal_ori: wp.array(dtype=wp.mat33),
    vel_idx: wp.array(dtype=int),
    pos_idx: wp.array(dtype=int),
    kp: wp.array2d(dtype=float),
    kd: wp.array2d(dtype=float),
    initial_joint: wp.array(dtype=float),
    act_idx: wp.array(dtype=int),
    low: wp.array(dtype=float),
    high: wp.array(dtype=float),
    jac: wp.array3d(dtype=float),
    mass: wp.array3d(dtype=float),
    factor: wp.array3d(dtype=float),
    lam: wp.array3d(dtype=float),
    block: wp.array3d(dtype=float),
    vn: wp.array3d(dtype=float),
    v6: wp.array3d(dtype=float),
    ctrl: wp.array2d(dtype=float),
):  # pragma: no cover - compiled
    """OSC_POSE torques of world w, clipped to the arm's ctrlrange, into ctrl[w]. The gains
    kp, kd [K, 6]: world w's in row w % K (K = 1: every world's alike; K = N: a physics draw's
    gains per world).

    vn rows: 0 a column of M^-1 J^T, 1 the posture goal, 2 M times it, 3 M^-1 of that;
    v6 rows: 0 the wrench, 1 one 3-vector of it, 2 L J M^-1 posture."""
    w = wp.tid()
    if active[w] == 0:
        return
    g = w % kp.shape[0]
    n = vel_idx.shape[0]
    nv = qvel.shape[1]
    for a in range(n):
        va = vel_idx[a]
        for r in range(3):
            jac[w, r, a] = jacp[w, r, va]
            jac[w, 3 + r, a] = jacr[w, r, va]
        for b in range(n):
            vb = vel_idx[b]
            m = mass_full[w, wp.max(va, vb), wp.min(va, vb)]  # the lower triangle
            mass[w, a, b] = m
            factor[w, a, b] = m
    _cholesky(factor, w, n)
    for c in range(6):  # J M^-1 J^T, a column of M^-1 J^T at a time
        for a in range(n):
            vn[w, 0, a] = jac[w, c, a]
        _solve(factor, w, vn, 0, n)
        for r in range(6):
            acc = float(0.0)  # noqa: UP018 - warp: a literal cannot change in a loop
            for a in range(n):
                acc = acc + jac[w, r, a] * vn[w, 0, a]
            lam[w, r, c] = acc
    ref_pos = site_xpos[w, site]
    ref_ori = site_xmat[w, site]
    want_pos = goal_pos[w]
    want_ori = goal_ori[w]
    for r in range(3):
        vel_p = float(0.0)  # noqa: UP018 - warp: a literal cannot change in a loop
        vel_r = float(0.0)  # noqa: UP018 - warp: a literal cannot change in a loop
        for d in range(nv):
            vel_p = vel_p + jacp[w, r, d] * qvel[w, d]
            vel_r = vel_r + jacr[w, r, d] * qvel[w, d]
        k = (r + 1) % 3
        m2 = (r + 2) % 3
        err = float(0.0)  # noqa: UP018 - warp: a literal cannot change in a loop
        for c in range(3):
            err = err + 0.5 * (ref_ori[k, c] * want_ori[m2, c] - ref_ori[m2, c] * want_ori[k, c])
        v6[w, 0, r] = (want_pos[r] - ref_pos[r]) * kp[g, r] - vel_p * kd[g, r]
        v6[w, 0, 3 + r] = err * kp[g, 3 + r] - vel_r * kd[g, 3 + r]
    for half in range(2):  # uncoupled: each 3-vector through its own block of J M^-1 J^T
        o = 3 * half
        for r in range(3):
            v6[w, 1, r] = v6[w, 0, o + r]
            for c in range(3):
                block[w, r, c] = lam[w, o + r, o + c]
        _cholesky(block, w, 3)
        _solve(block, w, v6, 1, 3)
        for r in range(3):
            v6[w, 0, o + r] = v6[w, 1, r]
    damping = 2.0 * wp.sqrt(NULL_KP)
    for a in range(n):
        vn[w, 1, a] = (
            NULL_KP * (initial_joint[a] - qpos[w, pos_idx[a]]) - damping * qvel[w, vel_idx[a]]
        )
    for a in range(n):
        acc = float(0.0)  # noqa: UP018 - warp: a literal cannot change in a loop
        for b in range(n):
            acc = acc + mass[w, a, b] * vn[w, 1, b]
        vn[w, 2, a] = acc
        vn[w, 3, a] = acc
    _solve(factor, w, vn, 3, n)
    for r in range(6):
        acc = float(0.0)  # noqa: UP018 - warp: a literal cannot change in a loop
        for a in range(n):
            acc = acc + jac[w, r, a] * vn[w, 3, a]
        v6[w, 2, r] = acc
    _cholesky(lam, w, 6)
    _solve(lam, w, v6, 2, 6)
    for a in range(n):
        acc = qfrc_bias[w, vel_idx[a]] + vn[w, 2, a]
        for r in range(6):
            acc = acc + jac[w, r, a] * (v6[w, 0, r] - v6[w, 2, r])
        ctrl[w, act_idx[a]] = wp.clamp(acc, low[a], high[a])


@wp.func
def _scaled(
    actions: wp.array2d(dtype=float),
    w: int,
    first: int,
    i: int,
    scaling: wp.array2d(dtype=float),
):  # pragma: no cover - compiled
    """robosuite's `scale_action` of action component i: clip to the input range, then
    (a - input shift) * scale + output shift; scaling rows: min, max, in shift, scale, out
    shift."""
    clipped = wp.clamp(actions[w, first + i], scaling[0, i], scaling[1, i])
    return (clipped - scaling[2, i]) * scaling[3, i] + scaling[4, i]


@wp.kernel
def arm_goal(
    actions: wp.array2d(dtype=float),
    first: int,
    scaling: wp.array2d(dtype=float),
    site_xpos: wp.array2d(dtype=wp.vec3),
    site_xmat: wp.array2d(dtype=wp.mat33),
    center: int,
    ref: int,
    goal_pos: wp.array(dtype=wp.vec3),
    goal_ori: wp.array(dtype=wp.mat33),
):  # pragma: no cover - compiled
    """`fast_step.arm_goal` for every world: the OSC delta action's world-frame goal from the
    reference site's pose, in the base frame of the origin (center) site."""
    w = wp.tid()
    delta = wp.vec3(
        _scaled(actions, w, first, 0, scaling),
        _scaled(actions, w, first, 1, scaling),
        _scaled(actions, w, first, 2, scaling),
    )
    rot = wp.vec3(
        _scaled(actions, w, first, 3, scaling),
        _scaled(actions, w, first, 4, scaling),
        _scaled(actions, w, first, 5, scaling),
    )
    angle = wp.length(rot)
    turn = wp.identity(n=3, dtype=float)
    if angle != 0.0:  # robosuite: exactly zero is no turn
        axis = rot / angle
        half = wp.sin(angle / 2.0)
        turn = wp.quat_to_matrix(
            wp.quat(axis[0] * half, axis[1] * half, axis[2] * half, wp.cos(angle / 2.0))
        )
    origin_pos = site_xpos[w, center]
    origin_ori = site_xmat[w, center]
    to_base = wp.transpose(origin_ori)
    local_pos = to_base @ (site_xpos[w, ref] - origin_pos) + delta
    local_ori = turn @ (to_base @ site_xmat[w, ref])
    goal_pos[w] = origin_pos + origin_ori @ local_pos
    goal_ori[w] = origin_ori @ local_ori


@wp.kernel
def set_columns(
    ctrl: wp.array2d(dtype=float),
    columns: wp.array(dtype=int),
    values: wp.array2d(dtype=float),
    low: wp.array(dtype=float),
    high: wp.array(dtype=float),
):  # pragma: no cover - compiled
    """ctrl[w, columns[j]] = values[w, j], clipped to [low[j], high[j]] (the gripper's)."""
    w, j = wp.tid()
    ctrl[w, columns[j]] = wp.clamp(values[w, j], low[j], high[j])


# The contact and distance predicates' reads (mjwarp.WorldContacts). The distance is MuJoCo
# Warp's own convex collision (GJK, EPA when penetrating: what its narrowphase calls, and what
# mj_geomDistance computes on the CPU); its geom setup and `ccd` are in mujoco_warp's private
# modules, which the gpu extra pins (pyproject.toml), as no public function of MuJoCo Warp 3.9
# gives one pair's distance.
from mujoco_warp._src.collision_core import geom_collision_pair  # noqa: E402
from mujoco_warp._src.collision_gjk import ccd  # noqa: E402


@wp.kernel
def geom_distances(
    geom_type: wp.array(dtype=int),
    geom_dataid: wp.array2d(dtype=int),
    geom_size: wp.array2d(dtype=wp.vec3),
    mesh_vertadr: wp.array(dtype=int),
    mesh_vertnum: wp.array(dtype=int),
    mesh_graphadr: wp.array(dtype=int),
    mesh_vert: wp.array(dtype=wp.vec3),
    mesh_graph: wp.array(dtype=int),
    mesh_polynum: wp.array(dtype=int),
    mesh_polyadr: wp.array(dtype=int),
    mesh_polynormal: wp.array(dtype=wp.vec3),
    mesh_polyvertadr: wp.array(dtype=int),
    mesh_polyvertnum: wp.array(dtype=int),
    mesh_polyvert: wp.array(dtype=int),
    mesh_polymapadr: wp.array(dtype=int),
    mesh_polymapnum: wp.array(dtype=int),
    mesh_polymap: wp.array(dtype=int),
    ccd_tolerance: wp.array(dtype=float),
    iterations: int,
    geom_xpos: wp.array2d(dtype=wp.vec3),
    geom_xmat: wp.array2d(dtype=wp.mat33),
    world: int,
    pairs: wp.array(dtype=wp.vec2i),
    cutoff: float,
    epa_vert: wp.array2d(dtype=wp.vec3),
    epa_vert_index: wp.array2d(dtype=int),
    epa_face: wp.array2d(dtype=int),
    epa_pr: wp.array2d(dtype=wp.vec3),
    epa_norm2: wp.array2d(dtype=float),
    epa_horizon: wp.array2d(dtype=int),
    out: wp.array(dtype=float),
):  # pragma: no cover - compiled
    """out[p] = the signed surface distance (negative: penetrating) of geom pair p in `world`,
    where its geoms are on the device now; beyond `cutoff`, some value over it. A thread a
    pair, each with its own EPA scratch row."""
    p = wp.tid()
    geoms = pairs[p]
    geom1, geom2 = geom_collision_pair(
        geom_type,
        geom_dataid,
        geom_size,
        mesh_vertadr,
        mesh_vertnum,
        mesh_graphadr,
        mesh_vert,
        mesh_graph,
        mesh_polynum,
        mesh_polyadr,
        mesh_polynormal,
        mesh_polyvertadr,
        mesh_polyvertnum,
        mesh_polyvert,
        mesh_polymapadr,
        mesh_polymapnum,
        mesh_polymap,
        geom_xpos,
        geom_xmat,
        geoms,
        world,
    )
    dist, ncon, x1, x2, face = ccd(
        ccd_tolerance[world % ccd_tolerance.shape[0]],
        cutoff,
        iterations,
        iterations,
        geom1,
        geom2,
        geom_type[geoms[0]],
        geom_type[geoms[1]],
        geom1.pos,
        geom2.pos,
        epa_vert[p],
        epa_vert_index[p],
        epa_face[p],
        epa_pr[p],
        epa_norm2[p],
        epa_horizon[p],
    )
    out[p] = dist


@wp.kernel
def world_contacts(
    nacon: wp.array(dtype=int),
    contact_geom: wp.array(dtype=wp.vec2i),
    contact_worldid: wp.array(dtype=int),
    contact_type: wp.array(dtype=int),
    world: int,
    count: wp.array(dtype=int),
    out: wp.array(dtype=wp.vec2i),
):  # pragma: no cover - compiled
    """out[:count] = the geom pairs of `world`'s contacts (those for the constraint solver, as
    CPU MuJoCo's data.contact holds them), in no particular order; `count` zeroed before."""
    c = wp.tid()
    if c >= nacon[0] or contact_worldid[c] != world or (contact_type[c] & 1) == 0:
        return
    slot = wp.atomic_add(count, 0, 1)
    out[slot] = contact_geom[c]
