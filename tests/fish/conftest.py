"""Every test here needs ``fish_speech``: a module's tests are skipped where it does not import (a failure
under CI). The check runs before a module's first test, not when the module is collected: importing
fish-speech (torch and its codec packages) costs seconds of CPU, and every pytest process collects every
module, so the modules here import torch only in the tests that use it."""

from __future__ import annotations

import pytest

from tests.fish import require_fish_speech


@pytest.fixture(scope="module", autouse=True)
def _fish_speech_imports() -> None:
    require_fish_speech()
