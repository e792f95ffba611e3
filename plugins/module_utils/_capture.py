# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Snapshot of exactly what the facts readers read on a node, for offline analysis.

The readers are run as the facts modules run them, with a :class:`RecordingSysRoot`
in place of the plain :class:`SysRoot`. It notes every node path a reader touched -
file contents as the bytes the reader got, directory listings, paths whose existence,
type or symlink chain mattered - and :func:`plan` turns those into tar members with
paths relative to the node root:

- a file read is stored with the bytes that were read, whatever ``stat`` said (sysfs
  attributes stat as 4096 bytes, /proc files as 0, and PCI config space reads 64 bytes
  for a user that is not root);
- a symlink met on the way is stored as a symlink at its real place with its target
  (an absolute or escaping target is made relative to the node root, so the extracted
  tree never points at the analysing machine's own /sys; a target in /dev is kept as
  it is, see _device_target);
- a directory is stored at its real place; an entry of a listed directory that no
  reader opened is stored with its type (an empty file for a regular file), so that
  the listing is the same;
- a file that could not be read (EACCES, EINVAL, ...) is left out and noted: a missing
  file and an unreadable one are both ``None`` to the readers.

Files are always stored below their real (symlink-free) path, never below a symlink,
so that any tar extracts them the same way. Re-running the readers with
``root=<extracted dir>`` returns the same facts (tests/unit/plugins/modules/test_fabric_capture.py).

No Ansible imports: the facts modules, the capture module and the tests share this.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import io
import json
import os
import posixpath
import stat
import tarfile
import time

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._gdr import read_gdr
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import list_rdma_devices, read_ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _ibdiag, _paths, _roce
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import WHOLE_LIMIT, SysRoot

try:
    # The host-layer reader (governor, memlock, module persistence) is newer than this
    # file; a build of the collection without it still captures the rest.
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _host
except ImportError:
    _host = None  # type: ignore[assignment]  # the captures below test for None

# Inside the tarball, next to the node's top-level directories; nothing reads it as node state.
MANIFEST = '.gpu_fabric_capture.json'
MANIFEST_SCHEMA = 'hpc.gpu_fabric/capture'

# Errors that mean "not there": absence is a fact, stored as absence.
_ABSENT = (errno.ENOENT, errno.ENOTDIR)
# Linux's limit (fs/namei.c MAXSYMLINKS), as SysRoot uses.
_MAX_LINKS = 40


def _gdr_reader(sysroot, run=None):
    facts = read_gdr(sysroot, list_rdma_devices(sysroot))
    read_host = getattr(_host, 'read_host', None)
    if read_host is not None:
        facts['host'] = read_host(sysroot)
    return facts


def _roce_reader(sysroot, run=None):
    # The ECN, CNP and RDMA CM ToS files are read through the sysroot (and so captured); the
    # DCB settings only through ``run`` (a CommandLog: its outputs are saved, _roce.SAVED_DIR).
    return _roce.read_roce(sysroot, read_ib(sysroot), run)


# What each facts module reads, called as the module calls it: reader(sysroot, run), ``run``
# the DCB tools' runner (a CommandLog) or None. A reader added to a facts module is added
# here too; test_fabric_capture compares the modules' own output on a node and on its
# snapshot, so a reader missing here fails that test.
READERS = {
    # ibv_devinfo never runs against a snapshot (ib_link_facts uses it only on /).
    'ib': lambda sysroot, run=None: read_ib(sysroot, {}),
    'gdr': _gdr_reader,
    'roce': _roce_reader,
}


