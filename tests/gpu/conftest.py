"""Fixtures of the sampling GPU tests: a kernel forced by ``FIB_SAMPLING_CLUSTER``'s knob values."""
from __future__ import annotations

import os
import sys

import pytest

# (pytest runs with --import-mode=importlib: the test modules import their shared pieces from here)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sampling_ref import S  # noqa: E402


@pytest.fixture
def force_path(request):
    old = S._CLUSTER
    S._CLUSTER = {"auto": 0, "cluster4": 4, "stream": -1, "filter1": 1001, "filter3": 1003,
                  "split": 2000, "twopass1": 3001, "twopass3": 3003, "twopass2_1": 4001,
                  "twopass2_2": 4002, "twopass_lk1": 5001, "twopass_lk3": 5003, "twopass2_lk1": 6001,
                  "gather4": 7004}[request.param]
    yield request.param
    S._CLUSTER = old


@pytest.fixture
def plain_kernel():
    """Forces the one-pass plain kernel (knob -2) for calls without top-k (plain.cuh)."""
    old = S._CLUSTER
    S._CLUSTER = -2
    yield
    S._CLUSTER = old
