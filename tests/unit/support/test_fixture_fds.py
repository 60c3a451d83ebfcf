"""The ``app`` and ``make_app`` fixtures give back the file descriptors their apps open.

Every app has its own SQLAlchemy engine (a pool of SQLite connections, a few descriptors each); fixtures
that never disposed them, and the metrics batch that kept each engine alive (its flusher reconnecting),
left them open for the rest of the run, which went over 1,024 descriptors and broke a select()-based
test. Here the real fixtures (tests/conftest.py) run in an inner pytest session, in a process of its own
(modules imported in there must not replace the ones this process's apps use), which counts its open
descriptors after every test's teardown.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[3]
APPS = 12

INNER = f"""
import pytest


@pytest.mark.parametrize("i", range({APPS}))
def test_an_app_and_a_made_one_answer(app, client, user, make_app, i):
    assert client.get("/v1/voices", headers=user).status_code == 200
    assert make_app().test_client().get("/healthz").status_code == 200
"""

COUNTING = """
import os

from worker import counters


def pytest_runtest_logfinish(nodeid, location):
    counters.flush()  # what this process's metrics flusher does in the background: it writes every
    # batch still kept, through the batch's engine
    with open("fds.txt", "a") as out:
        out.write(f"{len(os.listdir('/proc/self/fd'))}\\n")
"""


def test_the_app_fixtures_close_what_their_apps_open(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_inner=INNER)
    pytester.makeconftest(COUNTING)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess(
        "-p", "tests.conftest", "-p", "no:cacheprovider", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=APPS)
    counts = [int(line) for line in (pytester.path / "fds.txt").read_text().split()]
    assert len(counts) == APPS
    # After the first test (what stays loaded for the process is loaded), an app left open holds one to
    # three (22 apps after it here); a few may come and go with other work.
    more = counts[-1] - counts[0]
    assert more < 10, f"{more} descriptors more after {2 * (APPS - 1)} more apps: {counts}"
