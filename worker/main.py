"""Worker entry point: ``celery -A worker.main worker`` (and ``beat``). Settings come from TOME_* variables;
every file the process creates is private to its user."""

from worker.celery_app import ensure_broker_folders, make_celery
from worker.config import load_settings
from worker.storage.atomic import keep_files_private
from worker.storage.check import check_storage

keep_files_private()
settings = load_settings()
ensure_broker_folders(settings)
check_storage(settings.open_storage())  # a missing bucket stops the worker here, with its name
app = make_celery(settings)
