# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The NCCL settings a job on this node gets without saying so: NCCL's configuration files, read
as NCCL reads them, and the NCCL release installed (the library and nccl.h).

NCCL 2.28.9, src/misc/param.cc (the release measured in tests/fixtures/real/h200x2/state/):
initEnvFunc() reads $NCCL_CONF_FILE when it is set and not empty, else ~/.nccl.conf (the home
directory of the passwd entry of getuid(): userHomeDir(), getpwuid), and then /etc/nccl.conf;
setEnvFile() puts each KEY=VALUE line into the process environment with setenv(name, value, 0),
which never overwrites. So the job's environment wins over every file, $NCCL_CONF_FILE or
~/.nccl.conf wins over /etc/nccl.conf, and within one file the first line of a name wins.
A line is read with getline(); one that starts with '#' is skipped, its '\\n' dropped, and one
without '=' skipped; the name is what comes before the first '=' (spaces and all, at most 1023
bytes), the value everything after it (at most 1023 bytes). NCCL prints a setting it then uses as
'NCCL_ALGO set by environment to Ring' whatever file it came from (nccl_conffile.txt there): the
log alone does not say which file, these reads do. (NCCL 2.29 reads $HOME instead of the passwd
entry and drops a '\\r' too; a '\\r' is dropped here as well.)

