# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""NCCL's configuration files read as NCCL 2.28.9 reads them (src/misc/param.cc), the release of the
library and of nccl.h, and the real runs' ENV lines (tests/fixtures/real/h200x2/state/)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _nccl, _nccl_conf
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from ansible_collections.hpc.gpu_fabric.plugins.modules import nccl_facts
from tests.unit.plugins.modules.utils import run_module

HERE = os.path.dirname(os.path.abspath(__file__))
STATE = os.path.join(HERE, '..', '..', '..', 'fixtures', 'real', 'h200x2', 'state')


def _state(name):
    with open(os.path.join(STATE, name)) as handle:
        return handle.read()


# The real runs: what each log's ENV lines say NCCL used (every rank's lines merged), whatever file it came from.
@pytest.mark.parametrize('name, env', [
    ('nccl_healthy.txt', {'NCCL_NVLS_ENABLE': '0'}),
    ('nccl_maxnch1.txt', {'NCCL_NVLS_ENABLE': '0', 'NCCL_MAX_NCHANNELS': '1'}),
    ('nccl_proto_ll.txt', {'NCCL_NVLS_ENABLE': '0', 'NCCL_PROTO': 'LL'}),
    # NCCL_CONF_FILE: NCCL_MAX_NCHANNELS printed by rank 0 only, NCCL_ALGO by both ranks.
    ('nccl_conffile.txt', {'NCCL_NVLS_ENABLE': '0', 'NCCL_MAX_NCHANNELS': '2', 'NCCL_ALGO': 'Ring'}),
    ('nccl_homeconf.txt', {'NCCL_NVLS_ENABLE': '0', 'NCCL_NTHREADS': '64', 'NCCL_PROTO': 'Simple'}),
    ('nccl_etcconf.txt', {'NCCL_NVLS_ENABLE': '0', 'NCCL_BUFFSIZE': '262144'}),
    ('nccl_buffsize.txt', {'NCCL_NVLS_ENABLE': '0', 'NCCL_BUFFSIZE': '65536'}),
])
def test_the_real_runs_env_lines(name, env):
    parsed = _nccl.parse_text(_state(name))
    assert parsed['transport']['env'] == env
    assert parsed['versions']['library_version'] == '2.28.9+cuda13.0'


@pytest.mark.parametrize('data, settings, ignored', [
    (b'NCCL_ALGO=Ring\nNCCL_MAX_NCHANNELS=2\n', {'NCCL_ALGO': 'Ring', 'NCCL_MAX_NCHANNELS': '2'}, []),
    # '#' only at the start of a line is a comment; blank lines and lines without '=' are skipped.
    (b'# NCCL_ALGO=Tree\n\nNCCL_PROTO=Simple # not a comment\n', {'NCCL_PROTO': 'Simple # not a comment'}, []),
    (b'NCCL_ALGO Ring\n', {}, [1]),
    # The first line of a name wins (setenv without overwrite); the value is everything after the first '='.
    (b'NCCL_BUFFSIZE=1\nNCCL_BUFFSIZE=2\nNCCL_X=a=b\n', {'NCCL_BUFFSIZE': '1', 'NCCL_X': 'a=b'}, [2]),
    # A name with spaces is set but no variable NCCL reads; an empty name setenv refuses.
    (b' NCCL_ALGO =Ring\n=x\n', {}, [1, 2]),
    (b'NCCL_ALGO=Ring\r\n', {'NCCL_ALGO': 'Ring'}, []),
    # Binary: a C string ends at its first NUL byte.
    (b'NCCL_ALGO=Ri\0ng\n\0NCCL_PROTO=LL\n\xff\xfe=1\n', {'NCCL_ALGO': 'Ri'}, [3]),
    (b'NCCL_V=' + b'x' * 5000 + b'\n', {'NCCL_V': 'x' * 1023}, []),
])
def test_parse_conf_as_nccl_reads_it(data, settings, ignored):
    parsed = _nccl_conf.parse_conf(data)
    assert parsed['settings'] == settings
    assert [item['line'] for item in parsed['ignored']] == ignored


