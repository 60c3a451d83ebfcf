"""Driving the studio in headless Chromium: one browser per test module, waits on what the page shows,
screenshots, and every URL the browser requested (from chromedriver's performance log)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

T = TypeVar("T")

# Screenshots of every page the tests visit (var/ is gitignored; the README links the finished job's).
ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "test-artifacts" / "studio"
ARGUMENTS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
    "--autoplay-policy=no-user-gesture-required",  # play() from the test, without a real click
    "--mute-audio",
    "--disable-gpu",
    "--no-first-run",
    "--disable-extensions",
    "--disable-background-networking",  # nothing but the page's own requests
    "--disable-component-update",
    "--disable-sync",
)


def browser_binaries() -> tuple[str, str]:
    """Chromium and its chromedriver (Debian: ``apt-get install chromium chromium-driver``), or skip the
    module saying so; under CI (``TOME_TEST_REQUIRE_SERVICES=1``) a missing browser fails instead."""
    chromium = next(
        (
            found
            for name in ("chromium", "chromium-browser", "google-chrome")
            if (found := shutil.which(name))
        ),
        None,
    )
    driver = shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    message = (
        "the studio's browser tests need Chromium and chromedriver on PATH "
        f"(apt-get install chromium chromium-driver); found chromium={chromium}, chromedriver={driver}"
    )
    if os.environ.get("TOME_TEST_REQUIRE_SERVICES") == "1":
        pytest.fail(message)
    pytest.skip(message)


class Studio:
    """The studio at ``base`` in one browser; ``requested`` gathers every URL the browser asked for."""

    def __init__(self, driver: webdriver.Chrome, base: str, downloads: Path):
        self.driver = driver
        self.base = base
        self.downloads = downloads
        self.requested: list[str] = []
        self.responses: list[tuple[str, int]] = []  # (URL, HTTP status) of every answer the page got
        self.console: list[dict[str, Any]] = []

    # ----- finding and waiting -----

    def find(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def finds(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def wait(self, condition: Callable[[], T], timeout: float = 60, what: str = "") -> T:
        """Until ``condition()`` is truthy (an element gone stale or not there yet counts as not yet)."""

        def attempt(_: Any) -> T:
            try:
                return condition()
            except (NoSuchElementException, StaleElementReferenceException):
                return False  # type: ignore[return-value]

        message = f"{what or condition} after {timeout} s; notice={self.text('#notice')!r} "
        message += f"problem={self.text('#problem')!r}"
        return WebDriverWait(self.driver, timeout, poll_frequency=0.1).until(attempt, message)

    def text(self, css: str) -> str:
        try:
            return self.find(css).text
        except NoSuchElementException:
            return ""

    def shown(self, css: str) -> bool:
        found = self.finds(css)
        return bool(found) and found[0].is_displayed()

    def wait_text(self, css: str, text: str, timeout: float = 60) -> WebElement:
        def seen() -> WebElement | None:
            element = self.find(css)
            return element if element.is_displayed() and text in element.text else None

        found = self.wait(seen, timeout, f"{text!r} in {css}")
        assert found is not None
        return found

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def js_async(self, script: str, *args: Any) -> Any:
        """``script`` ends by calling ``done(value)``."""
        return self.driver.execute_async_script(
            f"const done = arguments[arguments.length - 1];\n{script}", *args
        )

    # ----- acting -----

    def go(self, fragment: str = "") -> None:
        self.driver.get(f"{self.base}/{fragment}")

    def fill(self, css: str, text: str) -> None:
        field = self.find(css)
        field.clear()
        field.send_keys(text)

    def click(self, css: str) -> None:
        self.find(css).click()

    def press(self, css: str, timeout: float = 10) -> None:
        """Click what ``css`` finds, again if a poll replaced it in between (a stale element)."""

        def attempt() -> bool:
            self.find(css).click()
            return True

        self.wait(attempt, timeout, f"a click on {css}")

    def choose(self, css: str, value: str) -> None:
        Select(self.find(css)).select_by_value(value)

    def nav(self, label: str) -> None:
        self.driver.find_element(By.LINK_TEXT, label).click()

    def sign_in(self, key: str) -> None:
        self.go("")
        # A key kept in the tab signs the page in by itself: wait for either state, then sign out.
        self.wait(lambda: self.shown("#who") or self.shown("#api-key"), what="the page signed in or out")
        if self.shown("#who"):
            self.click("#sign-out")
        self.wait(lambda: self.shown("#api-key"), what="the sign-in form")
        self.fill("#api-key", key)
        self.click("#signin-form button[type=submit]")
        self.wait(lambda: self.shown("#who"), what="signed in")

    def screenshot(self, name: str) -> Path:
        """The whole page (not only the window) as ``ARTIFACTS/name.png``."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        size = self.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = self.driver.execute_cdp_cmd(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
        )
        path = ARTIFACTS / f"{name}.png"
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def downloaded(self, name: str, timeout: float = 20) -> bytes:
        path = self.downloads / name
        partial = self.downloads / f"{name}.crdownload"
        self.wait(lambda: path.is_file() and not partial.exists(), timeout, f"{name} downloaded")
        return path.read_bytes()

    # ----- what the browser did -----

    def collect_logs(self) -> None:
        """Drain chromedriver's logs: the URL of every request the page made, the status of every answer,
        and the console."""
        for entry in self.driver.get_log("performance"):  # type: ignore[no-untyped-call]
            message = json.loads(entry["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                self.requested.append(message["params"]["request"]["url"])
            elif message["method"] == "Network.responseReceived":
                answer = message["params"]["response"]
                self.responses.append((answer["url"], int(answer["status"])))
        self.console.extend(self.driver.get_log("browser"))  # type: ignore[no-untyped-call]

    def check_requests(self, keys: Sequence[str]) -> list[str]:
        """Every URL the page requested (chromedriver's log, the page's own performance entries and the
        address bar) is of this origin (or a blob: of it) and holds none of ``keys``; nothing in the console
        says the CSP or Trusted Types blocked something. Returns the URLs, for more checks. (``data:`` URLs
        leave nothing: Chromium's own audio controls draw their icons from some.)"""
        self.collect_logs()
        entries = self.js(
            "return performance.getEntries()"
            ".filter(e => e.entryType === 'navigation' || e.entryType === 'resource').map(e => e.name)"
        )
        urls = [*self.requested, *entries, self.driver.current_url]
        assert len(urls) > 5, urls
        for url in urls:
            if url.startswith("data:"):
                continue
            assert url.startswith((f"{self.base}/", f"blob:{self.base}/")), f"a foreign request: {url}"
            for key in keys:
                assert key not in url, f"an API key in a URL: {url}"
        blocked = [
            entry["message"]
            for entry in self.console
            if "Content Security Policy" in entry["message"] or "Trusted Type" in entry["message"]
        ]
        assert not blocked, blocked
        return urls

    def no_alert(self) -> bool:
        try:
            self.driver.switch_to.alert.dismiss()
        except Exception:  # NoAlertPresentException: what we hope for
            return True
        return False


@contextmanager
def chromium(base: str, downloads: Path, microphone: Path | None = None) -> Iterator[Studio]:
    """One headless Chromium on ``base``. With ``microphone`` (a WAV file), the page's microphone is that
    file, played in a loop, and permission is granted without a prompt (Chromium's fake capture device)."""
    binary, driver_path = browser_binaries()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ARGUMENTS:
        options.add_argument(argument)
    if microphone is not None:
        options.add_argument("--use-fake-ui-for-media-stream")
        options.add_argument("--use-fake-device-for-media-stream")
        options.add_argument(f"--use-file-for-fake-audio-capture={microphone}")
    options.add_experimental_option(
        "prefs", {"download.default_directory": str(downloads), "download.prompt_for_download": False}
    )
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    started = time.monotonic()
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    try:
        driver.execute_cdp_cmd(
            "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
        )
        driver.set_script_timeout(30)
        assert time.monotonic() - started < 60, "Chromium took over a minute to start"
        yield Studio(driver, base, downloads)
    finally:
        driver.quit()
