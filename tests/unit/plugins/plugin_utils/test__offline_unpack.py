# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Snapshots and logs someone else sent, unpacked and read as data (_offline, docs/security.md)."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
import time

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _host
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _offline


def _info(name, kind=tarfile.REGTYPE, data=None, **attrs):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = attrs.pop('mode', 0o644)
    for key, value in attrs.items():
        setattr(info, key, value)
    if data is not None:
        info.size = len(data)
    return info, data


def _tarball(path, members, fmt=tarfile.PAX_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w', format=fmt) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    with open(str(path), 'wb') as handle:
        handle.write(gzip.compress(buf.getvalue()))
    return str(path)


def _unpack(tmp_path, members, name='n1.tar.gz'):
    dest = tmp_path / 'root'
    dest.mkdir()
    return _offline.unpack(_tarball(tmp_path / name, members), str(dest)), dest


def _tree(dest):
    out = {}
    for base, dirs, files in os.walk(str(dest)):
        for name in dirs + files:
            path = os.path.join(base, name)
            info = os.lstat(path)
            rel = os.path.relpath(path, str(dest))
            if stat.S_ISLNK(info.st_mode):
                out[rel] = ('link', os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                out[rel] = ('dir', oct(info.st_mode & 0o7777))
            elif stat.S_ISREG(info.st_mode):
                out[rel] = ('file', oct(info.st_mode & 0o7777))
            else:
                out[rel] = ('other', oct(info.st_mode))
    return out


def test_a_capture_unpacks_as_it_was_written(tmp_path):
    notes, dest = _unpack(tmp_path, [
        _info('sys/devices/pci0000:00/0000:00:02.0', tarfile.DIRTYPE, mode=0o755),
        _info('sys/devices/pci0000:00/0000:00:02.0/vendor', data=b'0x15b3\n'),
        _info('sys/class/infiniband/mlx5_0', tarfile.SYMTYPE, linkname='../../devices/pci0000:00/0000:00:02.0'),
        _info('etc/modules-load.d/rdma.conf', tarfile.SYMTYPE, linkname='/dev/null'),
        _info('.gpu_fabric_capture.json', data=b'{}\n'),
    ])
    assert notes == []
    tree = _tree(dest)
    assert tree['sys/devices/pci0000:00/0000:00:02.0/vendor'] == ('file', '0o644')
    assert tree['sys/class/infiniband/mlx5_0'] == ('link', '../../devices/pci0000:00/0000:00:02.0')
    # /dev/null (a masked file, _capture._device_target) is re-rooted: never the controller's /dev.
    assert tree['etc/modules-load.d/rdma.conf'] == ('link', '../../dev/null')
    sysroot = SysRoot(str(dest))
    assert sysroot.text('/sys/class/infiniband/mlx5_0/vendor') == '0x15b3'
    assert _host._masked(sysroot, '/etc/modules-load.d/rdma.conf')


@pytest.mark.parametrize('member, words', [
    (_info('../escaped', data=b'x'), "refused ('..' in the name)"),
    (_info('sys/../../escaped', data=b'x'), "refused ('..' in the name)"),
    (_info('/etc/escaped', data=b'x'), 'refused (absolute name)'),
    (_info('proc/kallsyms', tarfile.FIFOTYPE), 'refused (FIFO: only files, directories and symlinks are unpacked)'),
    (_info('proc/kallsyms', tarfile.CHRTYPE, devmajor=1, devminor=5), 'refused (character device'),
    (_info('proc/kallsyms', tarfile.BLKTYPE, devmajor=8, devminor=0), 'refused (block device'),
    (_info('proc/kallsyms', tarfile.LNKTYPE, linkname='etc/passwd'), 'refused (hard link'),
    (_info('usr/bin/ofed_info', data=b'#!/bin/sh', mode=0o4755), 'mode 4755 not kept (stored 0644)'),
    (_info('usr/bin/ofed_info', data=b'#!/bin/sh', mode=0o666), 'mode 0666 not kept (stored 0644)'),
    (_info('sys/node_desc', tarfile.SYMTYPE, linkname='/etc/shadow'), "absolute link to '/etc/shadow' re-rooted"),
    (_info('sys/node_desc', tarfile.SYMTYPE, linkname='../../../../etc/shadow'), 'leaves the snapshot: re-rooted'),
    (_info('proc/kallsyms', tarfile.SYMTYPE, linkname='/dev/zero'), "absolute link to '/dev/zero' re-rooted"),
])
def test_what_is_refused_or_changed_is_noted(tmp_path, member, words):
    notes, dest = _unpack(tmp_path, [_info('sys', tarfile.DIRTYPE), member])
    assert len(notes) == 1 and words in notes[0], notes
    assert not os.path.lexists(str(tmp_path / 'escaped')) and not os.path.lexists('/etc/escaped')
    for rel, (kind, detail) in _tree(dest).items():
        assert kind in ('file', 'dir', 'link'), (rel, kind, detail)
        if kind == 'file':
            assert detail == '0o644', rel
        if kind == 'link':
            # Every link stays inside the root, on disk too.
            assert os.path.realpath(os.path.join(str(dest), rel)).startswith(str(dest) + os.sep), (rel, detail)


def test_no_member_lands_below_a_link_or_twice(tmp_path):
    notes, dest = _unpack(tmp_path, [
        _info('sys/up', tarfile.SYMTYPE, linkname='..'),
        _info('sys/up/escaped', data=b'x'),
        _info('sys/file', data=b'a'),
        _info('sys/file', tarfile.SYMTYPE, linkname='/etc/shadow'),
        _info('sys/file/below', data=b'x'),
    ])
    assert notes == ['sys/up/escaped: refused (below a symlink)', 'sys/file: refused (a second member of that name)',
                     'sys/file/below: refused (below a file)']
    assert _tree(dest)['sys/file'] == ('file', '0o644') and not os.path.lexists(str(dest / 'escaped'))


def test_a_tree_packed_from_its_own_top_unpacks_without_a_note(tmp_path):
    """`tar -C dir -czf node.tar.gz .`: GNU tar's first member is '.', every other './x'."""
    tree = tmp_path / 'tree'
    (tree / 'etc' / 'security').mkdir(parents=True)
    (tree / 'etc' / 'security' / 'limits.conf').write_text('* hard memlock unlimited\n')
    (tree / 'sys').mkdir()
    os.symlink('../etc', str(tree / 'sys' / 'up'))
    tree.chmod(0o700)
    archive = tmp_path / 'n1.tar.gz'
    tar = shutil.which('tar')
    if tar is None:
        pytest.skip('no tar command')
    subprocess.run([tar, '-C', str(tree), '-czf', str(archive), '.'], check=True)
    with tarfile.open(str(archive)) as packed:
        names = packed.getnames()
    assert names[0] == '.' and './etc/security/limits.conf' in names
    dest = tmp_path / 'root'
    dest.mkdir()
    assert _offline.unpack(str(archive), str(dest)) == []
    assert _tree(dest) == {'etc': ('dir', '0o755'), 'etc/security': ('dir', '0o755'), 'etc/security/limits.conf': ('file', '0o644'),
                           'sys': ('dir', '0o755'), 'sys/up': ('link', '../etc')}
    assert SysRoot(str(dest)).text('/sys/up/security/limits.conf') == '* hard memlock unlimited'
    # Through the import: the node is analysed with nothing refused.
    out = tmp_path / 'out'
    result = _offline.unpack_snapshots(str(tmp_path), str(out))
    assert result['nodes'] == {'n1': str(out / 'offline' / 'n1' / 'root')} and result['failures'] == {} and result['refused'] == {}


@pytest.mark.parametrize('name, kind, words', [
    ('.', tarfile.REGTYPE, 'refused (empty name)'),
    ('./', tarfile.SYMTYPE, 'refused (empty name)'),
    ('./../escaped', tarfile.REGTYPE, "refused ('..' in the name)"),
    ('/etc', tarfile.DIRTYPE, 'refused (absolute name)'),
])
def test_the_top_is_only_a_directory_and_nothing_climbs_out(tmp_path, name, kind, words):
    member = _info(name, kind, data=b'x' if kind == tarfile.REGTYPE else None, linkname='/etc' if kind == tarfile.SYMTYPE else '')
    notes, dest = _unpack(tmp_path, [_info('.', tarfile.DIRTYPE, mode=0o777), member, _info('./sys/a', data=b'a')])
    assert len(notes) == 1 and words in notes[0], notes
    assert _tree(dest) == {'sys': ('dir', '0o755'), 'sys/a': ('file', '0o644')}
    assert not os.path.lexists(str(tmp_path / 'escaped'))


@pytest.mark.parametrize('cap, value, members, words', [
    ('MEMBER_MAX_BYTES', 1000, [_info('proc/kallsyms', data=b'x' * 1001)], "'proc/kallsyms' holds 1001 bytes"),
    ('SNAPSHOT_MAX_BYTES', 1500, [_info('a', data=b'x' * 1000), _info('b', data=b'x' * 1000)], 'more than 0 MiB of content'),
    ('SNAPSHOT_MAX_MEMBERS', 3, [_info('d%d' % i, tarfile.DIRTYPE) for i in range(4)], 'more than 3 members'),
    ('HEADER_MAX_BYTES', 4096, [_info('sys/' + 'x' * 8000, data=b'x')], 'a tar header or read of'),
])
def test_caps_refuse_the_whole_snapshot(tmp_path, monkeypatch, cap, value, members, words):
    monkeypatch.setattr(_offline, cap, value)
    dest = tmp_path / 'root'
    dest.mkdir()
    with pytest.raises(_offline._Refused) as refused:
        _offline.unpack(_tarball(tmp_path / 'n1.tar.gz', members), str(dest))
    assert words in str(refused.value)


def test_a_member_over_the_cap_is_refused_from_its_header(tmp_path):
    # A header that declares 1 GiB, with no data behind it: refused before a byte is read.
    info = tarfile.TarInfo('proc/kallsyms')
    info.size = 1 << 30
    path = tmp_path / 'bomb.tar.gz'
    path.write_bytes(gzip.compress(info.tobuf(tarfile.PAX_FORMAT) + b'\0' * 1024))
    (tmp_path / 'root').mkdir()
    with pytest.raises(_offline._Refused) as refused:
        _offline.unpack(str(path), str(tmp_path / 'root'))
    assert 'more than 64 MiB' in str(refused.value)


# Named ids: gzip's header holds the time, and pytest-xdist workers that collect in different
# seconds would otherwise see different test ids and refuse to run.
@pytest.mark.parametrize('content', [b'not gzip', gzip.compress(b'not a tar' * 100)], ids=['not gzip', 'gzip, not a tar'])
def test_not_a_gzipped_tar_is_refused(tmp_path, content):
    (tmp_path / 'n1.tar.gz').write_bytes(content)
    (tmp_path / 'root').mkdir()
    with pytest.raises(_offline._Refused):
        _offline.unpack(str(tmp_path / 'n1.tar.gz'), str(tmp_path / 'root'))


@pytest.mark.parametrize('raw, name, reason', [
    ('gpu017', 'gpu017', None),
    ('node_1.rack-2', 'node_1.rack-2', None),
    ('..', 'refused-%2E%2E', "the node name '..' is not an inventory host name"),
    ('.', 'refused-%2E', "the node name '.' is not an inventory host name"),
    ('a/b', 'refused-a%2Fb', "the node name 'a/b' is not an inventory host name"),
    ('bad\nname', 'refused-bad%0Aname', "the node name 'bad\\nname' is not an inventory host name"),
    ('n1:22', 'refused-n1%3A22', "the node name 'n1:22' is not an inventory host name"),
    ('', 'refused-%00', "the node name '' is not an inventory host name"),
    ('refused-x', 'refused-refused-x', "the node name 'refused-x' is not an inventory host name"),
])
def test_node_names(raw, name, reason):
    assert _offline.node_name(raw) == (name, reason)


def test_odd_inputs_are_named_and_the_rest_is_analysed(tmp_path):
    snapshots = tmp_path / 'snapshots'
    snapshots.mkdir()
    good = [_info('proc/sys/kernel/osrelease', data=b'6.8.0\n')]
    _tarball(snapshots / 'n1.tar.gz', good)
    _tarball(snapshots / '...tar.gz', good)
    _tarball(snapshots / 'n2.tar.gz', good + [_info('proc/kallsyms', tarfile.FIFOTYPE)])
    _tarball(snapshots / 'n3.tar.gz', good)
    (snapshots / 'n4.tar.gz').write_bytes(b'garbage')
    os.symlink(str(snapshots / 'n1.tar.gz'), str(snapshots / 'n5.tar.gz'))
    (snapshots / 'capture.json').write_text(json.dumps({'captured_at': 'then', 'nodes': {
        'n1': 'ok', 'n3': 'unreachable', '../../etc': 'unreachable', 'a/b': 'ok'}}))
    out = tmp_path / 'out'
    result = _offline.unpack_snapshots(str(snapshots), str(out))
    assert sorted(result['nodes']) == ['n1', 'n2']
    assert result['nodes']['n1'] == str(out / 'offline/n1/root')
    assert SysRoot(result['nodes']['n1']).text('/proc/sys/kernel/osrelease') == '6.8.0'
    # capture.json says n3 was not captured: its older tarball is not used.
    assert result['lost'] == {'n3': 'unreachable'} and result['captured_at'] == 'then'
    assert [f['msg'] for f in result['failures']['n2']] == [
        'snapshot n2.tar.gz: 1 member(s) refused or changed: proc/kallsyms: refused (FIFO: only files, directories '
        'and symlinks are unpacked)']
    assert sorted(result['refused']) == ['n4', 'n5', 'refused-%2E%2E', 'refused-%2E%2E%2F%2E%2E%2Fetc']
    assert result['refused']['n4'].startswith("snapshot n4.tar.gz refused: not a gzip'ed tar")
    assert result['refused']['n5'].startswith('snapshot n5.tar.gz refused: cannot open')
    assert result['refused']['refused-%2E%2E'] == "'...tar.gz': the node name '..' is not an inventory host name"
    assert not os.path.lexists(str(out / 'offline/n4')) and not os.path.lexists(str(out / 'root'))
    # A capture.json that is not one is named too, and the snapshots are still analysed.
    (snapshots / 'capture.json').write_text('[')
    result = _offline.unpack_snapshots(str(snapshots), str(out))
    assert result['refused']['refused-capture.json'].startswith('capture.json not used')
    assert sorted(result['nodes']) == ['n1', 'n2', 'n3']


def test_logs_over_the_cap_are_listed_not_read(monkeypatch):
    monkeypatch.setattr(_offline, 'LOG_MAX_BYTES', 100)
    paths, refused = _offline.log_entries([{'path': '/l/a.log', 'size': 10}, {'path': '/l/b.log', 'size': 101}, '/l/c.log'])
    assert paths == ['/l/a.log', '/l/c.log']
    assert refused == [{'log': '/l/b.log', 'recognised': False, 'reason': 'not read: 101 bytes, more than 0 MiB'}]


def test_a_parser_crash_is_a_listed_file_not_a_lost_run():
    crashed = {'item': '/l/bad.log', 'failed': True, 'msg': 'MODULE FAILURE\nSee stdout/stderr for the exact error',
               'module_stderr': 'Traceback (most recent call last):\n  ...\nValueError: could not convert string to float: \'.\'\n'}
    result = _offline.collective_result([crashed], {}, refused=[{'log': '/l/huge.log', 'recognised': False, 'reason': 'not read'}])
    assert result['fleet'] is None
    assert result['imported_logs'] == [
        {'log': '/l/bad.log', 'recognised': False,
         'reason': "the parser failed on it: ValueError: could not convert string to float: '.'"},
        {'log': '/l/huge.log', 'recognised': False, 'reason': 'not read'}]
    assert _offline.collective_result([], {}) is None
    records = _offline.bench_records([dict(crashed, item={'server': 'n1', 'client': 'n2', 'rail': '0', 'memory': 'host',
                                                          'path': '/l/n1__n2__0__host.txt'})], {})
    assert records['n2'][0]['status'] == 'failed'
    assert 'could not convert' in records['n2'][0]['failure']['message']


def test_a_report_with_only_unreadable_logs_and_a_refused_snapshot_renders():
    from ansible_collections.hpc.gpu_fabric.plugins.filter import report as report_filter
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _html, _report
    collective = _offline.collective_result([{'item': '/l/x.log', 'failed': True, 'msg': 'boom'}], {})
    failure = {'stage': 'offline', 'task': 'Unpack each snapshot into its node root', 'msg': 'snapshot n1.tar.gz refused: x'}
    report = report_filter.fabric_report({'n1': {'gpu_fabric_failures': [failure]}}, ['n1'], None, collective, 'now')
    assert [f['code'] for f in report['findings']] == ['RUN_NOTHING_VALIDATED', 'HOST_TASK_FAILED']
    assert report['collective']['imported_logs'] == [{'log': '/l/x.log', 'recognised': False, 'reason': 'boom'}]
    assert 'snapshot n1.tar.gz refused' in _report.markdown(report, 'report.html') + _html.render(report)


@pytest.mark.parametrize('raw, name', [
    ('gpu_fabric_offline', 'refused-gpu_fabric_offline'),
    ('gpu_fabric_offline_refused', 'refused-gpu_fabric_offline_refused'),
    ('all', 'refused-all'),
    ('ungrouped', 'refused-ungrouped'),
    ('localhost', 'refused-localhost'),
    ('127.0.0.1', 'refused-127%2E0%2E0%2E1'),
])
def test_names_the_playbook_uses_itself_are_refused(raw, name):
    # A snapshot called gpu_fabric_offline.tar.gz made `hosts: gpu_fabric_offline` mean that host alone.
    got, reason = _offline.node_name(raw)
    assert got == name and 'a name offline.yml uses itself' in reason and ascii(raw) in reason
    assert _offline.node_name('allnodes') == ('allnodes', None) and _offline.node_name('node-localhost') == ('node-localhost', None)


def test_one_bad_snapshot_is_named_and_the_others_are_analysed(tmp_path, monkeypatch):
    snapshots = tmp_path / 'snapshots'
    snapshots.mkdir()
    good = [_info('proc/sys/kernel/osrelease', data=b'6.8.0\n')]
    for name in ('n1', 'n3', 'gpu_fabric_offline', 'gpu_fabric_offline_refused', 'all', 'localhost'):
        _tarball(snapshots / (name + '.tar.gz'), good)
    # A directory named like a snapshot: open() of it used to raise IsADirectoryError out of the filter.
    (snapshots / 'x.tar.gz').mkdir()
    # An error no check foresees (here: the unpacker itself fails on n3) refuses that snapshot only.
    real_unpack = _offline.unpack

    def unpack(archive, dest):
        if archive.endswith('n3.tar.gz'):
            raise RecursionError('maximum recursion depth exceeded')
        return real_unpack(archive, dest)
    monkeypatch.setattr(_offline, 'unpack', unpack)
    # Two inputs with the same stand-in name are both kept.
    _tarball(snapshots / '...tar.gz', good)
    (snapshots / 'capture.json').write_text(json.dumps({'nodes': {'..': 'unreachable', 'n1': 'ok'}}))
    out = tmp_path / 'out'
    result = _offline.unpack_snapshots(str(snapshots), str(out))
    assert sorted(result['nodes']) == ['n1']
    assert result['refused']['x'] == 'snapshot x.tar.gz refused: not a regular file (a directory)'
    assert result['refused']['n3'] == ("snapshot n3.tar.gz refused: the unpacker failed on it: "
                                       "RecursionError: 'maximum recursion depth exceeded'")
    assert not os.path.lexists(str(out / 'offline/n3')) and not os.path.lexists(str(out / 'offline/x'))
    for name in ('gpu_fabric_offline', 'gpu_fabric_offline_refused', 'all', 'localhost'):
        assert 'uses itself' in result['refused']['refused-' + name], result['refused']
        assert not os.path.lexists(str(out / 'offline' / name))
    assert result['refused']['refused-%2E%2E'].startswith('capture.json: the node name')
    assert result['refused']['refused-%2E%2E-2'].startswith("'...tar.gz': the node name")


def test_a_capture_json_nested_too_deep_is_named_and_the_snapshots_analysed(tmp_path):
    snapshots = tmp_path / 'snapshots'
    snapshots.mkdir()
    _tarball(snapshots / 'n1.tar.gz', [_info('proc/sys/kernel/osrelease', data=b'6.8.0\n')])
    # 6 kB: json.loads recurses once per level and raised RecursionError out of capture_run.
    (snapshots / 'capture.json').write_text('{"nodes": {"n2": ' + '[' * 3000 + ']' * 3000 + '}}')
    assert _offline.capture_run(str(snapshots)) == ({}, 'capture.json not used: nested too deep to read')
    result = _offline.unpack_snapshots(str(tmp_path / 'snapshots'), str(tmp_path / 'out'))
    assert sorted(result['nodes']) == ['n1'] and result['refused'] == {
        'refused-capture.json': 'capture.json not used: nested too deep to read'}
    # Deep, yet within what the parser reads: the state is named by its type, never by a repr that recurses as deep.
    (snapshots / 'capture.json').write_text('{"nodes": {"n2": ' + '[' * 200 + ']' * 200 + '}}')
    result = _offline.unpack_snapshots(str(snapshots), str(tmp_path / 'out'))
    assert result['lost'] == {'n2': 'not captured (a JSON list)'}


def test_a_rail_of_non_ascii_digits_is_a_name_not_an_index():
    # '\u00b2'.isdigit() is true and int('\u00b2') fails: the rail of <s>__<c>__\u00b2__host.txt is a name.
    assert _offline._rail('\u00b2', {'hcas': ['mlx5_0']}) == ('\u00b2', '\u00b2')
    assert _offline._rail('0', {'hcas': ['mlx5_0']}) == (0, 'mlx5_0')


def test_thousands_of_refused_names_with_one_stand_in_are_named_in_linear_time(tmp_path, monkeypatch):
    """Names cut to 80 characters share one stand-in: each is kept as <stand-in>-N. Numbering each
    from -2 again was quadratic (20,000 such names: 200 million lookups, minutes); the search
    goes on from the last N given. node_name's own quoting (linear, 80 characters a name) is
    checked on a few names, then stood in for, so that the bound measures the numbering."""
    snapshots = tmp_path / 'snapshots'
    snapshots.mkdir()
    count = 20000
    (snapshots / 'capture.json').write_text(json.dumps({'captured_at': 'then', 'nodes': dict(
        ('/' * 80 + str(index), 'unreachable') for index in range(count))}))
    stand_in = 'refused-' + '%2F' * 80
    assert _offline.node_name('/' * 80 + '1')[0] == _offline.node_name('/' * 80 + '2')[0] == stand_in
    monkeypatch.setattr(_offline, 'node_name', lambda raw: (stand_in, 'the node name is not an inventory host name'))
    start = time.perf_counter()
    result = _offline.unpack_snapshots(str(snapshots), str(tmp_path / 'out'))
    took = time.perf_counter() - start
    assert len(result['refused']) == count and stand_in in result['refused']
    assert sorted(result['refused']) == sorted([stand_in] + ['%s-%d' % (stand_in, n) for n in range(2, count + 1)])
    assert took < 5.0, '%.2f s' % took
