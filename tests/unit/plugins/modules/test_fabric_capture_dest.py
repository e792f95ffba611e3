# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""fabric_capture's dest: checked before the capture, and no temporary tarball left on any error."""

from __future__ import annotations

import os
import stat

import pytest

from ansible.module_utils import basic

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _capture
from ansible_collections.hpc.gpu_fabric.plugins.modules import fabric_capture
from tests.unit import special_files
from tests.unit.plugins.modules.utils import run_module


def _everything(top):
    return sorted(os.path.relpath(os.path.join(d, n), top) for d, dirs, files in os.walk(top) for n in dirs + files)


@pytest.mark.parametrize('dest', ['', '.', '..', 'out/', 'out'])
def test_dest_that_is_no_file_name_fails_first(sim_root, monkeypatch, tmp_path, dest):
    """dest '' used to write the whole capture to a temporary file next to the working
    directory and leave it there when atomic_move failed."""
    work = tmp_path / 'work'
    (work / 'out').mkdir(parents=True)
    monkeypatch.chdir(str(work))
    before = _everything(str(tmp_path))
    result, failed = run_module(fabric_capture.main, {'root': sim_root('homelab_cx4')[0], 'dest': dest}, monkeypatch)
    assert failed is True and 'dest must be the path of the tarball' in result['msg']
    assert _everything(str(tmp_path)) == before


def test_a_failed_move_leaves_no_temporary_file(sim_root, monkeypatch, tmp_path):
    def atomic_move(self, src, dest, **kwargs):
        self.fail_json(msg='Could not replace file: %s to %s' % (src, dest))

    monkeypatch.setattr(basic.AnsibleModule, 'atomic_move', atomic_move)
    result, failed = run_module(fabric_capture.main, {'root': sim_root('homelab_cx4')[0], 'dest': str(tmp_path / 'n.tar.gz')},
                                monkeypatch)
    assert failed is True and 'Could not replace file' in result['msg']
    assert os.listdir(str(tmp_path)) == []


def test_an_error_while_writing_leaves_no_temporary_file(sim_root, monkeypatch, tmp_path):
    def write_tar(handle, members, meta):
        handle.write(b'half')
        raise OSError(28, 'No space left on device')

    monkeypatch.setattr(_capture, 'write_tar', write_tar)
    result, failed = run_module(fabric_capture.main, {'root': sim_root('homelab_cx4')[0], 'dest': str(tmp_path / 'n.tar.gz')},
                                monkeypatch)
    assert failed is True and 'No space left on device' in result['msg']
    assert os.listdir(str(tmp_path)) == []


def test_an_unexpected_error_leaves_no_temporary_file(sim_root, monkeypatch, tmp_path):
    def write_tar(handle, members, meta):
        raise RuntimeError('a bug')

    monkeypatch.setattr(_capture, 'write_tar', write_tar)
    with pytest.raises(RuntimeError):
        run_module(fabric_capture.main, {'root': sim_root('homelab_cx4')[0], 'dest': str(tmp_path / 'n.tar.gz')}, monkeypatch)
    assert os.listdir(str(tmp_path)) == []


@pytest.mark.parametrize('kind', special_files.ALL)
def test_a_dest_that_is_no_regular_file_is_refused_and_left_as_it_is(sim_root, monkeypatch, tmp_path, kind):
    """dest=/dev/null as root renamed the tarball over /dev/null: a device, FIFO, socket, directory
    or a symlink to one is refused before the capture, and nothing is renamed over it."""
    dest = special_files.make(tmp_path, kind, 'node.tar.gz')
    before, entries = special_files.identity(dest), _everything(str(tmp_path))
    result, failed = run_module(fabric_capture.main, {'root': sim_root('homelab_cx4')[0], 'dest': dest}, monkeypatch)
    assert failed is True
    if 'directory' not in kind:  # a directory (or a symlink to one) is refused as no file name (the test above)
        assert 'not a regular file: nothing is written over it' in result['msg'] or 'not to a regular file' in result['msg']
        assert result['msg'].startswith('dest %s is ' % dest)
    assert special_files.identity(dest) == before
    assert _everything(str(tmp_path)) == entries


def test_a_dest_that_appears_during_the_capture_is_checked_again(sim_root, monkeypatch, tmp_path):
    dest = str(tmp_path / 'node.tar.gz')
    write_tar = _capture.write_tar

    def racing(handle, members, meta):
        write_tar(handle, members, meta)
        os.mkfifo(dest)

    monkeypatch.setattr(_capture, 'write_tar', racing)
    result, failed = run_module(fabric_capture.main, {'root': sim_root('homelab_cx4')[0], 'dest': dest}, monkeypatch)
    assert failed is True and 'is a FIFO, not a regular file' in result['msg']
    assert stat.S_ISFIFO(os.lstat(dest).st_mode)
    assert os.listdir(str(tmp_path)) == ['node.tar.gz']  # no temporary tarball left


@pytest.mark.parametrize('kind', ['file', 'link-file', 'dangling'])
def test_a_regular_file_or_a_symlink_to_one_is_replaced(sim_root, monkeypatch, tmp_path, kind):
    dest = str(tmp_path / 'node.tar.gz')
    if kind == 'file':
        (tmp_path / 'node.tar.gz').write_bytes(b'old')
    else:
        if kind == 'link-file':
            (tmp_path / 'old').write_bytes(b'old')
        os.symlink('old', dest)
    result, failed = run_module(fabric_capture.main, {'root': sim_root('homelab_cx4')[0], 'dest': dest}, monkeypatch)
    assert failed is False, result
    assert stat.S_ISREG(os.lstat(dest).st_mode) and result['archive_bytes'] == os.path.getsize(dest) > 3


def test_a_symlink_to_the_real_dev_null_is_refused_as_any_user(sim_root, monkeypatch, tmp_path):
    """The /dev/null case without root: a symlink in tmp_path to the real /dev/null is refused before
    the capture (nothing is written, so this is safe), and /dev/null keeps its inode and type."""
    before = os.stat('/dev/null')
    dest = str(tmp_path / 'node.tar.gz')
    os.symlink('/dev/null', dest)
    result, failed = run_module(fabric_capture.main, {'root': sim_root('homelab_cx4')[0], 'dest': dest}, monkeypatch)
    assert failed is True
    assert result['msg'].startswith('dest %s is a symlink to a character device, not to a regular file' % dest), result['msg']
    after = os.stat('/dev/null')
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_dev, after.st_rdev) == (before.st_ino, before.st_dev, before.st_rdev)
    assert os.readlink(dest) == '/dev/null' and os.listdir(str(tmp_path)) == ['node.tar.gz']