def test_the_real_nodes_etc_nccl_conf():
    # A blank line first; every line a setting (names NCCL never reads among them: setenv sets them all the same).
    with open(os.path.join(STATE, 'etc_nccl.conf'), 'rb') as handle:
        parsed = _nccl_conf.parse_conf(handle.read())
    assert parsed == {'settings': {'NCCL_NVLS_ENABLE': '0', 'TORCH_SYMM_MEM_DISABLE_MULTICAST': '1', 'NVSHMEM_DISABLE_NVLS': '1'},
                      'ignored': [], 'ignored_more': 0}


def test_many_ignored_lines_are_counted_not_listed():
    parsed = _nccl_conf.parse_conf(b'junk\n' * 1000)
    assert len(parsed['ignored']) == _nccl_conf.IGNORED_SHOWN and parsed['ignored_more'] == 1000 - _nccl_conf.IGNORED_SHOWN


def _node(tmp_path, etc=None, home=None, conf=None):
    root = tmp_path / 'node'
    (root / 'etc').mkdir(parents=True)
    (root / 'home' / 'gpu').mkdir(parents=True)
    (root / 'etc' / 'passwd').write_text('root:x:0:0:root:/root:/bin/sh\ngpu:x:1000:1000::/home/gpu:/bin/sh\n')
    for path, data in ((root / 'etc' / 'nccl.conf', etc), (root / 'home' / 'gpu' / '.nccl.conf', home), (root / 'my.conf', conf)):
        if data is not None:
            path.write_bytes(data)
    return str(root)


def test_precedence_environment_then_home_then_etc(tmp_path):
    root = _node(tmp_path, etc=b'NCCL_BUFFSIZE=262144\nNCCL_ALGO=Tree\n', home=b'NCCL_ALGO=Ring\nNCCL_PROTO=Simple\n')
    facts = _nccl_conf.read_nccl(SysRoot(root), {'NCCL_PROTO': 'LL'}, user='gpu')
    assert [(f['source'], f['state']) for f in facts['files']] == [('home', 'read'), ('etc', 'read')]
    assert facts['settings'] == {'NCCL_PROTO': {'value': 'LL', 'source': 'environment'},
                                 'NCCL_ALGO': {'value': 'Ring', 'source': '/home/gpu/.nccl.conf'},
                                 'NCCL_BUFFSIZE': {'value': '262144', 'source': '/etc/nccl.conf'}}


def test_nccl_conf_file_replaces_the_home_file(tmp_path):
    root = _node(tmp_path, home=b'NCCL_ALGO=Tree\n', conf=b'NCCL_MAX_NCHANNELS=2\nNCCL_ALGO=Ring\n')
    facts = _nccl_conf.read_nccl(SysRoot(root), {'NCCL_CONF_FILE': '/my.conf'}, user='gpu')
    assert [(f['path'], f['source'], f['state']) for f in facts['files']] == [
        ('/my.conf', 'NCCL_CONF_FILE', 'read'), ('/etc/nccl.conf', 'etc', 'absent')]
    assert facts['settings']['NCCL_ALGO']['source'] == '/my.conf'
    assert facts['settings']['NCCL_CONF_FILE'] == {'value': '/my.conf', 'source': 'environment'}
    relative = _nccl_conf.read_nccl(SysRoot(root), {'NCCL_CONF_FILE': 'my.conf'}, user='gpu')
    assert 'relative' in relative['files'][0]['state'] and 'my.conf' in relative['not_read']


def test_absent_files_and_no_home(tmp_path):
    root = _node(tmp_path)
    facts = _nccl_conf.read_nccl(SysRoot(root), {}, user='nobody')
    assert [f['state'] for f in facts['files']] == ['absent'] and facts['settings'] == {}
    assert 'nobody' in facts['not_read']['home'] and 'library' in facts['not_read'] and 'header' in facts['not_read']


