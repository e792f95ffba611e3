# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""offline.yml on snapshots and logs built to hurt the machine that analyses them.

Each hostile snapshot is a real capture of a simulated node (homelab_cx4, small) with one
thing added: links out of the snapshot (absolute, relative, into /dev), a FIFO, a device
node (as root only), a setuid file, a 1 GiB member that compresses to about 1 MB, members
named with '..', and names that are no host names (a tarball called '...tar.gz', one with a
newline, nodes in capture.json with '/' and '..', names the playbook uses itself: its groups,
'all', 'localhost'), a directory named like a snapshot, and an HCA named with a superscript digit
('\u00b2'.isdigit() is true, int() refuses it). A secret with a unique marker sits next
to the snapshots, outside every one of them. The run must end with a report that names every
bad input, no byte of the secret in anything it wrote, nothing but files, directories and
links inside the output, and the whole run in bounded memory (prlimit --as) and time
(docs/security.md).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import time
import uuid
import zlib

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _capture
from tests.sim import render

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, 'tests', 'fixtures', 'public')
# ansible-playbook and its workers each get 1 GiB of address space: the facts of a small
# node need ~150 MB; reading a 1 GiB member whole, as an unbounded reader would, cannot fit.
ADDRESS_SPACE = 1 << 30
GIB = 1 << 30

NODE_DESC = 'sys/devices/pci0000:00/0000:00:02.0/0000:03:00.0/infiniband/mlx5_0/node_desc'
HCA_TYPE = 'sys/devices/pci0000:00/0000:00:02.0/0000:03:00.0/infiniband/mlx5_0/hca_type'
# What a terminal acts on: clear the screen, set the title, ring the bell, reverse what follows.
CONTROLS = '\x1b[2J\x1b]0;owned\x07\u202e'
RAW = ('\x1b', '\x07', '\x00', '\u202e')
JUNK_FILES = 20000


def _base_members(tmp_path):
    root = str(tmp_path / 'node')
    render.render(render.load_profile('homelab_cx4'), root)
    _facts, members, _notes, _warnings = _capture.capture(root)
    assert NODE_DESC in members
    # No export table: gdr_facts then reads /proc/kallsyms, which the hostile cases replace.
    return dict((name, m) for name, m in members.items() if 'symvers' not in name)


def _tar_body(members, extra=()):
    """An uncompressed tar (without its end-of-archive blocks) of members plus TarInfos."""
    buf = io.BytesIO()
    tar = tarfile.open(fileobj=buf, mode='w', format=tarfile.PAX_FORMAT)
    order = {'dir': 0, 'file': 1, 'link': 2}
    for name in sorted(members, key=lambda n: (order[members[n]['kind']], n)):
        member = members[name]
        info = tarfile.TarInfo(name)
        info.mode = 0o644
        if member['kind'] == 'dir':
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        elif member['kind'] == 'link':
            info.type, info.linkname = tarfile.SYMTYPE, member['target']
            tar.addfile(info)
        else:
            info.size = len(member['data'])
            tar.addfile(info, io.BytesIO(member['data']))
    for info, data in extra:
        tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()[:tar.offset]


def _write(path, body, tail=b''):
    with open(path, 'wb') as handle:
        handle.write(gzip.compress(body + tail + b'\0' * 1024, 6))


def _info(name, kind=tarfile.REGTYPE, **attrs):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = attrs.pop('mode', 0o644)
    for key, value in attrs.items():
        setattr(info, key, value)
    return info


def _without(members, *names):
    return dict((n, m) for n, m in members.items() if n not in names)


def _renamed(members, old, new):
    """members with ``old`` replaced by ``new`` in every name, link target and file content."""
    renamed = {}
    for name, member in members.items():
        member = dict(member)
        if member['kind'] == 'link':
            member['target'] = member['target'].replace(old, new)
        elif member['kind'] == 'file':
            member['data'] = member['data'].replace(old.encode(), new.encode())
        renamed[name.replace(old, new)] = member
    return renamed


