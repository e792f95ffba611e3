# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""tests/browser.py against a real headless Chromium, on tiny pages written to tmp_path.

The report tests trust this driver to say whether a page rendered, threw or logged
errors; so it is proven here first: DOM queries and the title come back, a thrown error
and console.error are reported with their lines, the screenshot is a full-page PNG, a
page that never finishes loading costs the timeout and no more, and no Chromium process
(nor the crash handler that leaves its process group) outlives a call.
"""

from __future__ import annotations

import os
import struct
import tempfile
import time

import pytest

from tests import browser

pytestmark = pytest.mark.skipif(
    browser.find_chromium() is None,
    reason='no chromium, chromium-browser or google-chrome on PATH (Debian: apt-get install chromium)')

PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'

REPORT_PAGE = '''<!doctype html>
<html><head><meta charset="utf-8"><title>before</title></head>
<body>
<table id="rails"><tr><th>rail</th><th>GB/s</th></tr><tr><td>mlx5_0</td><td>48.9</td></tr></table>
<svg width="200" height="100" xmlns="http://www.w3.org/2000/svg">
  <rect x="0" y="0" width="90" height="80" fill="#36c"/>
  <rect x="100" y="20" width="90" height="60" fill="#c63"/>
  <path d="M0 90 L200 90" stroke="black"/>
</svg>
<div style="height: 2500px">a page taller than the viewport</div>
<script>document.title = 'Fabric report';</script>
</body></html>
'''

BROKEN_PAGE = '''<!doctype html>
<html><head><title>broken</title></head>
<body>
<script>
console.error('bad');
throw new Error('boom');
</script>
</body></html>
'''

# The load event never fires while the only script spins forever.
HANGING_PAGE = '<!doctype html><html><body><script>for (;;) {}</script></body></html>'


def write(tmp_path, name, text):
    """Write a page and return its path."""
    path = tmp_path / name
    path.write_text(text, encoding='utf-8')
    return str(path)


def live_processes_naming(text):
    """Pids of running processes whose command line contains text (zombies have none)."""
    found = []
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % name, 'rb') as handle:
                if text.encode() in handle.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


def test_page_dom_title_and_full_page_screenshot(tmp_path):
    """Counts from the DOM, the title the script set, no errors, a full-page PNG."""
    shot = tmp_path / 'report.png'
    start = time.monotonic()
    page = browser.open_page(
        write(tmp_path, 'report.html', REPORT_PAGE), screenshot=str(shot), timeout=20,
        evaluate={
            'tables': "document.querySelectorAll('table').length",
            'shapes': "document.querySelectorAll('svg path, svg rect').length",
            'rows': "Array.from(document.querySelectorAll('#rails td')).map(cell => cell.textContent)",
            'later': 'new Promise(resolve => setTimeout(() => resolve(42), 50))',
            'broken': 'no_such_function()',
        })
    elapsed = time.monotonic() - start

    assert page['title'] == 'Fabric report'
    assert page['results']['tables'] == 1
    assert page['results']['shapes'] == 3
    assert page['results']['rows'] == ['mlx5_0', '48.9']
    assert page['results']['later'] == 42  # promises are awaited
    assert page['results']['broken'].startswith('error: ReferenceError')
    assert page['exceptions'] == []  # an evaluate error is a result, not a page exception
    assert page['console_errors'] == []
    assert page['screenshot'] == str(shot)
    data = shot.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 2000
    # IHDR follows the signature: length, type, then width and height, big-endian.
    width, height = struct.unpack('>II', data[16:24])
    assert width >= 1400
    assert height >= 2500  # the whole document, not just the 900 px viewport
    assert elapsed < 20


def test_thrown_error_and_console_error_are_reported(tmp_path):
    """An uncaught exception and console.error come back with their text and line."""
    page = browser.open_page(write(tmp_path, 'broken.html', BROKEN_PAGE), timeout=20)

    assert page['title'] == 'broken'
    assert len(page['exceptions']) == 1, page['exceptions']
    exception = page['exceptions'][0]
    assert 'Error: boom' in exception['description']
    assert exception['line'] == 6  # 1-based, the throw statement
    assert exception['url'].endswith('/broken.html')
    assert [error['text'] for error in page['console_errors']] == ['bad']
    assert page['console_errors'][0]['source'] == 'console.error'
    assert page['console_errors'][0]['line'] == 5


def test_no_chromium_left_behind_even_after_a_timeout(tmp_path, monkeypatch):
    """After a good call and a timed-out one, no process names our profile and it is gone."""
    # The profile (and crash database) land under tempfile's directory; pointing that at
    # tmp_path makes every process of these calls recognisable by its command line,
    # whatever else runs on the machine.
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    page = browser.open_page(write(tmp_path, 'report.html', REPORT_PAGE), timeout=20)
    assert page['title'] == 'Fabric report'

    start = time.monotonic()
    with pytest.raises(browser.BrowserError, match='timed out waiting for Page.loadEventFired'):
        browser.open_page(write(tmp_path, 'hang.html', HANGING_PAGE), timeout=4)
    assert time.monotonic() - start < 10  # the deadline holds; cleanup is quick

    assert live_processes_naming(str(tmp_path)) == []
    assert [name for name in os.listdir(tmp_path) if name.startswith('gf-chromium-')] == []


def test_missing_file_is_a_clear_error(tmp_path):
    """A path that does not exist fails before any browser starts."""
    with pytest.raises(browser.BrowserError, match='no such file'):
        browser.open_page(str(tmp_path / 'absent.html'))
