# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A tiny headless Chromium driver for tests, speaking the DevTools Protocol over a pipe.

Reports (HTML written by the roles) are checked in a real browser: did a script throw,
did anything log an error, what does the DOM hold, what does the page look like. The
test machines have no network and no pip, so this uses the Python standard library only:
Chromium is started with ``--remote-debugging-pipe``, where it reads NUL-terminated JSON
messages on fd 3 and writes them on fd 4; no websocket, no port, nothing to install.

API::

    find_chromium() -> str | None
    open_page(path_or_url, screenshot=None, width=1400, height=900, timeout=60, evaluate=None) -> dict

``open_page`` returns ``{'url', 'title', 'exceptions', 'console_errors', 'results',
'screenshot'}`` and raises ``BrowserError`` (with the tail of Chromium's stderr) when the
browser cannot be started, the protocol answers with an error, or ``timeout`` runs out.
Every call starts its own browser in its own process group with a fresh profile, and
kills the group and removes the profile however the call ends.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import pathlib
import select
import shutil
import signal
import subprocess
import tempfile
import time

# Debian's /usr/bin/chromium is a shell wrapper that execs /usr/lib/chromium/chromium,
# so the fds and the process group carry through; the other names cover other distros.
CANDIDATES = ('/usr/bin/chromium', 'chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable')

# Flags that work as root (CI) on a machine without network:
# --no-sandbox: the setuid/namespace sandbox refuses to run as root;
# --disable-gpu: no GPU stack in CI, software raster is enough for screenshots;
# --disable-quic ... --disable-sync: nothing may try to reach the network and then wait;
# --disable-dev-shm-usage: containers often have a 64 MiB /dev/shm, too small for large
#   full-page screenshots; Debian's wrapper means to add it, but its size check breaks
#   when findmnt prints more than one line (seen here), so it is given explicitly.
FLAGS = (
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--no-default-browser-check',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--disable-dev-shm-usage',
    '--remote-debugging-pipe',
)

# Screenshots are capped so that a runaway page cannot make Chromium allocate gigabytes.
MAX_SCREENSHOT_SIDE = 16384


class BrowserError(RuntimeError):
    """Chromium could not be started, broke the protocol, answered an error, or ran out of time."""


def find_chromium():
    """The path of a Chromium (or Chrome) executable, or None when there is none."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _to_url(path_or_url):
    """A URL for Page.navigate: URLs pass through, a file path becomes an absolute file:// URL."""
    if '://' in path_or_url or path_or_url.startswith(('about:', 'data:')):
        return path_or_url
    path = os.path.abspath(path_or_url)
    # Chromium would show its own error page for a missing file and still fire the load
    # event, which would read as an empty but healthy page; fail clearly instead.
    if not os.path.isfile(path):
        raise BrowserError('no such file: %s' % path)
    # as_uri percent-quotes spaces and other characters the way a URL needs them.
    return pathlib.Path(path).as_uri()


def _tail(path, size=4000):
    """The last bytes of Chromium's stderr, for error messages."""
    try:
        with open(path, 'rb') as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - size))
            return handle.read().decode('utf-8', 'replace').strip()
    except OSError:
        return ''