def test_hostile_files_say_why_and_lose_nothing(tmp_path):
    root = _node(tmp_path, home=b'NCCL_ALGO=Ring\n')
    (tmp_path / 'node' / 'etc' / 'nccl.conf').write_bytes(b'NCCL_X=1\n' * (_nccl_conf.CONF_LIMIT // 8))
    facts = _nccl_conf.read_nccl(SysRoot(root), {}, user='gpu')
    assert facts['files'][1]['state'].startswith('larger than 1 MiB') and facts['settings']['NCCL_ALGO']['value'] == 'Ring'
    assert facts['not_read']['/etc/nccl.conf'] == facts['files'][1]['state']
    os.remove(os.path.join(root, 'etc', 'nccl.conf'))
    os.mkdir(os.path.join(root, 'etc', 'nccl.conf'))
    assert 'directory' in _nccl_conf.read_nccl(SysRoot(root), {}, user='gpu')['files'][1]['state']
    # On the live root a symlink to /dev/zero is followed, as NCCL would, and refused: NCCL would read it without end.
    link = str(tmp_path / 'zero.conf')
    os.symlink('/dev/zero', link)
    assert _nccl_conf.read_conf(SysRoot('/'), link, 'NCCL_CONF_FILE')['state'].startswith('not a regular file')
    # Below a snapshot's root the link stays inside it, where there is no /dev/zero.
    os.symlink('/dev/zero', os.path.join(root, 'zero.conf'))
    assert _nccl_conf.read_conf(SysRoot(root), '/zero.conf', 'NCCL_CONF_FILE')['state'] == 'absent'


def test_unreadable_file_says_why(tmp_path):
    if os.geteuid() == 0:
        pytest.skip('root reads a file of mode 000')
    root = _node(tmp_path, etc=b'NCCL_ALGO=Ring\n')
    os.chmod(os.path.join(root, 'etc', 'nccl.conf'), 0)
    state = _nccl_conf.read_nccl(SysRoot(root), {}, user='gpu')['files'][-1]['state']
    assert state.startswith('unreadable: ') and 'ermission' in state


def test_library_version_from_its_file_name_or_its_string(tmp_path):
    root = _node(tmp_path)
    lib = tmp_path / 'node' / 'usr' / 'lib64'
    lib.mkdir(parents=True)
    (lib / 'libnccl.so.2.21.5').write_bytes(b'\x7fELF')
    os.symlink('libnccl.so.2.21.5', str(lib / 'libnccl.so.2'))
    found, why = _nccl_conf.library(SysRoot(root), ['/usr/lib64'])
    assert why is None and found['version'] == '2.21.5' and 'file name' in found['how']
    # A pip wheel's library has no release in its name: the 'NCCL version' string of src/init.cc, across a chunk boundary.
    other = tmp_path / 'node' / 'opt'
    other.mkdir()
    (other / 'libnccl.so.2').write_bytes(b'\0' * (_nccl_conf._CHUNK - 5) + b'NCCL version 2.28.9+cuda13.0\0')
    found, why = _nccl_conf.library(SysRoot(root), ['/opt'])
    assert found['version'] == '2.28.9' and 'string' in found['how']
    (other / 'libnccl.so.2').write_bytes(b'\0' * 100)
    found, why = _nccl_conf.library(SysRoot(root), ['/nowhere', '/opt'])
    assert found is None and 'no "NCCL version' in why


def test_header_version_from_the_real_nccl_h(tmp_path):
    root = _node(tmp_path)
    include = tmp_path / 'node' / 'nccl' / 'include'
    include.mkdir(parents=True)
    (include / 'nccl.h').write_text(_state('nccl_h_version.txt'))
    facts = _nccl_conf.read_nccl(SysRoot(root), {'NCCL_HOME': '/nccl'}, user='gpu')
    assert facts['header'] == {'version': '2.28.9', 'path': '/nccl/include/nccl.h'} and 'header' not in facts['not_read']


def test_the_module(tmp_path, monkeypatch):
    root = _node(tmp_path, etc=b'NCCL_BUFFSIZE=262144\n')
    result, failed = run_module(nccl_facts.main, {'root': root, 'user': 'gpu', 'env': {'NCCL_PROTO': 'LL'}}, monkeypatch)
    assert not failed and result['changed'] is False
    facts = result['ansible_facts']['gpu_fabric_nccl']
    assert facts['settings']['NCCL_BUFFSIZE'] == {'value': '262144', 'source': '/etc/nccl.conf'}
    assert facts['settings']['NCCL_PROTO']['source'] == 'environment' and facts['files'][0]['state'] == 'absent'
    result, failed = run_module(nccl_facts.main, {'root': str(tmp_path / 'nope')}, monkeypatch)
    assert failed and 'snapshot' in result['msg']
