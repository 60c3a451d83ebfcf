"""Files under the data directory: where each one lives (:mod:`.layout`) and how it is written
(:mod:`.atomic`). Pure: no Flask, Celery or database imports."""
