"""Worker entry point: ``celery -A worker.main worker`` (and ``beat``). Settings come from TOME_* variables;
every file the process creates is private to its user."""

from worker.celery_app import ensure_broker_folders, make_celery
from worker.config import load_settings
from worker.storage.atomic import keep_files_private

keep_files_private()
settings = load_settings()
ensure_broker_folders(settings)
app = make_celery(settings)
