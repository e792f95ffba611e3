# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The test command (scripts/test.sh) writes a plain-text log and leaves nothing in the home
directory: no colour from molecule, pytest, ansible-lint or ansible-playbook whatever TERM says,
and ansible-test's home (its sanity venvs and get-pip.py cache) in a documented cache, not ~/.ansible/test."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(REPO, 'scripts', 'lib.sh')


def _read(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return handle.read()


def _bash(script, env):
    """Run ``script`` after sourcing lib.sh; its environment at the end -> dict."""
    out = subprocess.run(['bash', '-c', '. "$0"; %s; env -0' % script, LIB], env=env, capture_output=True, check=False)
    assert out.returncode == 0, out.stderr.decode()
    return dict(item.split('=', 1) for item in out.stdout.decode().split('\0') if '=' in item), out.stderr.decode()


def test_plain_output_turns_colour_off_for_molecule_and_ansible():
    env = dict(os.environ, TERM='xterm-256color', FORCE_COLOR='1')
    for name in ('NO_COLOR', 'PY_COLORS', 'ANSIBLE_NOCOLOR', 'ANSIBLE_FORCE_COLOR', 'CLICOLOR'):
        env.pop(name, None)
    plain, _err = _bash('gf_plain_output', env)
    # What molecule and enrich decide (an xterm TERM alone turns their colour on), what molecule
    # then hands its ansible-playbook runs, and what ansible-core makes of it.
    probe = '''
import os
from molecule.ansi_output import should_do_markup
from enrich.console import should_do_markup as enrich_markup
import molecule.console
from ansible.utils import color
print(should_do_markup(), enrich_markup(), os.environ['ANSIBLE_FORCE_COLOR'], color.ANSIBLE_COLOR)
'''
    for environment, expected in ((env, 'True True 1 True'), (plain, 'False False 0 False')):
        out = subprocess.run([sys.executable, '-c', probe], env=environment, capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == expected.split(), (expected, out.stdout)


def test_ansible_test_home_is_in_the_run_and_keeps_pips_configuration(tmp_path):
    real, run = tmp_path / 'real-home', tmp_path / 'run'
    (real / '.config' / 'pip').mkdir(parents=True)
    (real / '.config' / 'pip' / 'pip.conf').write_text('[global]\nfind-links = /opt/wheels\n')
    (real / '.cache' / 'pip').mkdir(parents=True)
    env = dict(os.environ, HOME=str(real), VIRTUAL_ENV=sys.prefix)
    home = str(run / 'home')
    after, err = _bash('gf_ansible_test_home %s; gf_seed_get_pip' % shlex.quote(home), env)
    assert after['HOME'] == home
    # The get-pip.py stand-ins are where ansible-test looks for them with that HOME
    # (the same expanduser of the same template), and none went to the real home.
    cache = os.path.join(home, '.ansible', 'test', 'cache')
    seeded = sorted(os.listdir(cache))
    assert seeded and all(re.match(r'^get_pip_\d+(_\d+)+\.py$', name) for name in seeded), seeded
    assert 'bootstrap: %s/get_pip_' % cache in err
    assert not (real / '.ansible').exists()
    probe = 'import os; print(os.path.expanduser("~/.ansible/test/venv"))'
    out = subprocess.run([sys.executable, '-c', probe], env=after, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == os.path.join(home, '.ansible', 'test', 'venv')
    # pip in ansible-test's venvs reads its user configuration from HOME: a copy of the real one,
    # and the download cache is the real one.
    assert (run / 'home' / '.config' / 'pip' / 'pip.conf').read_text() == '[global]\nfind-links = /opt/wheels\n'
    assert os.path.realpath(str(run / 'home' / '.cache' / 'pip')) == os.path.realpath(str(real / '.cache' / 'pip'))


def test_the_test_command_uses_them():
    script = _read('scripts', 'test.sh')
    # Before any step, and ansible-test's home in a subshell of the sanity step only.
    assert re.search(r'^gf_plain_output$', script, re.M)
    assert script.index('\ngf_plain_output\n') < script.index('\nfor step in ')
    sanity = re.search(r'^step_sanity\(\) \(\n(.*?)^\)$', script, re.M | re.S)
    assert sanity, 'step_sanity is no longer a subshell'
    body = sanity.group(1)
    assert body.index('gf_ansible_test_home "${GF_ANSIBLE_TEST_HOME:-') < body.index('gf_seed_get_pip') < body.index('ansible-test sanity')
    # A documented cache beside the compat venvs, never ansible-test's default ~/.ansible/test.
    assert '/.cache}/hpc.gpu_fabric/ansible-test}"' in body
    # SSH control sockets do not follow ANSIBLE_HOME (ansible/plugins/connection/ssh.py: ~/.ansible/cp).
    assert re.search(r'^export ANSIBLE_SSH_CONTROL_PATH_DIR=\$ANSIBLE_HOME/', script, re.M)
    # Nor do the async job files of local-connection nodes (~/.ansible_async by default).
    assert re.search(r'^export ANSIBLE_ASYNC_DIR=\$ANSIBLE_HOME/', script, re.M)


def test_molecule_shows_only_changed_and_failed_tasks():
    for scenario in ('localhost', 'netns'):
        config = yaml.safe_load(_read('molecule', scenario, 'molecule.yml'))
        defaults = config['provisioner']['config_options']['defaults']
        assert defaults['display_ok_hosts'] is False and defaults['display_skipped_hosts'] is False, scenario