class CommandLog(object):
    """The DCB reads of roce_qos_facts (mlnx_qos, dcb), run on the node through ``run``
    (_roce.tool_runner: an argument list, a timeout) and each answer kept, to be saved in the
    snapshot where roce_qos_facts ``from_log`` reads it (_roce.SavedOutputs).

    A tool that is not installed is an answer too (saved as such: the analysis says so, and
    falls back to dcb as on the node). Once a tool has timed out it is not run again on the
    other ports - its runs are noted as not run - so a hung tool costs one timeout, not one per port.
    """

    def __init__(self, run):
        self.run = run
        self.answers = {}      # (netdev, kind) -> (argv, answer, note)
        self._hung = set()

    def __call__(self, argv):
        argv = list(argv)
        key = _roce.saved_kind(argv)
        if key is not None and key in self.answers:
            return self.answers[key][1]
        note = None
        if argv[0] in self._hung:
            answer, note = (124, ''), 'not run: %s timed out on an earlier port' % argv[0]
        else:
            answer = self.run(argv)
            if answer is not None and answer[0] == 124:
                self._hung.add(argv[0])
                note = 'timed out (or rc 124)'
        if key is not None:
            self.answers[key] = (argv, answer, note)
        return answer

    def members(self):
        """{tar member name: member} of the saved outputs (and their directories)."""
        members = {}
        for (netdev, kind), (argv, answer, _note) in sorted(self.answers.items()):
            if _roce.netdev_name_problem(netdev):
                continue    # read_roce never asks for one; never a path either
            members['%s/%s.%s.txt' % (_roce.SAVED_DIR, netdev, kind)] = {
                'kind': 'file', 'data': _roce.saved_text(argv, answer).encode('utf-8', 'surrogateescape'), 'placeholder': False}
        if members:
            parts = _roce.SAVED_DIR.split('/')
            for index in range(1, len(parts) + 1):
                members['/'.join(parts[:index])] = {'kind': 'dir'}
        return members

    def summary(self):
        """What the manifest and the module say about each command: its file, rc or error."""
        out = []
        for (netdev, kind), (argv, answer, note) in sorted(self.answers.items()):
            out.append({'command': ' '.join(argv), 'file': '%s/%s.%s.txt' % (_roce.SAVED_DIR, netdev, kind),
                        'rc': answer[0] if answer is not None else None,
                        'error': 'not installed' if answer is None else note})
        return out


def _norm(rel):
    """'/sys//class/x/' -> '/sys/class/x' (lexical; '..' is left to the walk)."""
    return '/' + '/'.join(p for p in rel.split('/') if p and p != '.')


class RecordingSysRoot(SysRoot):
    """A SysRoot that remembers every node path the readers depended on, and how.

    The public read methods are overridden; ``path()`` is the catch-all: a reader (or a
    later SysRoot method) that builds a host path itself and reads it with ``os`` is
    noted in ``raw`` and its path is captured as it is when the snapshot is packed.
    """

    def __init__(self, root='/'):
        super(RecordingSysRoot, self).__init__(root)
        self.contents = {}     # node path as asked -> bytes the reader got
        self.listed = {}       # node path as asked -> entries returned
        self.queried = set()   # node paths whose existence, type or symlink chain mattered
        self.raw = set()       # node paths handed out by path() outside the methods below
        self.unreadable = {}   # node path as asked -> reason
        self.absent = set()    # node paths a reader tried to read that do not exist
        self._depth = 0

    @contextlib.contextmanager
    def _recorded(self):
        # The overridden methods record precisely what they do; path() calls made
        # inside them (SysRoot's own implementation) are not raw reads.
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    def path(self, rel):
        if self._depth == 0:
            self.raw.add(_norm(rel))
        return super(RecordingSysRoot, self).path(rel)

    def _failed(self, rel, exc):
        if getattr(exc, 'errno', None) in _ABSENT:
            self.absent.add(_norm(rel))
        else:
            self.unreadable[_norm(rel)] = getattr(exc, 'strerror', None) or str(exc)

    def _keep(self, rel, data):
        rel = _norm(rel)
        # Read twice (the same file through two paths, or binary() with two sizes):
        # the longer read holds the shorter one.
        if rel not in self.contents or len(data) > len(self.contents[rel]):
            self.contents[rel] = data

    def _read(self, rel, limit, how='whole'):
        # Every read of SysRoot (text, binary, cached) comes here, with SysRoot's own
        # bounds: the snapshot holds exactly the bytes the reader got.
        with self._recorded():
            try:
                data = super(RecordingSysRoot, self)._read(rel, limit, how)
            except OSError as exc:
                self._failed(rel, exc)
                raise
            self._keep(rel, data)
            return data

    def listdir(self, rel):
        with self._recorded():
            try:
                names = sorted(os.listdir(self.host_path(rel)))
            except (IOError, OSError) as exc:
                self._failed(rel, exc)
                return super(RecordingSysRoot, self).listdir(rel)
            self.listed[_norm(rel)] = names
            return names

    def exists(self, rel):
        with self._recorded():
            self.queried.add(_norm(rel))
            return super(RecordingSysRoot, self).exists(rel)

    def isdir(self, rel):
        with self._recorded():
            self.queried.add(_norm(rel))
            return super(RecordingSysRoot, self).isdir(rel)

    def resolve(self, rel):
        with self._recorded():
            self.queried.add(_norm(rel))
            return super(RecordingSysRoot, self).resolve(rel)

    def link_target(self, rel):
        with self._recorded():
            # plan() stores the symlinks on the way, the link itself among them.
            self.queried.add(_norm(rel))
            return super(RecordingSysRoot, self).link_target(rel)