class _Pipe:
    """One DevTools connection: NUL-framed JSON out on one fd, in on another, all with deadlines."""

    def __init__(self, write_fd, read_fd, deadline, stderr_path):
        self.write_fd = write_fd
        self.read_fd = read_fd
        self.deadline = deadline
        self.stderr_path = stderr_path
        self.buffer = b''
        self.next_id = 0
        self.events = []
        # Non-blocking both ways: a stuck Chromium must cost at most the deadline, and a
        # blocking read or write would wait forever regardless of select's answer.
        os.set_blocking(write_fd, False)
        os.set_blocking(read_fd, False)

    def fail(self, message):
        """Raise BrowserError with what Chromium said on stderr."""
        tail = _tail(self.stderr_path)
        raise BrowserError('%s\n--- chromium stderr (tail) ---\n%s' % (message, tail or '(empty)'))

    def _remaining(self, what):
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.fail('timed out waiting for %s' % what)
        return left

    def send(self, method, params=None, session_id=None):
        """Write one command and return its id."""
        self.next_id += 1
        message = {'id': self.next_id, 'method': method, 'params': params or {}}
        if session_id:
            message['sessionId'] = session_id
        data = json.dumps(message).encode() + b'\0'
        while data:
            if not select.select([], [self.write_fd], [], self._remaining('%s to be sent' % method))[1]:
                continue
            try:
                data = data[os.write(self.write_fd, data):]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                self.fail('chromium closed the pipe while sending %s' % method)
        return self.next_id

    def receive(self, what):
        """Read the next whole message, waiting no later than the deadline."""
        while b'\0' not in self.buffer:
            if not select.select([self.read_fd], [], [], self._remaining(what))[0]:
                continue
            try:
                chunk = os.read(self.read_fd, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                self.fail('chromium exited (pipe closed) while waiting for %s' % what)
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b'\0', 1)
        try:
            return json.loads(raw)
        except ValueError:
            self.fail('chromium sent something that is not JSON: %r' % raw[:200])
            raise  # unreachable: fail raises; keeps pylint's inconsistent-return quiet

    def call(self, method, params=None, session_id=None):
        """Send a command and return its result; events read meanwhile are kept in self.events."""
        wanted = self.send(method, params, session_id)
        while True:
            message = self.receive('the answer to %s' % method)
            if message.get('id') == wanted:
                if 'error' in message:
                    self.fail('%s failed: %s' % (method, message['error']))
                return message.get('result', {})
            if 'method' in message:
                self.events.append(message)

    def wait_event(self, method, session_id=None):
        """Return the first event called method (for session_id), kept or still to come."""
        for index, event in enumerate(self.events):
            if event['method'] == method and (session_id is None or event.get('sessionId') == session_id):
                return self.events.pop(index)
        while True:
            message = self.receive(method)
            if message.get('method') == method and (session_id is None or message.get('sessionId') == session_id):
                return message
            if 'method' in message:
                self.events.append(message)


def _remote_text(remote):
    """A console argument (a CDP RemoteObject) as the text a developer would see."""
    if 'value' in remote:
        value = remote['value']
        return value if isinstance(value, str) else json.dumps(value)
    return remote.get('description') or remote.get('unserializableValue') or remote.get('type', '')


def _collect(events, session_id, exceptions, console_errors):
    """Sort the page's events into exceptions and console errors (everything else is dropped)."""
    for event in events:
        if event.get('sessionId') != session_id:
            continue
        params = event.get('params', {})
        if event['method'] == 'Runtime.exceptionThrown':
            details = params.get('exceptionDetails', {})
            exceptions.append({
                'text': details.get('text', ''),
                'description': details.get('exception', {}).get('description', ''),
                # CDP counts lines from 0; editors and tracebacks count from 1.
                'line': details.get('lineNumber', -1) + 1,
                'url': details.get('url', ''),
            })
        elif event['method'] == 'Runtime.consoleAPICalled' and params.get('type') in ('error', 'assert'):
            frames = params.get('stackTrace', {}).get('callFrames') or [{}]
            console_errors.append({
                'source': 'console.%s' % params['type'],
                'text': ' '.join(_remote_text(arg) for arg in params.get('args', [])),
                'line': frames[0].get('lineNumber', -1) + 1,
                'url': frames[0].get('url', ''),
            })
        elif event['method'] == 'Log.entryAdded' and params.get('entry', {}).get('level') == 'error':
            # Browser-side errors: a failed subresource load, a CSP violation, and the like.
            entry = params['entry']
            console_errors.append({
                'source': 'log.%s' % entry.get('source', ''),
                'text': entry.get('text', ''),
                'line': entry.get('lineNumber', -1) + 1,
                'url': entry.get('url', ''),
            })


def _evaluate(pipe, session_id, expression):
    """The value of a JS expression, or a string starting with 'error: ' when it throws."""
    result = pipe.call('Runtime.evaluate', {
        'expression': expression, 'returnByValue': True, 'awaitPromise': True,
    }, session_id)
    if 'exceptionDetails' in result:
        details = result['exceptionDetails']
        return 'error: %s' % (details.get('exception', {}).get('description') or details.get('text', ''))
    remote = result.get('result', {})
    # undefined has no 'value'; None reads better in a test than a KeyError.
    return remote.get('value', remote.get('unserializableValue'))


