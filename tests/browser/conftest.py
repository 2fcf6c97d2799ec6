"""Browser tests: Playwright (python) driving Debian's chromium against a real cluster.

Nothing here skips: a missing chromium or playwright fails the test with the fix.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("RAFTCRON_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"


# Module scope: sync Playwright keeps an asyncio loop running on the main thread while it is
# open, which would break pytest-asyncio tests collected after these.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install playwright "
                    "(do not run `playwright install`; the tests use Debian's chromium)")
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        found = shutil.which("chromium")
        pytest.fail(f"chromium not found at {CHROMIUM} (which chromium: {found}); "
                    "install it with `apt-get install -y chromium` or set RAFTCRON_CHROMIUM")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
