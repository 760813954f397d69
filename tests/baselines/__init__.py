"""Tests of baselines/ (issue #3)."""