class _Plan(object):
    """The tar members being collected: node path (no leading '/') -> member."""

    def __init__(self, sysroot):
        self.sysroot = sysroot
        self.members = {}
        self.skipped = {}
        self.placeholders = []
        self.rewritten = []
        self.conflicts = []
        self._real = {'/': '/'}

    def host(self, node_path):
        return SysRoot.path(self.sysroot, node_path)

    def add_dirs(self, node_path):
        """Every directory from the root down to node_path (a real, symlink-free path)."""
        parts = [p for p in node_path.split('/') if p]
        for index in range(1, len(parts) + 1):
            name = '/'.join(parts[:index])
            if name not in self.members:
                self.members[name] = {'kind': 'dir'}

    def add_link(self, node_path, target):
        name = node_path.lstrip('/')
        if name in self.members:
            return
        parent = posixpath.dirname(node_path)
        stored = target
        if _device_target(target):
            pass
        elif target.startswith('/') or climbs_above_root(parent, target):
            # Where the link leads on the node (an absolute target re-rooted, '/..' being
            # '/'), as a path relative to the link, so that it stays inside the extraction.
            stored = posixpath.relpath(posixpath.normpath(posixpath.join(parent, target)), parent)
        if stored != target:
            self.rewritten.append({'path': node_path, 'target': target, 'stored': stored})
        self.add_dirs(parent)
        self.members[name] = {'kind': 'link', 'target': stored}

    def add_file(self, node_path, data, placeholder=False):
        name = node_path.lstrip('/')
        old = self.members.get(name)
        if old is not None and old['kind'] == 'file' and not old.get('placeholder'):
            if placeholder:
                return
            if old['data'] != data:
                self.conflicts.append(node_path)
            if len(old['data']) >= len(data):
                return
        self.add_dirs(posixpath.dirname(node_path))
        self.members[name] = {'kind': 'file', 'data': data, 'placeholder': placeholder}

    def walk(self, rel, hops=0):
        """Follow rel as SysRoot.resolve does, storing each symlink met on the way.

        Returns the real node path, or None when a component is missing (the links up
        to there are stored: they are what made it missing). The real path of every
        prefix is remembered: thousands of files share a few dozen directories.
        """
        rel = _norm(rel)
        if rel in self._real:
            return self._real[rel]
        parent, name = posixpath.split(rel.rstrip('/'))
        if not name:
            return '/'
        real_parent = self.walk(parent or '/', hops)
        if real_parent is None:
            real = None
        elif name == '..':
            real = posixpath.dirname(real_parent)
        elif name == '.':
            real = real_parent
        else:
            candidate = posixpath.join(real_parent, name)
            host = self.host(candidate)
            try:
                info = os.lstat(host)
            except OSError:
                info = None
            if info is None:
                real = None
            elif stat.S_ISLNK(info.st_mode):
                target = os.readlink(host)
                self.add_link(candidate, target)
                if _device_target(target) or hops >= _MAX_LINKS:
                    if hops >= _MAX_LINKS:
                        self.skipped[candidate] = 'symlink loop'
                    real = None
                else:
                    # An absolute target is re-rooted, as SysRoot does.
                    real = self.walk(target if target.startswith('/') else real_parent + '/' + target, hops + 1)
            else:
                real = candidate
        self._real[rel] = real
        return real

    def add_existing(self, real, read_now=False):
        """A real path whose type mattered: a directory, or a file (empty unless read_now)."""
        try:
            info = os.lstat(self.host(real))
        except OSError:
            return
        if stat.S_ISDIR(info.st_mode):
            self.add_dirs(real)
        elif stat.S_ISREG(info.st_mode):
            if read_now:
                try:
                    # SysRoot's own bounded, regular-file-only read, not recorded again.
                    data = SysRoot._read(self.sysroot, real, WHOLE_LIMIT, 'whole')
                except (IOError, OSError) as exc:
                    self.skipped[real] = getattr(exc, 'strerror', None) or str(exc)
                    return
                self.add_file(real, data)
            elif real.lstrip('/') not in self.members:
                self.add_file(real, b'', placeholder=True)
        else:
            self.skipped[real] = 'not a regular file, directory or symlink'

    def add_entry(self, real_dir, name):
        """An entry of a listed directory, as itself (a symlink is not followed)."""
        node_path = posixpath.join(real_dir, name)
        if node_path in self.skipped:
            return
        host = self.host(node_path)
        try:
            info = os.lstat(host)
        except OSError:
            self.skipped[node_path] = 'listed, then gone before the snapshot was packed'
            return
        if stat.S_ISLNK(info.st_mode):
            self.add_link(node_path, os.readlink(host))
        else:
            self.add_existing(node_path)


