"""Browser tests of the web studio (``webapi/studio.py``): headless Chromium driven by Selenium against the
API as ``make run`` serves it (gunicorn) and, where a module needs them, real Celery workers. Without
Chromium and chromedriver they are skipped with the reason, except under CI
(``TOME_TEST_REQUIRE_SERVICES=1``), where that is a failure."""
