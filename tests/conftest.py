"""Fixtures shared by all tests (paths and data helpers are in shared_data.py)."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def cal_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("calibration")
