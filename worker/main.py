"""Worker entry point: ``celery -A worker.main worker -B``. Settings come from TOME_* variables."""

from worker.celery_app import ensure_broker_folders, make_celery
from worker.config import load_settings

settings = load_settings()
ensure_broker_folders(settings)
app = make_celery(settings)
