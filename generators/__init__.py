"""Trajectory and appearance generators (MimicGen-style retargeting and friends)."""