def _bomb(path, members):
    """proc/kallsyms of 1 GiB of zeros, gzip'ed on the fly: ~1 MB on disk, never 1 GiB in memory."""
    header = _info('proc/kallsyms', size=GIB).tobuf(tarfile.PAX_FORMAT)
    packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b'\0' * (8 << 20)
    with open(path, 'wb') as handle:
        handle.write(packer.compress(_tar_body(_without(members, 'proc/kallsyms')) + header))
        for _chunk in range(GIB // len(zeros)):
            handle.write(packer.compress(zeros))
        handle.write(packer.compress(b'\0' * 1024))
        handle.write(packer.flush())


def _build(tmp_path, secret):
    members = _base_members(tmp_path)
    snapshots = tmp_path / 'snapshots'
    snapshots.mkdir()
    out = {}

    def add(node, body):
        _write(str(snapshots / (node + '.tar.gz')), body)
        out[node] = 'snapshot %s.tar.gz' % node

    add('good', _tar_body(members))
    # An absolute link and a relative one that climbs out, both to the secret.
    add('abslink', _tar_body(_without(members, NODE_DESC), [(_info(NODE_DESC, tarfile.SYMTYPE, linkname=secret), None)]))
    climb = '../' * 40 + secret.lstrip('/')
    add('rellink', _tar_body(_without(members, NODE_DESC), [(_info(NODE_DESC, tarfile.SYMTYPE, linkname=climb), None)]))
    # /proc/kallsyms -> /dev/zero: an unbounded reader reads until memory runs out.
    add('devzero', _tar_body(_without(members, 'proc/kallsyms'),
                             [(_info('proc/kallsyms', tarfile.SYMTYPE, linkname='/dev/zero'), None)]))
    # A FIFO where a file is read: open() waits for a writer forever.
    add('fifo', _tar_body(_without(members, 'proc/kallsyms'), [(_info('proc/kallsyms', tarfile.FIFOTYPE), None)]))
    # A setuid, world-writable file; members named with '..' (one climbing out of the output).
    add('setuid', _tar_body(members, [(_info('usr/bin/ofed_info', mode=0o4777, size=9), b'#!/bin/sh')]))
    add('dotdot', _tar_body(members, [(_info('../../../../escaped-by-dotdot', size=4), b'evil'),
                                      (_info('sys/../../escaped-too', size=4), b'evil')]))
    if os.geteuid() == 0:
        # A device node (only root can make one when unpacking): /dev/zero's numbers (1, 5).
        add('chardev', _tar_body(_without(members, 'proc/kallsyms'),
                                 [(_info('proc/kallsyms', tarfile.CHRTYPE, devmajor=1, devminor=5), None)]))
    # A device named mlx5_0\u00b2: '\u00b2'.isdigit() is true and int() refuses it; natural ordering
    # failed gdr_facts and then the report of every node. Analysed like any node now.
    add('superscript', _tar_body(_renamed(members, 'mlx5_0', 'mlx5_0\u00b2')))
    del out['superscript']
    # An HCA type that would clear the operator's screen and set the terminal's title, and a
    # saved-output directory of 20,000 junk files (20,000 console warnings): analysed like any node.
    crafted = dict(members)
    crafted[HCA_TYPE] = dict(members[HCA_TYPE], data=('MT4129' + CONTROLS + '\n').encode('utf-8'))
    junk = [(_info('.gpu_fabric_commands/roce_qos', tarfile.DIRTYPE, mode=0o755), None)]
    junk += [(_info('.gpu_fabric_commands/roce_qos/junk%05d.bin' % index, size=1), b'x') for index in range(JUNK_FILES)]
    add('crafted', _tar_body(crafted, junk))
    del out['crafted']
    # A directory where a tarball is expected ("Is a directory" stopped the run before any report).
    (snapshots / 'x.tar.gz').mkdir()
    out['x'] = 'snapshot x.tar.gz refused: not a regular file (a directory)'
    # Names the playbook gives a meaning: gpu_fabric_offline.tar.gz made the report list that host alone.
    for reserved in ('gpu_fabric_offline', 'gpu_fabric_offline_refused', 'all', 'ungrouped', 'localhost'):
        _write(str(snapshots / (reserved + '.tar.gz')), _tar_body(members))
    _bomb(str(snapshots / 'bomb.tar.gz'), members)
    out['bomb'] = 'snapshot bomb.tar.gz refused'
    # Names that are no host names: the tarballs are still named in the report.
    _write(str(snapshots / '...tar.gz'), _tar_body(members))
    _write(str(snapshots / 'bad\nname.tar.gz'), _tar_body(members))
    with open(str(snapshots / 'capture.json'), 'w') as handle:
        json.dump({'schema': 'hpc.gpu_fabric/capture-run', 'schema_version': 1, 'captured_at': '2025-01-01T00:00:00',
                   'nodes': {'good': 'ok', 'abslink': 'ok', '../../etc/evil': 'unreachable', 'a/b': 'failed: x'}}, handle)
    return str(snapshots), out


def _logs(tmp_path):
    """A readable nccl-tests run and one whose average line cannot be read."""
    logs = tmp_path / 'logs'
    logs.mkdir()
    with open(os.path.join(FIXTURES, 'nccl_tests', 'gcm_a100_allreduce_1node_8gpu.txt')) as handle:
        text = ''.join(line for line in handle if not line.startswith('## '))
    (logs / 'good.log').write_text(text)
    bad = ''.join(line if not line.startswith('# Avg bus bandwidth') else '# Avg bus bandwidth    : .\n'
                  for line in text.splitlines(True))
    assert bad != text
    (logs / 'bad_avg.log').write_text(bad)
    # A name that is not UTF-8 (find failed on it, and every log was lost), one in a directory
    # whose name is not, and one named to drive the terminal.
    with open(os.path.join(os.fsencode(str(logs)), b'run\xff\xfe.log'), 'w') as handle:
        handle.write(text)
    os.mkdir(os.path.join(os.fsencode(str(logs)), b'sub\xc0'))
    with open(os.path.join(os.fsencode(str(logs)), b'sub\xc0', b'x.log'), 'w') as handle:
        handle.write(text)
    (logs / ('title%s.log' % CONTROLS)).write_text(text)
    return str(logs)


def _outputs(out):
    """Every path below out, with its lstat."""
    for base, dirs, files in os.walk(out):
        for name in dirs + files:
            path = os.path.join(base, name)
            yield path, os.lstat(path)


def test_hostile_snapshots_never_reach_the_controller(tmp_path):
    marker = 'GF-SECRET-%s' % uuid.uuid4().hex
    secret = tmp_path / 'secret.txt'
    secret.write_text(marker + '\n')
    snapshots, expected = _build(tmp_path, str(secret))
    logs = _logs(tmp_path)
    out = str(tmp_path / 'report')
    cmd = ['prlimit', '--as=%d' % ADDRESS_SPACE, '--',
           os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'playbooks/offline.yml'),
           '-e', 'gpu_fabric_snapshots=' + snapshots, '-e', 'gpu_fabric_output_dir=' + out, '-e', 'gpu_fabric_import_logs=' + logs,
           # An exit policy that matches nothing: what could not be analysed still fails the run.
           '-e', "gpu_fabric_exit_policy=findings[?code=='NO_SUCH_CODE']"]
    env = dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    started = time.monotonic()
    try:
        run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=150, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail('offline.yml did not finish in 150 s (a FIFO or a bomb read?): %s' % (exc.stdout or b'')[-3000:])
    elapsed = time.monotonic() - started
    said = run.stdout[-4000:] + run.stderr[-3000:]
    assert 'PLAY RECAP' in run.stdout, said
    # Something could not be analysed: the run fails (rc 2, never a crash), after the report is written.
    assert run.returncode == 2, said
    assert elapsed < 120, elapsed

    # The report is written and names every bad input.
    with open(os.path.join(out, 'report.json')) as handle:
        report = json.load(handle)
    failed = dict((f['host'], f['evidence']['msg']) for f in report['findings'] if f['code'] == 'HOST_TASK_FAILED')
    for node, words in expected.items():
        if node == 'good':
            # Analysed as usual (homelab_cx4 has findings of its own, none about its snapshot).
            assert node not in failed and report['hosts'][node]['ports'] == 1, report['hosts'].get(node)
            continue
        assert node in failed and words in failed[node], (node, failed.get(node))
    assert 'absolute link' in failed['abslink'] and 'leaves the snapshot' in failed['rellink']
    assert 'FIFO' in failed['fifo'] and 'mode 4777 not kept' in failed['setuid']
    assert "'..' in the name" in failed['dotdot'] and 'more than 64 MiB' in failed['bomb']
    if os.geteuid() == 0:      # a device node can only be made as root (the snapshot holds one then)
        assert 'character device' in failed['chardev']
    refused_names = [host for host in failed if host.startswith('refused-')]
    assert sorted(refused_names) == ['refused-%2E%2E', 'refused-%2E%2E%2F%2E%2E%2Fetc%2Fevil', 'refused-a%2Fb', 'refused-all',
                                     'refused-bad%0Aname', 'refused-gpu_fabric_offline', 'refused-gpu_fabric_offline_refused',
                                     'refused-localhost', 'refused-ungrouped'], refused_names
    assert "the node name 'gpu_fabric_offline' is a name offline.yml uses itself" in failed['refused-gpu_fabric_offline']
    # Every snapshot is in the report: none hid the others, the bad ones are named, the good ones analysed.
    assert set(expected) | set(refused_names) | {'superscript'} <= set(report['hosts']), sorted(report['hosts'])
    assert 'superscript' not in failed and report['hosts']['superscript']['ports'] == 1, report['hosts']['superscript']
    with open(os.path.join(out, 'facts', 'superscript.json'), encoding='utf-8') as handle:
        facts = json.dumps(json.load(handle), ensure_ascii=False)
    assert '"mlx5_0\u00b2"' in facts and '"mlx5_0"' not in facts
    assert 'not analysed, or not all of it (the report names why)' in run.stdout and 'refused-gpu_fabric_offline' in run.stdout, said
    # A snapshot with members refused is still analysed with what was left of it.
    assert report['hosts']['abslink']['ports'] == 1 and report['hosts']['setuid']['ports'] == 1
    # The log the parser fails on is listed with why; the readable one is judged.
    imported = dict((os.path.basename(e['log']), e) for e in report['collective']['imported_logs'])
    bad = imported['bad_avg.log']
    assert imported['good.log']['recognised'] and imported['good.log']['status'] == 'ok'
    # Read as a failed run (its average line holds no number), not as a measurement.
    assert bad['recognised'] and bad['status'] == 'failed', bad
    # Names that are not UTF-8 are named (escaped) as not read; each costs only itself.
    skipped = sorted(e['log'] for e in report['collective']['imported_logs'] if 'not UTF-8' in (e.get('reason') or ''))
    assert [os.path.basename(e) for e in skipped] == ['run\\udcff\\udcfe.log', 'x.log'], skipped
    assert 'sub\\udcc0' in skipped[1]
    assert imported['title%s.log' % CONTROLS]['recognised'], sorted(imported)

    # The crafted node is analysed; nothing on the console acts on the terminal, and its junk
    # files are summarised, not one warning each.
    assert 'crafted' not in failed and report['hosts']['crafted']['ports'] == 1, report['hosts'].get('crafted')
    console = run.stdout + run.stderr
    assert not [ascii(c) for c in RAW if c in console], [line for line in console.splitlines() if any(c in line for c in RAW)][:5]
    assert '\\x1b[2J' in run.stdout      # the log's label, shown escaped
    assert console.count('junk') < 40, console.count('junk')
    assert 'more file(s) not used, not listed' in console, said
    # The HCA type reached the facts as the node had it (data is kept; only what is shown is escaped).
    with open(os.path.join(out, 'facts', 'crafted.json'), encoding='utf-8') as handle:
        assert json.load(handle)['ib']['devices'][0]['hca_type'].startswith('MT4129\x1b[2J')
    with open(os.path.join(out, 'report.html'), encoding='utf-8') as handle:
        html = handle.read()
    assert not [ascii(c) for c in RAW if c in html]

    # Nothing from outside the snapshots in any output, and nothing but files, directories and
    # links (every one of them pointing inside the output) - no setuid or world-writable mode.
    assert marker not in run.stdout and marker not in run.stderr
    for path, info in _outputs(out):
        mode = info.st_mode
        assert stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode), path
        if stat.S_ISLNK(mode):   # a symlink's own mode is always 0777 on Linux (symlink(7))
            assert os.path.realpath(path).startswith(out + os.sep), (path, os.readlink(path))
            continue
        assert not mode & 0o7002, (path, oct(mode))
        if stat.S_ISREG(mode):
            with open(path, 'rb') as handle:
                assert marker.encode() not in handle.read(), path
    assert not os.path.lexists(str(tmp_path / 'escaped-by-dotdot')) and not os.path.lexists(str(tmp_path / 'escaped-too'))
    assert not any(name.startswith('escaped') for name in os.listdir(out))
