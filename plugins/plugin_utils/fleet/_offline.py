# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Saved benchmark outputs, turned into what a live run hands to the report (playbook offline.yml).

- perftest client outputs named ``<server>__<client>__<rail>__<host|gpu>.txt`` (parsed by
  perftest_run ``from_log``) become the records the fabric_bench role keeps, and then
  exactly what ``bench_report`` makes of them (the report's ``bench``);
- nccl-tests / rccl-tests / mccl outputs (parsed by collective_bench ``from_log``) become
  what the fabric_collective role leaves in ``fabric_collective_result`` (the report's
  ``collective``): the run over the most nodes is the fleet run, judged against the NICs
  of the snapshots as the role judges it.

A log carries no error counters (no ``counters_delta``), no server side and no culprit
search; the report simply has none of those.
"""

from __future__ import annotations

import gzip
import json
import os
import posixpath
import re
import shutil
import stat
import tarfile
import zlib
from typing import Any, Iterable, cast

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective, _ibdiag, _printable
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._capture import climbs_above_root
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import WHOLE_LIMIT, normalise_path
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _tasks

# Names and HCAs may hold single underscores (gpu_node_1, mlx5_1); '__' separates the fields.
_NAME_MAX = 255
PERFTEST_NAME_RE = re.compile(r'^(?P<server>.+?)__(?P<client>.+?)__(?P<rail>.+?)__(?P<memory>host|gpu)\.(?:txt|log)$')
COLLECTIVE_SUFFIXES = ('.log', '.txt', '.json')
# How deep the logs directory is searched: a ticket's outputs are a few levels deep; before Python
# 3.12 os.walk recurses, and a tree thousands of levels deep would end the search (RecursionError).
LOGS_MAX_DEPTH = 32


def printable(name: object) -> str:
    """``name`` as the console shows it (a loop label, a message): module_utils/_printable.py.
    Ansible prints a loop label as it is, so a log named '\\x1b]0;...\\x07.txt' would otherwise
    drive the operator's terminal."""
    return _printable.printable(name)


def classify(paths: Iterable[str] | None, refused: Iterable[str] | None = ()) -> dict[str, Any]:
    """Log paths (and the 'log' of each file not read) -> {'perftest': [{path, server, client, rail, memory}], 'collective': [path],
    'labels': {path: its file name, printable}}.

    Any *.log/*.txt/*.json that is not named as a perftest pair is a collective candidate;
    whether it is one is the parser's call (an unrecognised file is reported, not fatal).
    """
    perftest: list[dict[str, Any]] = []
    collective: list[str] = []
    for path in sorted(paths or []):
        name = os.path.basename(path)
        # Three lazy runs split by '__' try every split of a name of underscores (cubic): matched
        # only on a name a file system holds (NAME_MAX, 255 bytes: linux/limits.h).
        match = PERFTEST_NAME_RE.match(name) if len(name) <= _NAME_MAX else None
        if match:
            entry: dict[str, Any] = match.groupdict()
            entry['path'] = path
            perftest.append(entry)
        elif name.endswith(COLLECTIVE_SUFFIXES):
            collective.append(path)
    # The name each file is shown by on the console (loop labels, messages); also of the files
    # not read (``refused``: their 'log' is already shown escaped), which the summary names.
    labels = dict((path, printable(os.path.basename(path))) for path in list(paths or []) + list(refused or []))
    return {'perftest': perftest, 'collective': collective, 'labels': labels}


def _rail(rail: str, plan: Any) -> tuple[Any, Any]:
    """(rail number, HCA name or None) from a file name's rail: an index into the node's HCAs, or a name."""
    hcas = (plan or {}).get('hcas') or []
    if rail.isascii() and rail.isdigit():   # not '\u00b2': isdigit() is true for it, int() refuses it
        index = int(rail)
        return index, hcas[index] if index < len(hcas) else None
    return (hcas.index(rail) if rail in hcas else rail), rail


def bench_records(results: Iterable[dict[str, Any]] | None, plans: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """perftest_run from_log results (a loop's ``results``, each with its ``item``) ->
    {client host: [records as the fabric_bench role keeps them]}."""
    records: dict[str, list[dict[str, Any]]] = {}
    for result in results or []:
        entry = result.get('item') or {}
        if not entry.get('server'):
            continue
        server, client = entry['server'], entry['client']
        rail, client_hca = _rail(entry['rail'], plans.get(client))
        _server_rail, server_hca = _rail(entry['rail'], plans.get(server))
        # The log's own banner names the client's device; it beats the plan's rail order.
        client_hca = ((result.get('settings') or {}).get('device')) or client_hca
        test: dict[str, Any] = {'side': 'client', 'server': server, 'client': client, 'rail': rail, 'round': None,
                                'memory': entry['memory'], 'server_hca': server_hca, 'client_hca': client_hca}
        if entry['memory'] == 'gpu':
            test['gpu'] = ((plans.get(client) or {}).get('gpu_by_hca') or {}).get(client_hca)
        outcome = dict(result)
        if result.get('failed') or not result.get('status'):
            outcome.update(status='failed', failure=result.get('failure') or {
                'kind': 'task_failed', 'message': failure_text(result) if result.get('failed') else
                'perftest_run could not parse %s' % entry['path']})
        record = _bench.record_of(test, outcome, None, None)
        record['log'] = entry['path']
        records.setdefault(client, []).append(record)
    return records


def bench_report(results: Iterable[dict[str, Any]] | None, plans: dict[str, Any], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """bench_report's output (pairs, matrix, verdicts, thresholds) from perftest logs, plus
    ``imported_logs``: which file gave which pair."""
    records = bench_records(results, plans)
    nodes: dict[str, Any] = {}
    for host in set(plans) | set(records):
        nodes[host] = {'records': records.get(host, []), 'plan': plans.get(host) or {}}
    report: dict[str, Any] = _bench.report(nodes, options or {})
    report['imported_logs'] = sorted(
        ({'log': r['log'], 'server': r['server'], 'client': r['client'], 'rail': r['rail'], 'memory': r['memory'],
          'status': r['status']} for rs in records.values() for r in rs), key=lambda e: e['log'])
    return report


def failure_text(result: dict[str, Any]) -> str:
    """Why a from_log task failed on a file, in one line: the module's message, and for a
    crash (MODULE FAILURE) the exception's last line from its stderr."""
    msg = str(result.get('msg') or (result.get('failure') or {}).get('message') or 'not parsed')
    if msg.startswith('MODULE FAILURE'):
        lines = [line for line in str(result.get('module_stderr') or result.get('exception') or '').splitlines() if line.strip()]
        msg = 'the parser failed on it: %s' % (lines[-1].strip() if lines else msg.splitlines()[0])
    return msg[:500]


def _recognised(result: dict[str, Any]) -> bool:
    if result.get('failed'):
        return False
    return (result.get('failure') or {}).get('kind') != 'unparsed'


def collective_result(results: Iterable[dict[str, Any]] | None, nodes_ib: dict[str, Any] | None, healthy: float = _collective.HEALTHY_RATIO,
                      warn: float = _collective.WARN_RATIO, refused: Iterable[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """collective_bench from_log results (a loop's ``results``, each with its ``item``, the path)
    -> the shape of the fabric_collective role's ``fabric_collective_result``, or None.

    The run over the most hosts (then the most ranks) is the fleet run. A multi-node run is
    judged against the NICs of the snapshots (collective_expected: the median node's ACTIVE
    port rates / 8); a run on one node moves data over NVLink/xGMI, which the NICs say
    nothing about, so it is judged for failures and corruption only.

    ``refused``: logs not handed to the parser (log_entries), listed as not recognised. When
    no run is recognised but a file was refused or the parser failed on one, the result has
    no fleet run and still lists them: a bad file is named in the report, never dropped.
    """
    imported: list[dict[str, Any]] = list(refused or [])
    runs: list[tuple[int, int, Any, dict[str, Any], list[Any]]] = []
    bad = bool(refused)
    for result in results or []:
        path = result.get('item')
        if not _recognised(result):
            imported.append({'log': path, 'recognised': False, 'reason': failure_text(result)})
            bad = bad or bool(result.get('failed'))
            continue
        hosts = sorted(set(result.get('hosts') or []))
        runs.append((-len(hosts), -len(result.get('ranks') or []), path, result, hosts))
    if not runs:
        # A file that is simply no collective output (a README) is no reason for a result.
        if not bad:
            return None
        return {'expected': None, 'ranks_per_node': None, 'fleet': None, 'search': None, 'other_runs': [],
                'imported_logs': sorted(imported, key=lambda e: e['log'] or '')}
    runs.sort(key=lambda run: run[:3])
    fleet_hosts = runs[0][4]
    expected: dict[str, Any]
    if len(fleet_hosts) > 1:
        # Rank host names are the nodes' own names; use the snapshots of those nodes when
        # they are all there, else every snapshot.
        chosen = dict((h, ib) for h, ib in (nodes_ib or {}).items() if h in fleet_hosts)
        expected = _collective.expected_busbw(chosen if len(chosen) == len(fleet_hosts) else (nodes_ib or {}))
    else:
        expected = {'gbs': None, 'basis': 'the run is on one node (NVLink/xGMI): the NICs do not bound it'}
    judged: list[dict[str, Any]] = []
    for _hosts, _ranks, path, result, hosts in runs:
        entry = dict(result)
        for key in ('item', 'ansible_loop_var', 'changed', 'failed', 'invocation', 'msg', 'verdict'):
            entry.pop(key, None)
        entry['verdict'] = _collective.judge(entry, expected['gbs'] if len(hosts) > 1 else None, healthy, warn)
        entry['log'] = path
        judged.append(entry)
        imported.append({'log': path, 'recognised': True, 'benchmark': entry.get('benchmark'), 'hosts': hosts,
                         'status': entry.get('status'), 'verdict': entry['verdict'].get('status')})
    fleet = judged[0]
    per_host: dict[Any, int] = {}
    for rank in fleet.get('ranks') or []:
        per_host[rank.get('host')] = per_host.get(rank.get('host'), 0) + 1
    return {'expected': expected, 'ranks_per_node': min(per_host.values()) if per_host else None,
            'fleet': fleet, 'search': None, 'other_runs': judged[1:],
            'imported_logs': sorted(imported, key=lambda e: e['log'] or '')}


# ---------------------------------------------------------------------------------------------
# Snapshots someone else sent: unpacked as data, never trusted (docs/security.md).

# Caps of one snapshot. A capture of an 8-GPU, 9-HCA node holds ~10,000 members and a few MB
# (the largest file is /proc/kallsyms, 5-15 MB): each cap leaves ten times that or more.
MEMBER_MAX_BYTES = WHOLE_LIMIT           # one file: what SysRoot reads of a file at most
SNAPSHOT_MAX_BYTES = 256 << 20           # the content of all files together
SNAPSHOT_MAX_MEMBERS = 200000            # files, directories and links
# Any single read tarfile makes while parsing headers (a pax header, a GNU long name): a
# real header is under a kB; tarfile would otherwise read a header of any declared size whole.
HEADER_MAX_BYTES = 1 << 20
# capture.json is ~1 kB per hundred nodes.
CAPTURE_RUN_MAX_BYTES = 4 << 20
# A saved benchmark output: nccl-tests with NCCL_DEBUG=INFO over a few hundred ranks is tens
# of MB; the parsers read a log whole.
LOG_MAX_BYTES = 256 << 20

SUFFIX = '.tar.gz'
# An inventory host name that is also a safe file name: no '/', no whitespace or control
# character, not '.' or '..' (the first character is no dot), no ':' (add_host reads
# 'name:port'), no pattern characters ('[', '*', ',').
_NODE_RE = re.compile(r'^[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,252}$')
_REFUSED_PREFIX = 'refused-'
_DEV_NULL = '/dev/null'
# Names offline.yml itself gives a meaning: its groups, Ansible's implicit groups and the
# controller's own host (Ansible's constants LOCALHOST: localhost, 127.0.0.1, ::1). A snapshot
# called gpu_fabric_offline.tar.gz made `hosts: gpu_fabric_offline` mean that one host: the report
# listed it alone and dropped every other snapshot. Every gpu_fabric_* name is kept for the
# collection's own groups.
_RESERVED_NAMES = frozenset(('all', 'ungrouped', 'localhost', '127.0.0.1', '::1'))
_RESERVED_PREFIX = 'gpu_fabric'


def node_name(raw: object) -> tuple[str, str | None]:
    """(name, None) for a usable node name; (a stand-in name, reason) otherwise.

    The stand-in percent-encodes every character outside [A-Za-z0-9_-], so that the bad input
    is still named in the report (as a failed host) and can be told apart from the others."""
    reserved = isinstance(raw, str) and (raw in _RESERVED_NAMES or raw.startswith(_RESERVED_PREFIX))
    if isinstance(raw, str) and _NODE_RE.match(raw) and not raw.startswith(_REFUSED_PREFIX) and not reserved:
        return raw, None
    text = raw if isinstance(raw, str) else type(raw).__name__
    quoted = ''.join(c if (c.isascii() and c.isalnum()) or c in '_-' else
                     ''.join('%%%02X' % b for b in c.encode('utf-8', 'replace')) for c in text[:80])
    if reserved:
        return _REFUSED_PREFIX + quoted, ('the node name %s is a name offline.yml uses itself (a group or the controller): '
                                          'rename the snapshot' % ascii(text[:80]))
    return _REFUSED_PREFIX + (quoted or '%00'), 'the node name %s is not an inventory host name' % ascii(text[:80])


def _open_regular(path: str, max_bytes: int) -> bytes:
    """Bytes of a regular file that is no symlink, at most ``max_bytes`` (ValueError past it)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, 'O_CLOEXEC', 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError('not a regular file')
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                return b''.join(chunks)
            chunks.append(chunk)
            size += len(chunk)
        raise ValueError('larger than %d MiB' % (max_bytes >> 20))
    finally:
        os.close(fd)


def capture_run(directory: str) -> tuple[dict[str, Any], str | None]:
    """capture.json of a snapshot directory -> (its content or {}, what was wrong with it or None)."""
    path = os.path.join(directory, 'capture.json')
    if not os.path.lexists(path):
        return {}, None
    try:
        run = json.loads(_open_regular(path, CAPTURE_RUN_MAX_BYTES).decode('utf-8'))
    except (OSError, ValueError) as exc:
        return {}, 'capture.json not used: %s' % (getattr(exc, 'strerror', None) or exc)
    except RecursionError:
        # A few kB of '[' nest deeper than Python's parser recurses (capture.yml writes 3 levels).
        return {}, 'capture.json not used: nested too deep to read'
    if not isinstance(run, dict) or not isinstance(run.get('nodes', {}), dict):
        return {}, 'capture.json not used: not a capture run (no "nodes" object)'
    return run, None


class _Bounded(object):
    """The decompressed stream of a snapshot, as tarfile reads it, within a budget: no read
    or seek past ``budget`` bytes, no single read over HEADER_MAX_BYTES (data is copied in
    1 MiB chunks). A gzip bomb costs the budget's decompression time, never memory."""

    def __init__(self, fileobj: gzip.GzipFile, budget: int) -> None:
        self._fileobj = fileobj
        self._budget = budget

    def _check(self, end: int) -> None:
        if end > self._budget:
            raise _Refused('the archive expands past %d MiB' % (self._budget >> 20))

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0 or size > HEADER_MAX_BYTES:
            raise _Refused('a tar header or read of %s bytes (over %d MiB)' % (size, HEADER_MAX_BYTES >> 20))
        self._check(self._fileobj.tell() + size)
        return self._fileobj.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence != 0:
            raise _Refused('unexpected seek in the archive')
        self._check(offset)
        return self._fileobj.seek(offset)

    def tell(self) -> int:
        return self._fileobj.tell()


class _Refused(Exception):
    """The whole snapshot is refused (a cap, or not a gzip'ed tar)."""


def _member_name(member: tarfile.TarInfo) -> str:
    """The member's relative name, or raise ValueError with why it is refused."""
    name = member.name
    if '\0' in name or name.startswith('/') or name.startswith('\\'):
        raise ValueError('absolute name')
    parts = [p for p in name.split('/') if p and p != '.']
    if '..' in parts:
        raise ValueError("'..' in the name")
    return '/'.join(parts)


def _link_target(name: str, target: str) -> tuple[str, str | None]:
    """A symlink's target as stored: relative, normalised, inside the root -> (stored, note).

    On the node '/..' is '/', and an absolute target names a path of the node: both are
    re-rooted, as SysRoot follows them. The stored form is '../' * k + a path down, from the
    link's directory (a real directory: no member lies below a symlink), so that whatever
    follows the links on disk stays inside the root. Links into /dev (_capture._device_target:
    /dev/null masks a unit or modules-load.d file) are re-rooted too: the snapshot holds no
    device, and the machine that reads it never opens its own."""
    if not target or '\0' in target or len(target) > 4095:
        raise ValueError('empty or invalid link target')
    parent = '/' + posixpath.dirname(name)
    joined = target if target.startswith('/') else posixpath.join(parent, target)
    node_path = normalise_path(joined)
    stored = posixpath.relpath(node_path, parent)
    note = None
    if target.startswith('/'):
        if node_path != _DEV_NULL:
            note = 'absolute link to %s re-rooted' % ascii(target[:200])
    elif climbs_above_root(parent, target):
        note = 'link to %s leaves the snapshot: re-rooted' % ascii(target[:200])
    return stored, note


def unpack(archive: str, dest: str) -> list[str]:
    """Unpack the snapshot ``archive`` into the new directory ``dest`` -> [notes on members].

    Only directories (0755), regular files (0644) and symlinks (re-rooted, see _link_target)
    are made, by this code and owned by whoever runs it: no device, FIFO, hard link, setuid or
    world-writable mode, owner or time from the archive. A member with an absolute name, '..',
    below a symlink or a file, or twice, is refused and noted. Raises _Refused (the whole
    snapshot) when the archive is not a gzip'ed tar or passes a cap.
    """
    notes: list[str] = []
    kinds = {'': 'dir'}
    total = members = 0
    try:
        fd = os.open(archive, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, 'O_CLOEXEC', 0))
    except OSError as exc:
        raise _Refused('cannot open: %s' % (exc.strerror or exc))
    # Checked before fdopen, which raises IsADirectoryError on a directory named <node>.tar.gz.
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _Refused('not a regular file (%s)' % _kind_of(mode))
    with os.fdopen(fd, 'rb') as raw:
        budget = SNAPSHOT_MAX_BYTES + SNAPSHOT_MAX_MEMBERS * 2048
        try:
            with gzip.GzipFile(fileobj=raw, mode='rb') as unzipped, \
                    tarfile.open(fileobj=cast(Any, _Bounded(unzipped, budget)), mode='r:') as tar:
                # (cast: what tarfile reads is duck-typed; _Bounded has the reads and seeks it makes, no write.)
                for member in tar:
                    members += 1
                    if members > SNAPSHOT_MAX_MEMBERS:
                        raise _Refused('more than %d members' % SNAPSHOT_MAX_MEMBERS)
                    if member.isreg():
                        # The header's size, checked before a byte of it is read.
                        if member.size > MEMBER_MAX_BYTES:
                            raise _Refused('%s holds %d bytes, more than %d MiB' % (
                                ascii(member.name[:200]), member.size, MEMBER_MAX_BYTES >> 20))
                        total += member.size
                        if total > SNAPSHOT_MAX_BYTES:
                            raise _Refused('more than %d MiB of content' % (SNAPSHOT_MAX_BYTES >> 20))
                    note = _unpack_member(tar, member, dest, kinds)
                    if note:
                        notes.append('%s: %s' % (ascii(member.name[:200])[1:-1], note))
        except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise _Refused('not a gzip\'ed tar (%s)' % exc)
        except OSError as exc:
            raise _Refused('cannot unpack: %s' % (exc.strerror or exc))
    return notes


def _kind_of(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, 'a directory'), (stat.S_ISFIFO, 'a FIFO'), (stat.S_ISCHR, 'a character device'),
                       (stat.S_ISBLK, 'a block device'), (stat.S_ISSOCK, 'a socket')):
        if test(mode):
            return kind
    return 'mode %o' % stat.S_IFMT(mode)


def _unpack_member(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: str, kinds: dict[str, str]) -> str | None:
    """Make one member below dest; None, or a note saying what was refused or changed."""
    try:
        name = _member_name(member)
    except ValueError as exc:
        return 'refused (%s)' % exc
    if not name:
        # '.' (or './'): the snapshot's own top, as `tar -C dir -czf node.tar.gz .` writes it
        # first. dest is that directory already (0755, made here); only a directory may name it.
        return None if member.isdir() else 'refused (empty name)'
    parts = name.split('/')
    for index in range(1, len(parts)):
        prefix = '/'.join(parts[:index])
        kind = kinds.get(prefix)
        if kind is None:
            os.mkdir(os.path.join(dest, prefix), 0o755)
            kinds[prefix] = 'dir'
        elif kind != 'dir':
            return 'refused (below a %s)' % ('symlink' if kind == 'link' else 'file')
    if name in kinds:
        return None if kinds[name] == 'dir' and member.isdir() else 'refused (a second member of that name)'
    path = os.path.join(dest, name)
    special = member.mode & 0o7000 or member.mode & 0o002
    if member.isdir():
        os.mkdir(path, 0o755)
        kinds[name] = 'dir'
    elif member.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
        source = tar.extractfile(member)
        if source is None:   # never: tarfile gives every regular member its data
            return 'refused (no data)'
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, 'O_CLOEXEC', 0), 0o644)
        with os.fdopen(fd, 'wb') as handle:
            left = member.size
            while left > 0:
                chunk = source.read(min(1 << 20, left))
                if not chunk:
                    break
                handle.write(chunk)
                left -= len(chunk)
        kinds[name] = 'file'
    elif member.issym():
        try:
            stored, note = _link_target(name, member.linkname)
        except ValueError as exc:
            return 'refused (%s)' % exc
        if hasattr(tarfile, 'data_filter'):
            # Python's own check (PEP 706) of the link as stored: it must stay below dest.
            try:
                tarfile.data_filter(member.replace(name=name, linkname=stored, deep=False), dest)
            except tarfile.FilterError as exc:
                return 'refused (%s)' % exc
        os.symlink(stored, path)
        kinds[name] = 'link'
        return note
    else:
        kind = {tarfile.CHRTYPE: 'character device', tarfile.BLKTYPE: 'block device', tarfile.FIFOTYPE: 'FIFO',
                tarfile.LNKTYPE: 'hard link', tarfile.GNUTYPE_SPARSE: 'sparse file'}.get(member.type, 'member of type %r' % member.type)
        return 'refused (%s: only files, directories and symlinks are unpacked)' % kind
    if special:
        return 'mode %04o not kept (stored %s)' % (member.mode, '0755' if member.isdir() else '0644')
    return None


def unpack_snapshots(directory: str, out_dir: str) -> dict[str, Any]:
    """The snapshots of ``directory`` (<node>.tar.gz and capture.json), each unpacked into
    <out_dir>/offline/<node>/root (replaced) -> what offline.yml adds as hosts:

    ``nodes`` {node: root} to analyse; ``lost`` {node: reason} that capture.json names as not
    captured (an older tarball of such a node is not used); ``failures`` {node: [message]} of
    what was wrong with a snapshot that was still analysed (members refused or changed), as
    validate.yml keeps a rescued failure (_tasks.failure_record);
    ``refused`` {node or stand-in name: message} of snapshots and names not analysed at all;
    ``captured_at``.
    """
    result: dict[str, Any] = {'nodes': {}, 'lost': {}, 'failures': {}, 'refused': {}, 'captured_at': None}
    suffixes: dict[str, int] = {}   # _refuse: the last -N suffix given to each refused name
    run, problem = capture_run(directory)
    if problem:
        _refuse(result, suffixes, _REFUSED_PREFIX + 'capture.json', problem)
    result['captured_at'] = run.get('captured_at') if isinstance(run.get('captured_at'), str) else None
    for raw, state in sorted((run.get('nodes') or {}).items()):
        if state == 'ok':
            continue
        name, why = node_name(raw)
        if why:
            _refuse(result, suffixes, name, 'capture.json: %s' % why)
        else:
            # Never the repr of a container: it recurses as deep as the JSON nests.
            result['lost'][name] = state[:2000] if isinstance(state, str) else 'not captured (a JSON %s)' % type(state).__name__
    base = os.path.join(out_dir, 'offline')
    for entry in sorted(os.listdir(directory)):
        if not entry.endswith(SUFFIX):
            continue
        name, why = node_name(entry[:-len(SUFFIX)])
        if why:
            _refuse(result, suffixes, name, '%s: %s' % (ascii(entry[:200]), why))
            continue
        if name in result['lost']:
            continue
        tree = os.path.join(base, name)
        if os.path.lexists(tree):
            shutil.rmtree(tree)
        root = os.path.join(tree, 'root')
        os.makedirs(root, 0o755)
        reason: str | None
        try:
            notes = unpack(os.path.join(directory, entry), root)
        except _Refused as exc:
            reason = str(exc)
        # Whatever one snapshot does to the unpacker (an error no check foresaw), it is named
        # and the others are still analysed: one bad file never costs the run its report.
        except Exception as exc:  # pylint: disable=broad-except
            reason = 'the unpacker failed on it: %s: %s' % (type(exc).__name__, ascii(str(exc)[:300]))
        else:
            reason = None
        if reason is not None:
            shutil.rmtree(tree, ignore_errors=True)
            _refuse(result, suffixes, name, 'snapshot %s refused: %s' % (entry, reason))
            continue
        result['nodes'][name] = root
        if notes:
            shown = '; '.join(notes[:20]) + ('; and %d more' % (len(notes) - 20) if len(notes) > 20 else '')
            result['failures'][name] = [_tasks.failure_record('snapshot %s: %d member(s) refused or changed: %s' % (entry, len(notes), shown),
                                                              'offline', 'Unpack each snapshot into its node root')]
    result['nodes'] = fabric_first(result['nodes'])
    return result


def fabric_first(nodes: dict[str, str]) -> dict[str, str]:
    """{node: root} with the snapshots that hold the fabric tools' outputs (_ibdiag.SAVED_DIR) first:
    validate.yml reads the fabric from the first node with an InfiniBand port, and capture.yml saved
    those outputs on the node it read them from (playbooks/offline.yml adds the hosts in this order)."""
    saved = [name for name, root in nodes.items() if os.path.isdir(os.path.join(root, _ibdiag.SAVED_DIR))]
    return dict([(name, nodes[name]) for name in saved] + [(name, root) for name, root in nodes.items() if name not in saved])


def _refuse(result: dict[str, Any], suffixes: dict[str, int], name: str, message: str) -> None:
    """Keep a refused input under its stand-in name; two inputs with the same stand-in (a '...tar.gz'
    and a node '..' of capture.json) are both kept, the later one as <name>-2, -3, ...

    ``suffixes`` {name: the last N given} (one per unpack_snapshots run): the search for a free
    name goes on from there, so thousands of hostile names with one stand-in cost linear time,
    not a walk from -2 for each one."""
    taken = result['refused']
    unique, count = name, suffixes.get(name, 1)
    if count > 1:
        unique = '%s-%d' % (name, count)
    while unique in taken or unique in result['nodes'] or unique in result['lost']:
        count += 1
        unique = '%s-%d' % (name, count)
    suffixes[name] = count
    taken[unique] = message


def _readable_name(path: str) -> bool:
    """True when ``path`` is text Ansible can carry (UTF-8): a file name read with surrogateescape
    (PEP 383) that is not would make the task that returns it fail, and with it the whole import."""
    try:
        path.encode('utf-8')
    except UnicodeEncodeError:
        return False
    return True


def find_logs(directory: object) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The saved outputs under ``directory``, as ansible.builtin.find found them (recursively,
    regular files named *.log, *.txt or *.json that are not hidden, no symlink followed):
    ([{path, size}], [{log, recognised: False, reason}]).

    A name that is not UTF-8 (bytes from another system) is skipped and named, escaped: find
    returned it as it was, and ansible-core 2.19 refuses such a string in a module's result
    ('Refusing to deserialize an invalid UTF8 string value'), which lost every log of the import.
    """
    files: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    top_dir = str(directory)

    def unreadable(error: OSError) -> None:
        refused.append({'log': printable(getattr(error, 'filename', None) or top_dir), 'recognised': False,
                        'reason': 'not read: %s' % printable(error.strerror or error)})

    for top, dirs, names in os.walk(top_dir, onerror=unreadable):
        dirs.sort()
        if dirs and top.count(os.sep) - top_dir.rstrip(os.sep).count(os.sep) >= LOGS_MAX_DEPTH:
            refused.append({'log': printable(top), 'recognised': False,
                            'reason': 'not searched: %d directories below, more than %d levels deep' % (len(dirs), LOGS_MAX_DEPTH)})
            dirs[:] = []
        for name in sorted(names):
            if name.startswith('.') or not name.endswith(COLLECTIVE_SUFFIXES):
                continue
            path = os.path.join(top, name)
            try:
                info = os.lstat(path)
            except OSError as exc:
                unreadable(exc)
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            if not _readable_name(path):
                refused.append({'log': printable(path), 'recognised': False,
                                'reason': 'not read: the file name is not UTF-8 (shown with its bytes escaped); rename it'})
                continue
            files.append({'path': path, 'size': info.st_size})
    return files, refused


def log_entries(files: Iterable[Any] | None) -> tuple[list[Any], list[dict[str, Any]]]:
    """find's files (dicts with path, size, or paths) -> (paths to parse, [{log, recognised: False, reason}])."""
    paths: list[Any] = []
    refused: list[dict[str, Any]] = []
    for entry in files or []:
        path = entry.get('path') if isinstance(entry, dict) else entry
        size = entry.get('size') if isinstance(entry, dict) else None
        if isinstance(size, int) and size > LOG_MAX_BYTES:
            refused.append({'log': path, 'recognised': False,
                            'reason': 'not read: %d bytes, more than %d MiB' % (size, LOG_MAX_BYTES >> 20)})
        else:
            paths.append(path)
    return paths, refused
