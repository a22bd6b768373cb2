"""Headless Chromium over a local HTML file: the DOM after load, and a screenshot.

Chromium comes from Debian (`make test-slow` installs the `chromium` package when
/usr/bin/chromium is missing). Flags: no sandbox (CI runs as root), no GPU, and no network
side traffic (component updates, sync, background networking), so a report that fetched
anything would show broken images rather than quietly load them.

Run as a script to refresh the README's screenshot of a report:
    python tests/support/browser.py runs/ID/report.html docs/report-screenshot.png
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTH = 1366  # a laptop's width in CSS pixels
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         "--virtual-time-budget=5000"]


def chromium() -> str:
    """The browser binary; a clear failure (not a skip) when it is missing."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise RuntimeError("chromium not found: `make test-slow` installs it (apt-get install -y chromium)")
    return found


def _run(args: list[str], profile: str) -> subprocess.CompletedProcess:
    return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=120, check=True)


def dump_dom(html: Path, height: int = 900) -> str:
    """The serialised DOM once the page's load handlers ran."""
    with tempfile.TemporaryDirectory() as profile:
        return _run([f"--window-size={WIDTH},{height}", "--dump-dom", html.resolve().as_uri()], profile).stdout


def screenshot(html: Path, png: Path, height: int = 4000) -> Path:
    """A PNG of the page at laptop width (the window is tall: the whole report in one image)."""
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        _run([f"--window-size={WIDTH},{height}", f"--screenshot={png.resolve()}", html.resolve().as_uri()], profile)
    return png


def trim(png: Path) -> Path:
    """Cut the blank rows under the page's content (the window was taller than the page)."""
    from PIL import Image, ImageChops

    img = Image.open(png).convert("RGB")
    box = ImageChops.difference(img, Image.new("RGB", img.size, (255, 255, 255))).getbbox()
    if box is not None:
        img.crop((0, 0, img.width, min(img.height, box[3] + 16))).save(png, optimize=True)
    return png


if __name__ == "__main__":
    print(trim(screenshot(Path(sys.argv[1]), Path(sys.argv[2]))))