def _screenshot(pipe, session_id, path, width, height):
    """Capture the whole page as PNG into path."""
    # captureBeyondViewport alone still clips to the layout viewport in headless mode, so
    # make the viewport as large as the document first (never smaller than asked for).
    size = _evaluate(pipe, session_id, (
        '[Math.max(document.documentElement.scrollWidth, document.body ? document.body.scrollWidth : 0),'
        ' Math.max(document.documentElement.scrollHeight, document.body ? document.body.scrollHeight : 0)]'))
    full_width, full_height = (size if isinstance(size, list) else (width, height))
    full_width = min(max(int(full_width), width), MAX_SCREENSHOT_SIDE)
    full_height = min(max(int(full_height), height), MAX_SCREENSHOT_SIDE)
    pipe.call('Emulation.setDeviceMetricsOverride', {
        'width': full_width, 'height': full_height, 'deviceScaleFactor': 1, 'mobile': False,
    }, session_id)
    shot = pipe.call('Page.captureScreenshot', {'format': 'png', 'captureBeyondViewport': True}, session_id)
    with open(path, 'wb') as handle:
        handle.write(base64.b64decode(shot['data']))
    return path


def _child_fds(read_end, write_end):
    """In the child, before exec: put the command pipe on fd 3 and the answer pipe on fd 4."""
    # Both ends are first moved to 5 or above so that dup2 onto 3 cannot overwrite the
    # other end when it happens to be fd 3 or 4; the copies are close-on-exec, the
    # dup2 targets are not, so Chromium gets exactly fds 3 and 4.
    high_read = fcntl.fcntl(read_end, fcntl.F_DUPFD_CLOEXEC, 5)
    high_write = fcntl.fcntl(write_end, fcntl.F_DUPFD_CLOEXEC, 5)
    os.dup2(high_read, 3)
    os.dup2(high_write, 4)


def _live_processes(pgid, workdir):
    """Pids of processes still running that belong to this browser.

    Members of its process group, and anything whose command line names workdir: the
    crashpad handler double-forks into a session of its own (outside the group) and is
    told its database directory, which lies in workdir. Zombies are left out: they hold
    no files and run no code; here PID 1 reaps orphans only every couple of seconds.
    """
    found = []
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % name, 'rb') as handle:
                # comm, in parentheses, may hold spaces: split after its closing one.
                fields = handle.read().rsplit(b')', 1)[1].split()
            with open('/proc/%s/cmdline' % name, 'rb') as handle:
                cmdline = handle.read()
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if fields[0] in (b'Z', b'X'):
            continue
        if int(fields[2]) == pgid or workdir.encode() in cmdline:
            found.append(int(name))
    return found


