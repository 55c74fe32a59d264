"""A real browser for the admin console's tests: Debian's headless Chromium driven by Selenium.

:func:`open_console` starts ``/usr/bin/chromium`` through ``/usr/bin/chromedriver``
(both from Debian: ``scripts/install-system-deps.sh``); the driver path is
given to Selenium's :class:`Service`, and Selenium Manager (which would
download a driver) is made to fail if anything calls it.  The HTTP Basic
login goes in an ``Authorization`` header on every request (DevTools'
``Network.setExtraHTTPHeaders``), as a browser sends it once the user typed it.
:class:`Console` has the few steps the tests repeat: open a page, wait for
it, click through a confirmation, save a screenshot.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.selenium_manager import SeleniumManager
from selenium.webdriver.remote.webelement import WebElement

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def _no_selenium_manager(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("Selenium Manager must not run (it downloads drivers): pass the driver through Service")


@contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[webdriver.Chrome]:
    """A headless Chromium session; AssertionError naming the fix when Chromium or its driver is missing."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            raise AssertionError(f"{path} is missing: run scripts/install-system-deps.sh "
                                 "(apt-get install chromium chromium-driver)")
    SeleniumManager.binary_paths = _no_selenium_manager  # type: ignore[method-assign]
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--window-size={width},{height}", "--hide-scrollbars", "--force-device-scale-factor=1"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


class Console:
    """The console at ``http://127.0.0.1:port/console/`` in ``driver``, logged in as ``login``."""

    def __init__(self, driver: webdriver.Chrome, port: int, login: tuple[str, str] | None) -> None:
        self.driver = driver
        self.base = f"http://127.0.0.1:{port}/console/"
        if login is not None:
            token = base64.b64encode(":".join(login).encode()).decode()
            driver.execute_cdp_cmd("Network.enable", {})
            driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {token}"}})

    def open(self, page: str, timeout: float = 15.0) -> None:
        """Show ``page`` (overview, destinations, connections, routes, bridges) and wait until it is drawn."""
        if self.driver.current_url.startswith(self.base):
            self.driver.execute_script("document.body.dataset.loaded = ''; location.hash = arguments[0];", page)
        else:
            self.driver.get(f"{self.base}#{page}")
        self.wait(lambda: self.driver.execute_script("return document.body.dataset.loaded") == page, timeout,
                  f"the {page} page")

    def wait(self, condition: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
        """Poll ``condition`` (stale elements count as not yet) until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            try:
                value = condition()
                if value:
                    return value
            except (StaleElementReferenceException, WebDriverException) as error:
                last = error
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                                     + (f" (last error: {last.msg if isinstance(last, WebDriverException) else last})"
                                        if last else ""))
            time.sleep(0.1)

    def find(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        """The text of the element at ``css``, read when the page is not being redrawn under it."""
        return str(self.wait(lambda: self.find(css).text or " ", what=css)).strip()

    def row(self, kind: str, name: str) -> str:
        """The CSS selector of the table row for ``name`` (``data-queue``, ``data-connection``, ...)."""
        return f'tr[data-{kind}="{name}"]'

    def field(self, kind: str, name: str, field: str) -> str:
        """The text of one cell of a row: ``field(queue, /queue/a, pending)``."""
        return self.text(f'{self.row(kind, name)} [data-field="{field}"]')

    def click(self, css: str) -> None:
        """Click the element at ``css`` (found again if a refresh replaced it)."""

        def clicked() -> bool:
            self.find(css).click()
            return True

        self.wait(clicked, what=f"a click on {css}")

    def type(self, css: str, keys: str, clear: bool = False) -> None:
        """Type ``keys`` into the element at ``css`` (emptied first if ``clear``), found again if a refresh
        replaced it or made it not interactable for a moment (a CI run under load: 'element not interactable')."""

        def typed() -> bool:
            element = self.find(css)
            if clear:
                element.clear()
            element.send_keys(keys)
            return True

        self.wait(typed, what=f"typing into {css}")

    def confirm(self, answer: bool = True, screenshot: Path | None = None) -> str:
        """Answer the page's confirmation dialog (after a screenshot of it, if asked); the question it asked."""
        self.wait(lambda: self.driver.execute_script("return document.getElementById('confirm').open"),
                  what="the confirmation dialog")
        question = self.text("#confirm-text")
        if screenshot is not None:
            self.screenshot(screenshot)
        self.click("#confirm-ok" if answer else "#confirm-cancel")
        self.wait(lambda: not self.driver.execute_script("return document.getElementById('confirm').open"),
                  what="the dialog to close")
        return question

    def notice(self, containing: str, timeout: float = 15.0) -> str:
        """Wait for the notice line to contain ``containing``; its text."""
        return str(self.wait(lambda: containing in self.find("#notice").text and self.find("#notice").text,
                             timeout, f"a notice containing {containing!r}"))

    def screenshot(self, path: Path) -> None:
        """Save the whole page as PNG at ``path`` (the directory is created)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        height = self.driver.execute_script("return document.body.scrollHeight")  # the content, not the window
        chrome = self.driver.execute_script("return window.outerHeight - window.innerHeight")  # the window's own bars
        width = self.driver.get_window_size()["width"]
        self.driver.set_window_size(width, max(700, int(height) + int(chrome) + 20))
        self.driver.execute_script("window.scrollTo(0, 0)")
        self.driver.save_screenshot(str(path))