def _device_target(target):
    """A link into /dev is kept as it is and not followed: device nodes are no node state a
    snapshot holds, and the target's text is the fact (a unit or modules-load.d file masked
    by a link to /dev/null, _host._masked), the same on any machine that unpacks it."""
    return target == '/dev' or target.startswith('/dev/')


def climbs_above_root(parent: str, target: str) -> bool:
    """Does a relative link ``target`` in directory ``parent`` climb above the node root
    (harmless on the node, where '/..' is '/', but out of the extraction directory in a
    tarball)? Capture keeps such a link out; offline unpacking re-roots it."""
    depth = len([p for p in parent.split('/') if p])
    for part in target.split('/'):
        if part == '..':
            depth -= 1
            if depth < 0:
                return True
        elif part and part != '.':
            depth += 1
    return False


def plan(sysroot):
    """Tar members for everything a RecordingSysRoot saw -> (members, notes)."""
    out = _Plan(sysroot)
    for rel, reason in sorted(sysroot.unreadable.items()):
        # Left out: to the readers a missing file and an unreadable one are both None
        # (an entry of a listed directory is then missing from the listing too).
        real = out.walk(rel)
        out.skipped[real or rel] = reason
    for rel in sorted(sysroot.absent):
        # Nothing to store but the symlinks on the way, which made it absent.
        out.walk(rel)
    for rel in sorted(sysroot.contents):
        real = out.walk(rel)
        if real is None:
            out.skipped[rel] = 'read, then gone before the snapshot was packed'
            continue
        out.add_file(real, sysroot.contents[rel])
    for rel in sorted(sysroot.listed):
        real = out.walk(rel)
        if real is None:
            continue
        out.add_dirs(real)
        for name in sysroot.listed[rel]:
            out.add_entry(real, name)
    for rel in sorted(sysroot.queried):
        real = out.walk(rel)
        if real is not None:
            out.add_existing(real)
    for rel in sorted(sysroot.raw - set(sysroot.contents) - set(sysroot.listed) - sysroot.queried):
        # Read by code that bypassed SysRoot's methods: what it read is not known, so the
        # whole file (or the directory and its entries) is taken as it is now.
        real = out.walk(rel)
        if real is None:
            continue
        out.add_existing(real, read_now=True)
        if os.path.isdir(out.host(real)):
            try:
                names = sorted(os.listdir(out.host(real)))
            except OSError:
                names = []
            for name in names:
                out.add_entry(real, name)
    out.placeholders = sorted('/' + name for name, member in out.members.items()
                              if member['kind'] == 'file' and member.get('placeholder'))
    notes = {
        'skipped': [{'path': path, 'reason': reason} for path, reason in sorted(out.skipped.items())],
        'placeholders': out.placeholders,
        'rewritten_links': out.rewritten,
        'conflicts': sorted(set(out.conflicts)),
        'raw_paths': sorted(sysroot.raw - set(sysroot.contents) - set(sysroot.listed) - sysroot.queried),
    }
    return out.members, notes