def _kill_all(proc, workdir):
    """SIGKILL the browser's process group and its strays, then wait until none runs."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    # The helpers are not our children, so they cannot be waited for; poll until none is
    # left, so that the profile is not removed under a process that still writes to it.
    end = time.monotonic() + 10
    while time.monotonic() < end:
        pids = _live_processes(proc.pid, workdir)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)


def open_page(path_or_url, screenshot=None, width=1400, height=900, timeout=60, evaluate=None):
    """Load a page in a fresh headless Chromium and report what happened.

    path_or_url: a file path (made absolute, must exist) or a URL.
    screenshot: where to write a full-page PNG, or None for no screenshot.
    width, height: the viewport the page is laid out in.
    timeout: seconds for everything, from starting Chromium to the last answer.
    evaluate: {name: JS expression}; each is evaluated after the load event, promises
        awaited, and its JSON value (or 'error: ...') returned under results[name].

    Returns {'url', 'title', 'exceptions', 'console_errors', 'results', 'screenshot'};
    exceptions and console_errors are lists of dicts with 'text', 'line' and 'url', and
    exceptions also carry 'description' (the JS stack).
    """
    url = _to_url(path_or_url)
    chromium = find_chromium()
    if not chromium:
        raise BrowserError('no chromium found (looked for %s)' % ', '.join(CANDIDATES))
    deadline = time.monotonic() + timeout
    workdir = tempfile.mkdtemp(prefix='gf-chromium-')
    stderr_path = os.path.join(workdir, 'stderr.log')
    # Parent writes commands into to_chrome, Chromium answers into from_chrome. os.pipe()
    # fds are close-on-exec, so only the fds 3 and 4 made in the child reach Chromium.
    to_read, to_write = os.pipe()
    from_read, from_write = os.pipe()
    # Chromium keeps its crash database under $XDG_CONFIG_HOME/chromium whatever the
    # --user-data-dir; pointing the XDG dirs into workdir keeps every file it writes there.
    # TMPDIR is left alone: Chromium puts its SingletonSocket in an org.chromium.Chromium.* dir
    # there, and a unix socket path has at most 107 bytes (a deep workdir made it fatal). The
    # test command gives the whole run a TMPDIR of its own and removes it (scripts/test.sh).
    env = dict(os.environ, XDG_CONFIG_HOME=os.path.join(workdir, 'config'), XDG_CACHE_HOME=os.path.join(workdir, 'cache'))
    proc = None
    try:
        with open(stderr_path, 'wb') as stderr:
            # stderr goes to a file, not a pipe: nobody reads a pipe while we wait on the
            # protocol, and a full one would block Chromium.
            # close_fds=False because close_fds=True would close fds 3 and 4 again after
            # preexec_fn (pass_fds cannot name them: they are other files in this process);
            # Python opens every fd close-on-exec, so nothing else leaks.
            # preexec_fn is unsafe only with threads in this process; tests have none.
            # start_new_session: one process group to kill, apart from pytest's.
            try:
                proc = subprocess.Popen(  # pylint: disable=consider-using-with,subprocess-popen-preexec-fn
                    [chromium] + list(FLAGS) + [
                        '--user-data-dir=%s' % os.path.join(workdir, 'profile'),
                        '--window-size=%d,%d' % (width, height),
                        'about:blank',
                    ],
                    stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr, env=env,
                    close_fds=False, start_new_session=True,
                    preexec_fn=lambda: _child_fds(to_read, from_write),
                )
            except OSError as exc:
                # Not executable, fds exhausted, ...: one error type for callers.
                raise BrowserError('cannot start %s: %s' % (chromium, exc)) from exc
        # Our copies of Chromium's ends must go, or EOF would never show when it dies.
        os.close(to_read)
        os.close(from_write)
        to_read = from_write = None
        pipe = _Pipe(to_write, from_read, deadline, stderr_path)

        target = pipe.call('Target.createTarget', {'url': 'about:blank'})
        # flatten: the page session's messages share this pipe, tagged with its sessionId.
        session_id = pipe.call('Target.attachToTarget', {'targetId': target['targetId'], 'flatten': True})['sessionId']
        for domain in ('Runtime', 'Log', 'Page'):
            pipe.call('%s.enable' % domain, session_id=session_id)
        pipe.call('Emulation.setDeviceMetricsOverride', {
            'width': width, 'height': height, 'deviceScaleFactor': 1, 'mobile': False,
        }, session_id)
        # Events of about:blank must not be mistaken for the page's.
        pipe.events.clear()
        navigated = pipe.call('Page.navigate', {'url': url}, session_id)
        if navigated.get('errorText'):
            pipe.fail('navigating to %s failed: %s' % (url, navigated['errorText']))
        pipe.wait_event('Page.loadEventFired', session_id)

        report = {'url': url, 'exceptions': [], 'console_errors': [], 'results': {}, 'screenshot': None}
        report['title'] = _evaluate(pipe, session_id, 'document.title')
        for name, expression in (evaluate or {}).items():
            report['results'][name] = _evaluate(pipe, session_id, expression)
        if screenshot:
            report['screenshot'] = _screenshot(pipe, session_id, screenshot, width, height)
        # Everything the page logged up to the last answer has been read by now.
        _collect(pipe.events, session_id, report['exceptions'], report['console_errors'])
        return report
    finally:
        if proc is not None:
            _kill_all(proc, workdir)
        for fd in (to_read, to_write, from_read, from_write):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        shutil.rmtree(workdir, ignore_errors=True)