Reads go through one SysRoot (a live node, a snapshot, a simulated node), bounded; nothing
here raises for a file that is missing, unreadable, too large or not a regular file: its state
says why.
"""

from __future__ import annotations

import errno
import os
import pwd
import re
import stat
from typing import Any

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import NotRegularFile, SysRoot, TooLarge

# A configuration file is a few lines; one larger than this is no NCCL configuration and is not
# judged on a part of it (NCCL itself would read it all).
CONF_LIMIT = 1 << 20
# setEnvFile's buffers: char envVar[1024], envValue[1024], filled by strncpy(..., 1023).
NAME_MAX = 1023
VALUE_MAX = 1023
# Lines NCCL skips that are named in a file's 'ignored' (the count of the rest in 'ignored_more').
IGNORED_SHOWN = 20
SETTINGS_MAX = 512
SYSTEM_FILE = '/etc/nccl.conf'
HOME_FILE = '.nccl.conf'
# /etc/passwd of a snapshot or simulated root is read as a file, bounded.
PASSWD_LIMIT = 16 << 20
# Where the dynamic linker finds libnccl.so.2 on the usual distributions and NVIDIA's packages
# (libnccl2 installs to /usr/lib/x86_64-linux-gnu, the RHEL packages to /usr/lib64, the tarball to
# wherever NCCL_HOME is), after LD_LIBRARY_PATH.
LIBRARY_DIRS = ('/usr/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/lib64', '/usr/local/lib',
                '/usr/local/nccl/lib', '/opt/nccl/lib', '/usr/local/cuda/lib64', '/usr/lib')
HEADER_DIRS = ('/usr/include', '/usr/local/include', '/usr/local/nccl/include', '/opt/nccl/include', '/usr/local/cuda/include')
LIBRARY_NAME = 'libnccl.so.2'
# The package's file name carries the release: libnccl.so.2 -> libnccl.so.2.21.5.
_LIB_FILE_RE = re.compile(r'^libnccl\.so\.(?P<version>\d+\.\d+\.\d+)$')
# src/init.cc: #define VERSION_STRING "NCCL version " STR(NCCL_MAJOR) "." ... "+cuda" ..., a literal in
# the library's read-only data (the 'NCCL version 2.28.9+cuda13.0' line of every INFO log).
_LIB_STRING = b'NCCL version '
_LIB_STRING_RE = re.compile(r'^(?P<version>\d{1,3}\.\d{1,3}\.\d{1,3})')
# A library is some hundred MiB (fat binaries for every GPU architecture); the string was in the first 4 MiB of
# PyTorch's 207 MiB libnccl.so.2 (2.28.9) and of the system's 2.28.3, 3 ms each
# (tests/fixtures/real/h200x2/state/nccl_libraries.txt). The scan stops here.
LIBRARY_SCAN_LIMIT = 2 << 30
_CHUNK = 4 << 20
# nccl.h: '#define NCCL_MAJOR 2' (tests/fixtures/real/h200x2/state/nccl_h_version.txt).
_HEADER_RE = re.compile(r'^[ \t]*#[ \t]*define[ \t]+NCCL_(MAJOR|MINOR|PATCH)[ \t]+(\d{1,9})[ \t]*$', re.M)
_NAME_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, 'O_CLOEXEC', 0)


def parse_conf(data: bytes) -> dict[str, Any]:
    """{'settings': {NAME: value}, 'ignored': [{'line': n, 'why': ...}], 'ignored_more': n} of one
    configuration file's bytes, as NCCL 2.28.9's setEnvFile reads them (see the module's text)."""
    settings: dict[str, str] = {}
    ignored: list[dict[str, Any]] = []
    more = 0

    def skip(number: int, why: str) -> None:
        nonlocal more
        if len(ignored) < IGNORED_SHOWN:
            ignored.append({'line': number, 'why': why})
        else:
            more += 1

    for number, raw in enumerate(data.split(b'\n'), 1):
        if raw.startswith(b'#'):
            continue
        # A C string ends at its first NUL byte: NCCL sees nothing of the line past it.
        line = raw.split(b'\0', 1)[0]
        if line.endswith(b'\r'):
            line = line[:-1]
        if b'=' not in line:
            if line.strip():
                skip(number, 'no "=" in the line: NCCL skips it')
            continue
        name_bytes, _sep, value_bytes = line.partition(b'=')
        name = name_bytes[:NAME_MAX].decode('utf-8', 'replace')
        value = value_bytes[:VALUE_MAX].decode('utf-8', 'replace')
        if not _NAME_RE.match(name):
            # setenv(3) refuses an empty name; a name with spaces or other characters is set but no NCCL variable.
            skip(number, 'the name %r is no variable NCCL reads (spaces or other characters around it?)' % name[:64])
            continue
        if name in settings:
            skip(number, '%s again: the first line of it wins (setenv without overwrite)' % name)
            continue
        if len(settings) >= SETTINGS_MAX:
            skip(number, 'more than %d settings: not kept' % SETTINGS_MAX)
            continue
        settings[name] = value
    return {'settings': settings, 'ignored': ignored, 'ignored_more': more}


def _why(exc: BaseException) -> str:
    if isinstance(exc, TooLarge):
        return 'larger than %d MiB: not read (no NCCL configuration is that long)' % (CONF_LIMIT >> 20)
    if isinstance(exc, NotRegularFile):
        return 'not a regular file (a device, FIFO or socket): not read'
    if isinstance(exc, IsADirectoryError):
        return 'a directory, not a file: NCCL reads nothing from it'
    return 'unreadable: %s' % (getattr(exc, 'strerror', None) or exc)


def read_conf(root: SysRoot, path: str, source: str) -> dict[str, Any]:
    """One configuration file: {'path', 'source', 'state': 'read'|'absent'|why not, 'settings', ...}."""
    entry: dict[str, Any] = {'path': path, 'source': source, 'state': 'absent', 'settings': {}}
    try:
        # The SysRoot's own bounded read (a snapshot's RecordingSysRoot records it too).
        data = root._read(path, CONF_LIMIT, 'whole')  # pylint: disable=protected-access
    except OSError as exc:
        if getattr(exc, 'errno', None) not in (errno.ENOENT, errno.ENOTDIR) or isinstance(exc, (TooLarge, NotRegularFile)):
            entry['state'] = _why(exc)
        return entry
    parsed = parse_conf(data)
    entry.update(state='read', settings=parsed['settings'])
    if parsed['ignored']:
        entry['ignored'] = parsed['ignored']
    if parsed['ignored_more']:
        entry['ignored_more'] = parsed['ignored_more']
    return entry


def _passwd_home(root: SysRoot, user: str | None, uid: int | None) -> tuple[str | None, str | None]:
    """(home, why not) from the passwd file below a snapshot or simulated root."""
    data = root.cached('/etc/passwd', PASSWD_LIMIT)
    if data is None:
        return None, 'no readable /etc/passwd below the root'
    for line in data.decode('utf-8', 'replace').splitlines():
        fields = line.split(':')
        if len(fields) >= 7 and ((user is not None and fields[0] == user) or (user is None and fields[2] == str(uid))):
            return fields[5] or None, None if fields[5] else 'its passwd entry has no home directory'
    return None, 'no passwd entry for %s below the root' % (user if user is not None else 'uid %s' % uid)


def home_of(root: SysRoot, user: str | None = None) -> dict[str, Any]:
    """{'user', 'home', 'why'}: the home directory NCCL 2.28.9 reads ~/.nccl.conf from, that of the
    passwd entry of the user the collective runs as (``user``; None: this process's), never $HOME
    (a become'd process may carry another user's)."""
    uid = None if user else os.geteuid()
    if root.live:
        try:
            entry = pwd.getpwnam(user) if user else pwd.getpwuid(uid)  # type: ignore[arg-type]
        except KeyError:
            return {'user': user, 'home': None, 'why': 'no passwd entry for %s' % (user or 'uid %s' % uid)}
        return {'user': entry.pw_name, 'home': entry.pw_dir or None, 'why': None if entry.pw_dir else 'no home directory'}
    home, why = _passwd_home(root, user, uid)
    return {'user': user if user else 'uid %s' % uid, 'home': home, 'why': why}


def effective(env: dict[str, Any], files: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """{NAME: {'value', 'source'}} in NCCL's precedence: the environment, then the files in the
    order NCCL reads them (each name from the first that holds it)."""
    settings: dict[str, dict[str, str]] = {}
    for name, value in sorted((env or {}).items()):
        if str(name).startswith(('NCCL_', 'RCCL_', 'MCCL_')):
            settings[str(name)] = {'value': str(value), 'source': 'environment'}
    for entry in files:
        for name, value in entry.get('settings', {}).items():
            if name not in settings:
                settings[name] = {'value': value, 'source': entry['path']}
    return settings


def conf_files(root: SysRoot, env: dict[str, Any], home: str | None) -> list[dict[str, Any]]:
    """The files NCCL reads for a job with environment ``env``, in its order, each read."""
    files = []
    conf_file = str((env or {}).get('NCCL_CONF_FILE') or '')
    if conf_file:
        if conf_file.startswith('/'):
            files.append(read_conf(root, conf_file, 'NCCL_CONF_FILE'))
        else:
            files.append({'path': conf_file, 'source': 'NCCL_CONF_FILE', 'settings': {},
                          'state': 'a relative path: NCCL opens it from the job\'s working directory, not read here'})
    elif home:
        files.append(read_conf(root, home.rstrip('/') + '/' + HOME_FILE, 'home'))
    files.append(read_conf(root, SYSTEM_FILE, 'etc'))
    return files


def _version_in(data: bytes) -> str | None:
    """X.Y.Z after the first 'NCCL version ' in ``data`` that is followed by one, or None."""
    start = data.find(_LIB_STRING)
    while start >= 0:
        found = _LIB_STRING_RE.match(data[start + len(_LIB_STRING):start + len(_LIB_STRING) + 16].decode('ascii', 'replace'))
        if found:
            return found.group('version')
        start = data.find(_LIB_STRING, start + 1)
    return None


def _scan_version(root: SysRoot, path: str) -> str | None:
    """The release in the library's 'NCCL version X.Y.Z' string, reading at most LIBRARY_SCAN_LIMIT bytes."""
    flags = _OPEN_FLAGS if root.live else _OPEN_FLAGS | os.O_NOFOLLOW
    fd = os.open(root.host_path(path), flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(errno.EINVAL, 'not a regular file', path)
        tail = b''
        done = 0
        while done < LIBRARY_SCAN_LIMIT:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                return None
            done += len(chunk)
            version = _version_in(tail + chunk)
            if version:
                return version
            tail = chunk[-64:]
        return None
    finally:
        os.close(fd)


def library(root: SysRoot, dirs: list[str]) -> tuple[dict[str, Any] | None, str | None]:
    """({'version', 'path', 'how'} of the first libnccl.so.2 in ``dirs``, or None, why not)."""
    looked = []
    for directory in dirs:
        path = directory.rstrip('/') + '/' + LIBRARY_NAME
        if not root.exists(path):
            looked.append(directory)
            continue
        real = root.resolve(path) or path
        match = _LIB_FILE_RE.match(os.path.basename(real))
        if match:
            return {'version': match.group('version'), 'path': path, 'file': real, 'how': 'the file name of %s' % real}, None
        try:
            version = _scan_version(root, real)
        except OSError as exc:
            return None, '%s: %s' % (path, _why(exc))
        if version:
            return {'version': version, 'path': path, 'file': real,
                    'how': 'the "NCCL version" string in %s (its file name has no release)' % real}, None
        return None, '%s holds no "NCCL version X.Y.Z" string in its first %d GiB' % (real, LIBRARY_SCAN_LIMIT >> 30)
    return None, 'no %s in %s' % (LIBRARY_NAME, ', '.join(looked) or 'no directory')


def header(root: SysRoot, dirs: list[str]) -> tuple[dict[str, Any] | None, str | None]:
    """({'version', 'path'} from the NCCL_MAJOR/MINOR/PATCH macros of the first nccl.h in ``dirs``, or None, why not)."""
    looked = []
    for directory in dirs:
        path = directory.rstrip('/') + '/nccl.h'
        if not root.exists(path):
            looked.append(directory)
            continue
        try:
            text = root._read(path, CONF_LIMIT, 'whole').decode('utf-8', 'replace')  # pylint: disable=protected-access
        except OSError as exc:
            return None, '%s: %s' % (path, _why(exc))
        macros: dict[str, str] = {}
        for found in _HEADER_RE.finditer(text):
            macros.setdefault(found.group(1), found.group(2))
        if len(macros) < 3:
            return None, '%s defines no NCCL_MAJOR, NCCL_MINOR and NCCL_PATCH' % path
        return {'version': '.'.join(str(int(macros[part])) for part in ('MAJOR', 'MINOR', 'PATCH')), 'path': path}, None
    return None, 'no nccl.h in %s' % (', '.join(looked) or 'no directory')


def _dirs(value: Any) -> list[str]:
    return [d for d in str(value or '').split(':') if d.startswith('/')]


def read_nccl(root: SysRoot, env: dict[str, Any] | None = None, user: str | None = None, nccl_home: str | None = None,
              library_dirs: list[str] | None = None) -> dict[str, Any]:
    """gpu_fabric_nccl: {'user', 'home', 'files', 'settings', 'library', 'header', 'not_read'}.

    ``env``: the job's environment as the project gives it (fabric_collective_env: NCCL_CONF_FILE,
    LD_LIBRARY_PATH, NCCL_HOME); ``user``: the user the collective runs as (None: this process's);
    ``nccl_home``: the NCCL the benchmark was built against; ``library_dirs``: where to look for
    libnccl.so.2 instead of LD_LIBRARY_PATH and LIBRARY_DIRS."""
    env = dict((str(k), '' if v is None else str(v)) for k, v in (env or {}).items())
    not_read: dict[str, str] = {}
    who = home_of(root, user)
    if who['home'] is None:
        not_read['home'] = 'the home directory of %s: %s (~/.nccl.conf not read)' % (who['user'], who['why'])
    files = conf_files(root, env, who['home'])
    for entry in files:
        if entry['state'] not in ('read', 'absent'):
            not_read[entry['path']] = entry['state']
    home = nccl_home or env.get('NCCL_HOME') or None
    own = [home.rstrip('/') + '/lib'] if home else []
    dirs = list(library_dirs) if library_dirs else _dirs(env.get('LD_LIBRARY_PATH')) + own + list(LIBRARY_DIRS)
    lib, why = library(root, dirs)
    if why:
        not_read['library'] = why
    head, why = header(root, ([home.rstrip('/') + '/include'] if home else []) + list(HEADER_DIRS))
    if why:
        not_read['header'] = why
    return {'user': who['user'], 'home': who['home'], 'files': files, 'settings': effective(env, files),
            'library': lib, 'header': head, 'not_read': not_read}