def capture(root='/', readers=('ib', 'gdr', 'roce'), run=None):
    """Run the readers through a RecordingSysRoot -> (facts per reader, members, notes, warnings).

    ``run``: the DCB tools' runner (_roce.tool_runner) for the RoCE reader, whose outputs are
    saved below _roce.SAVED_DIR (notes['commands'] lists them); None runs no tool."""
    unknown = [name for name in readers if name not in READERS]
    if unknown:
        raise ValueError('unknown reader(s) %s (known: %s)' % (', '.join(unknown), ', '.join(sorted(READERS))))
    sysroot = RecordingSysRoot(root)
    commands = CommandLog(run) if run is not None else None
    facts = {}
    for name in readers:
        facts[name] = READERS[name](sysroot, commands)
    members, notes = plan(sysroot)
    warnings = list(sysroot.warnings)
    notes['commands'] = commands.summary() if commands is not None else []
    if commands is not None:
        members.update(commands.members())
        for port in facts.get('roce') or []:
            if port.get('source') is None:
                warnings.append('RoCE port %s (%s/%s): its DCB settings are not in the snapshot: %s'
                                % (port.get('netdev'), port.get('hca'), port.get('port'), port.get('source_reason')))
    return facts, members, notes, warnings


def fabric_members(directory):
    """The fabric tools' outputs that ib_fabric_facts saved in ``directory`` (its save_to), as tar members
    below _ibdiag.SAVED_DIR, where its from_log reads them offline -> (members, skipped). Only the names
    from_log reads, regular files (no symlink, FIFO or device), each at most _ibdiag.SAVED_LIMIT bytes;
    what is not packed is in ``skipped`` ({path, reason}), as a file the readers could not read."""
    members, skipped = {}, []
    for name in _ibdiag.SAVED_NAMES:
        path = os.path.join(directory, name)
        if not os.path.lexists(path):
            continue
        try:
            data = _paths.read_regular(path, _ibdiag.SAVED_LIMIT)
        except (OSError, ValueError) as exc:
            skipped.append({'path': path, 'reason': getattr(exc, 'strerror', None) or str(exc)})
            continue
        members['%s/%s' % (_ibdiag.SAVED_DIR, name)] = {'kind': 'file', 'data': data, 'placeholder': False}
    if members:
        parts = _ibdiag.SAVED_DIR.split('/')
        for index in range(1, len(parts) + 1):
            members['/'.join(parts[:index])] = {'kind': 'dir'}
    return members, skipped


def summary(members):
    """Counts of the members: files (placeholders included), links, directories, content bytes."""
    counts = {'files': 0, 'links': 0, 'directories': 0, 'bytes': 0, 'placeholders': 0}
    for member in members.values():
        if member['kind'] == 'file':
            counts['files'] += 1
            counts['bytes'] += len(member['data'])
            counts['placeholders'] += 1 if member.get('placeholder') else 0
        elif member['kind'] == 'link':
            counts['links'] += 1
        else:
            counts['directories'] += 1
    return counts


def manifest(root, readers, members, notes, warnings, captured_at=None):
    counts = summary(members)
    return dict({
        'schema': MANIFEST_SCHEMA,
        'schema_version': 1,
        'captured_at': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(captured_at or time.time())),
        'node': os.uname()[1] if root in ('/', '') else None,
        'root': root,
        'readers': list(readers),
        'warnings': list(warnings),
    }, counts=counts, **notes)


def write_tar(fileobj, members, meta, mtime=None):
    """members (and the manifest) as a gzip'ed tar into a binary file object.

    Directories first, so that every tar creates them before their entries; modes are
    normalised (0755 directories, 0644 files: a 0555 /proc directory in the tarball
    would make the extracted tree hard to remove). The tar is built in memory and
    compressed in one go: thousands of small members written through gzip one by one
    took three times as long (a snapshot is a few MB before compression).
    """
    mtime = int(mtime or time.time())
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode='w', format=tarfile.PAX_FORMAT) as tar:
        order = {'dir': 0, 'file': 1, 'link': 2}
        for name in sorted(members, key=lambda n: (order[members[n]['kind']], n)):
            member = members[name]
            info = _info(name, mtime)
            if member['kind'] == 'dir':
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            elif member['kind'] == 'link':
                info.type = tarfile.SYMTYPE
                info.linkname = member['target']
                info.mode = 0o777
                tar.addfile(info)
            else:
                info.size = len(member['data'])
                tar.addfile(info, io.BytesIO(member['data']))
        data = (json.dumps(meta, indent=1, sort_keys=True) + '\n').encode()
        info = _info(MANIFEST, mtime)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with gzip.GzipFile(fileobj=fileobj, mode='wb', compresslevel=6, mtime=mtime) as packed:
        packed.write(raw.getvalue())


def _info(name, mtime):
    info = tarfile.TarInfo(name)
    info.mtime = mtime
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = 'root'
    return info
