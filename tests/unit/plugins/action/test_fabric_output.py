# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import os
import stat
from unittest import mock

import pytest

from ansible import constants as C
from ansible.errors import AnsibleActionFail

from ansible_collections.hpc.gpu_fabric.plugins.action.fabric_output import ActionModule
from tests.unit import special_files


def run(args, check=False, diff=False):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = check
    task.diff = diff
    task.action = 'hpc.gpu_fabric.fabric_output'
    action = ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    return action.run(task_vars={})


def read(path):
    with open(path) as handle:
        return handle.read()


def test_writes_every_file_into_a_new_directory(tmp_path):
    dest = tmp_path / 'out' / 'deeper'
    result = run({'dest': str(dest), 'files': {'bench.json': '{}\n', 'report.md': '# ok\n'}})
    assert result['changed'] is True
    assert not result.get('failed')
    assert read(dest / 'bench.json') == '{}\n'
    assert read(dest / 'report.md') == '# ok\n'
    assert stat.S_IMODE(os.stat(dest / 'bench.json').st_mode) == 0o644
    assert sorted(os.listdir(dest)) == ['bench.json', 'report.md']  # no temporary file left
    assert [(f['name'], f['size'], f['changed']) for f in result['files']] == [('bench.json', 3, True), ('report.md', 5, True)]
    assert result['dest'] == str(dest)


def test_second_run_changes_nothing(tmp_path):
    run({'dest': str(tmp_path), 'files': {'a.json': 'x'}})
    before = os.stat(tmp_path / 'a.json')
    result = run({'dest': str(tmp_path), 'files': {'a.json': 'x'}})
    assert result['changed'] is False
    assert os.stat(tmp_path / 'a.json').st_ino == before.st_ino  # not rewritten


def test_a_mode_change_alone_is_a_change(tmp_path):
    run({'dest': str(tmp_path), 'files': {'a.json': 'x'}})
    result = run({'dest': str(tmp_path), 'files': {'a.json': 'x'}, 'mode': '0600'})
    assert result['changed'] is True
    assert stat.S_IMODE(os.stat(tmp_path / 'a.json').st_mode) == 0o600


def test_check_mode_writes_nothing_and_predicts(tmp_path):
    dest = tmp_path / 'new'
    result = run({'dest': str(dest), 'files': {'a.json': 'x'}}, check=True)
    assert result['changed'] is True
    assert not dest.exists()
    run({'dest': str(tmp_path), 'files': {'a.json': 'old'}})
    result = run({'dest': str(tmp_path), 'files': {'a.json': 'new'}}, check=True, diff=True)
    assert result['changed'] is True
    assert read(tmp_path / 'a.json') == 'old'
    assert result['diff'][0]['before'] == 'old' and result['diff'][0]['after'] == 'new'


def test_diff_shows_the_drift_and_skips_large_files(tmp_path):
    result = run({'dest': str(tmp_path), 'files': {'a.txt': 'one\n'}}, diff=True)
    assert result['diff'] == [{'before_header': str(tmp_path / 'a.txt') + ' (absent)', 'after_header': str(tmp_path / 'a.txt'),
                               'before': '', 'after': 'one\n'}]
    big = 'x' * (C.MAX_FILE_SIZE_FOR_DIFF + 1)
    result = run({'dest': str(tmp_path), 'files': {'a.txt': big}}, diff=True)
    assert result['diff'][0].get('src_larger') == C.MAX_FILE_SIZE_FOR_DIFF and 'after' not in result['diff'][0]
    assert read(tmp_path / 'a.txt') == big
    result = run({'dest': str(tmp_path), 'files': {'a.txt': 'small'}}, diff=True)
    assert result['diff'][0].get('dst_larger') == C.MAX_FILE_SIZE_FOR_DIFF
    assert 'diff' not in run({'dest': str(tmp_path), 'files': {'a.txt': 'small'}}, diff=True)


def test_one_unwritable_file_loses_none_of_the_others(tmp_path):
    os.mkdir(tmp_path / 'report.json')  # a directory where a file should go
    result = run({'dest': str(tmp_path), 'files': {'report.json': '{}', 'report.md': '# md', 'junit.xml': '<x/>'}})
    assert result['failed'] is True
    assert 'report.json' in result['msg'] and '1 of 3' in result['msg']
    assert read(tmp_path / 'report.md') == '# md' and read(tmp_path / 'junit.xml') == '<x/>'
    assert [f['name'] for f in result['files']] == ['junit.xml', 'report.md']


