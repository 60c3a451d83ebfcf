"""A job's life: its state transitions (:mod:`.state`), starting it once its voices are ready
(:mod:`.start`), rendering its chunks (:mod:`.render`) and stitching them (:mod:`.stitch`).

The step modules take an ``enqueue(task_name, args)`` function and call it only after the state a
follow-up depends on is committed, so they run the same under Celery, in tests and in benchmarks.
"""
