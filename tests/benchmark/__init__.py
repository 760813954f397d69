"""Tests of benchmark/ (issue #39)."""