@pytest.mark.parametrize('args, message', [
    ({'files': {'a': 'x'}}, 'dest'),
    ({'dest': '/tmp', 'files': {}}, 'non-empty mapping'),
    ({'dest': '/tmp', 'files': ['a']}, 'non-empty mapping'),
    ({'dest': '/tmp', 'files': {'../escape.json': 'x'}}, 'plain file name'),
    ({'dest': '/tmp', 'files': {'sub/a.json': 'x'}}, 'plain file name'),
    ({'dest': '/tmp', 'files': {'..': 'x'}}, 'plain file name'),
    ({'dest': '/tmp', 'files': {'a.json': {'not': 'text'}}}, 'must be text'),
    ({'dest': '/tmp', 'files': {'a.json': 'x'}, 'mode': 'rw-r--r--'}, 'octal'),
    ({'dest': '/tmp', 'files': {'a.json': 'x'}, 'mode': '17777'}, 'out of range'),
])
def test_bad_arguments_are_refused_before_anything_is_written(args, message):
    with pytest.raises(AnsibleActionFail, match=message):
        run(args)


def test_dest_that_is_a_file_is_refused(tmp_path):
    (tmp_path / 'f').write_text('x')
    with pytest.raises(AnsibleActionFail, match='not a directory'):
        run({'dest': str(tmp_path / 'f'), 'files': {'a.json': 'x'}})


def test_relative_dest_is_relative_to_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run({'dest': 'rel', 'files': {'a.json': 'x'}, 'mode': 0o640})
    assert result['dest'] == str(tmp_path / 'rel')
    assert stat.S_IMODE(os.stat(tmp_path / 'rel' / 'a.json').st_mode) == 0o640


@pytest.mark.parametrize('mode', [True, False, 1.5, [644], '+644', '6_44', '-1', 'true', -1, 0o10000])
def test_a_mode_that_is_no_mode_is_refused_and_nothing_written(tmp_path, mode):
    """mode: true used to write a file of mode 0001 (a bool is an int to Python)."""
    with pytest.raises(AnsibleActionFail, match='mode'):
        run({'dest': str(tmp_path), 'files': {'a.json': 'x'}, 'mode': mode})
    assert os.listdir(str(tmp_path)) == []


@pytest.mark.parametrize('mode, expected', [('0640', 0o640), ('640', 0o640), ('0o640', 0o640), (0o640, 0o640), (' 0600 ', 0o600)])
def test_modes_of_every_spelling(tmp_path, mode, expected):
    run({'dest': str(tmp_path), 'files': {'a.json': 'x'}, 'mode': mode})
    assert stat.S_IMODE(os.stat(str(tmp_path / 'a.json')).st_mode) == expected


@pytest.mark.parametrize('kind', special_files.ALL)
def test_an_output_that_is_no_regular_file_is_refused_and_the_others_written(tmp_path, kind):
    """A FIFO named report.json blocked the read of the old content forever; a device or a FIFO
    would have been replaced by the rename. Each is refused, left as it is, the other files written."""
    path = special_files.make(tmp_path, kind, 'report.json')
    before = special_files.identity(path)
    result = run({'dest': str(tmp_path), 'files': {'report.json': '{}', 'report.md': '# ok\n'}})
    assert result['failed'] is True and 'could not write 1 of 2 file(s)' in result['msg']
    assert '%s: it is ' % path in result['msg'] and 'nothing is written over it' in result['msg']
    assert special_files.identity(path) == before
    assert read(tmp_path / 'report.md') == '# ok\n'
    assert not [name for name in os.listdir(tmp_path) if name.startswith('.')]


def test_an_old_file_larger_than_any_compared_is_a_change(tmp_path, monkeypatch):
    monkeypatch.setattr(C, 'MAX_FILE_SIZE_FOR_DIFF', 4)
    (tmp_path / 'a.txt').write_bytes(b'0123456789')
    os.chmod(tmp_path / 'a.txt', 0o644)
    result = run({'dest': str(tmp_path), 'files': {'a.txt': ''}}, diff=True)
    assert result['changed'] is True and result['diff'][0]['dst_larger'] == 4
    assert read(tmp_path / 'a.txt') == ''
