"""`make lint`'s structure check (scripts/check_layers.py): it passes on this tree and names each kind of
breach on small trees made to break one rule each (layers, cycles, private names, lengths, and the one
home of job, chunk and chapter rows and of a voice's ``cache_status``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import check_layers  # noqa: E402


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(tmp_path).parents:
            if parent != Path("."):
                (tmp_path / parent / "__init__.py").touch()
        path.write_text(text)
    return tmp_path


def test_this_tree_passes() -> None:
    assert check_layers.check(ROOT) == []


@pytest.mark.parametrize(
    ("files", "said"),
    [
        ({"worker/audio/mix.py": "import flask\n"}, "pure module imports no framework"),
        ({"worker/script/parse.py": "from models import Job\n"}, "pure module imports no framework"),
        (
            {"worker/engines/x.py": "from worker.jobs.render import go\n", "worker/jobs/render.py": ""},
            "only pure",
        ),
        (
            {"worker/jobs/a.py": "from webapi.views import x\n", "webapi/views.py": ""},
            "never imports the API",
        ),
        ({"models/job.py": "from worker.config import Settings\n", "worker/config.py": ""}, "no other Tome"),
        (
            {"tome_cli/main.py": "from worker.config import Settings\n", "worker/config.py": ""},
            "REST API only",
        ),
        (
            {"worker/jobs/a.py": "import worker.jobs.b\n", "worker/jobs/b.py": "from worker.jobs import a\n"},
            "cycle",
        ),
        (
            {"tests/t.py": "from worker.qa.x import _hidden\n", "worker/qa/x.py": "_hidden = 1\n"},
            "private name",
        ),
        ({"worker/jobs/long.py": "def f():\n" + "    x = 1\n" * 61}, "is 61 lines long"),
        ({"worker/jobs/doc.py": '"""' + "w" * 1201 + '"""\n'}, "docstring is 1201 characters"),
        ({"worker/sweeper.py": "session.execute(update(Job).values(x=1))\n"}, "writes Job rows"),
        ({"worker/jobs/speech.py": "s.execute(sa.delete(JobChapter))\n"}, "writes JobChapter rows"),
        ({"webapi/jobs.py": "job = models.Job(id=1)\n"}, "writes Job rows"),
        ({"worker/jobs/intake.py": "rows = [Chunk(seq=n) for n in range(3)]\n"}, "writes Chunk rows"),
        ({"webapi/voices.py": "def f(v):\n    v.cache_status = 'ready'\n"}, "writes cache_status"),
        ({"worker/voices/builds.py": "update(Voice).values(cache_status='ready')\n"}, "writes cache_status"),
        ({"webapi/jobs.py": "x = 1\n" * 250}, "webapi.jobs is 250 lines long"),
        (
            {"worker/jobs/speech.py": "def f(s):\n    job = s.get(Job, 1)\n    job.status = 'x'\n"},
            "assigns job.status of a Job row",
        ),
        (
            {"webapi/jobs.py": "def f(job: 'Job | None'):\n    job.title = 't'\n"},
            "assigns job.title of a Job",
        ),
        (
            {"worker/sweeper.py": "def f(s):\n    for c in s.scalars(select(Chunk)):\n        c.seq += 1\n"},
            "assigns c.seq of a Chunk row",
        ),
        (
            {"worker/jobs/a.py": "def f(s):\n    r = s.scalar(select(JobChapter))\n    r.x, y = 1, 2\n"},
            "assigns r.x of a JobChapter row",
        ),
        (
            {"webapi/a.py": "def f(rows: list[Chunk]):\n    for c in rows:\n        c.error = None\n"},
            "assigns c.error of a Chunk row",
        ),
        (
            {"worker/a.py": "def f(s):\n    job: models.Job = s.merge(x)\n    def g():\n        job.e = 1\n"},
            "assigns job.e of a Job row",
        ),
    ],
)
def test_each_breach_is_named(tmp_path: Path, files: dict[str, str], said: str) -> None:
    problems = check_layers.check(_tree(tmp_path, files))
    assert any(said in p for p in problems), problems


def test_what_does_not_run_at_import_and_same_package_privates_pass(tmp_path: Path) -> None:
    files = {
        "worker/jobs/a.py": "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from worker.jobs import b\n",
        "worker/jobs/b.py": "from worker.jobs.a import _shared\n",
        "bench/run.py": "def main():\n"
        + "    x = 1\n" * 80
        + 'if __name__ == "__main__":\n    import bench.other\n',
        "bench/other.py": "import bench.run\n",
        "worker/jobs/short.py": 'def f():\n    """Doc."""\n' + "    x = 1\n" * 60,
        "worker/jobs/state/chunks.py": "update(Chunk).values(x=1)\nChunk(seq=1)\nupdate(Voice)\n",
        "worker/voices/state.py": "def f(v):\n    v.cache_status = 'ready'\n",
        "webapi/voices.py": "q = select(Voice).where(Voice.cache_status == 'ready')\n",
        "webapi/jobs.py": "x = 1\n" * 249,
        "worker/jobs/state/jobs.py": "def f(s, job: Job):\n    job.status = 'x'\n",
        "webapi/lexicons.py": "def f(s, job: Voice):\n    row = s.get(Lexicon, 1)\n    row.n = 1\n",
        "worker/jobs/render.py": "def f(s, ids: list[Job]):\n    job = s.get(Job.id)\n    job.x = 1\n",
        "tests/t.py": "Job(id=1)\nupdate(Chunk)\n",
    }
    assert check_layers.check(_tree(tmp_path, files)) == []
