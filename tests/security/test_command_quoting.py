"""Every value pitstop puts into a node's shell command is data, never code.

Each command builder (pitstop/ssh/protocol.py, commands.py, files.py) gets hostile values
(`; touch MARK`, `$(touch MARK)`, backticks, newlines, quotes, `&&`, `|`), and the generated
command is run by a real `sh -c` in a scratch directory: no MARK file may appear. The values
that name a program or a directory (the firmware updater, the state directory) are refused
outright by the module arguments, by `pitstop validate` (file:line:col) and by the activity
at run time; over a real sshd the quoted probe runs nothing but a missing program.
"""

from __future__ import annotations

import shlex
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError
from typer.testing import CliRunner

from activities.ssh import ssh_facts, ssh_firmware_update
from pitstop.cli.app import app
from pitstop.module_args.ssh import FactsArgs, FirmwareUpdateArgs
from pitstop.runbook import Task, evaluate_bool, load_runbook
from pitstop.runbook.tasks import load_task_file
from pitstop.ssh import protocol
from pitstop.ssh.commands import shell_command, with_become
from pitstop.ssh.execute import run_command
from pitstop.ssh.files import attributes_command, install_command, stat_probe
from pitstop.ssh.pool import default_pool
from pitstop.ssh.target import target_for
from tests.integration.engine.conftest import RunFn
from tests.integration.ssh import conftest as ssh_fixtures
from tests.integration.ssh.lab import KEY_SECRET, SshLab

# The SSH lab's and the engine's fixtures (a real sshd; a worker on the embedded Temporal).
sshd_binary, ssh_lab, lab = ssh_fixtures.sshd_binary, ssh_fixtures.ssh_lab, ssh_fixtures.lab
engine_worker, start_run, run = ssh_fixtures.engine_worker, ssh_fixtures.start_run, ssh_fixtures.run

MARK = "MARK"
# Each tries to run `touch MARK` in the scratch directory.
HOSTILE = [
    f"x; touch {MARK}",
    f"$(touch {MARK})",
    f"`touch {MARK}`",
    f"x\ntouch {MARK}",
    f"x' ; touch {MARK} ; '",
    f'x" ; touch {MARK} ; "',
    f"x && touch {MARK}",
    f"x | touch {MARK}",
    f"x & touch {MARK}",
    f"-x; touch {MARK}",
]


def _sh(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # The normal PATH: the hostile text, if it were code, would find `touch`.
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, cwd=cwd, timeout=30)


BUILDERS: dict[str, Callable[[str], str]] = {
    "updater --current": protocol.fw_current,
    "updater --pending": protocol.fw_pending,
    "updater flag": lambda v: protocol.updater_command("pitstop-fwupdate", v),
    "read_file": protocol.read_file,
    "sha256": protocol.sha256,
    "tail": lambda v: protocol.tail(v, 100),
    "path_exists": protocol.path_exists,
    "move (src)": lambda v: protocol.move(v, "elsewhere"),
    "move (dest)": lambda v: protocol.move("nothing-here", v),
    "remove": lambda v: protocol.remove(v, "other"),
    "package_version": protocol.package_version,
    "chdir": lambda v: shell_command("true", chdir=v),
    "list command": lambda v: shell_command(["printf", "%s", v]),
    "stat probe": stat_probe,
    "chown owner": lambda v: attributes_command("file", None, v, None) or "",
    "chown group": lambda v: attributes_command("file", 0o644, None, v) or "",
    "chmod path": lambda v: attributes_command(v, 0o600, None, None) or "",
    "install (dest)": lambda v: install_command("staged", "tmp", v, 0o644, "root", "root"),
    "install (staged)": lambda v: install_command(v, "tmp", "dest", None, None, None),
}


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_hostile_values_stay_data_in_every_command_builder(builder: str, value: str, tmp_path: Path) -> None:
    command = BUILDERS[builder](value)
    _sh(command, tmp_path)
    assert not (tmp_path / MARK).exists(), f"{builder} ran {value!r} as code: {command!r}"
    assert value in shlex.split(command) or any(value in part for part in shlex.split(command)), command


def test_a_hostile_value_reaches_the_program_as_one_exact_argument(tmp_path: Path) -> None:
    for value in HOSTILE:
        built = shell_command(["printf", "%s", value])
        assert _sh(built, tmp_path).stdout == value
        # with become, the value is still one argument of `sudo -n ... sh -c`
        wrapped = with_become(protocol.read_file(value), True, "nobody")
        argv = shlex.split(wrapped)
        assert argv[:5] == ["sudo", "-n", "-u", "nobody", "--"] and shlex.split(argv[-1]) == ["cat", value]
        hostile_user = with_become("id", True, value)
        assert shlex.split(hostile_user)[:4] == ["sudo", "-n", "-u", value]
    assert not (tmp_path / MARK).exists()


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_the_firmware_apply_script_refuses_a_hostile_updater_or_path(value: str, tmp_path: Path) -> None:
    files = protocol.FirmwareFiles(str(tmp_path), "2.0")
    line = protocol.marker_line("boot", "run", "task", "2.0")
    with pytest.raises(ValueError, match="unsafe"):
        protocol.apply_command(files, value, line)
    with pytest.raises(ValueError, match="unsafe"):
        protocol.apply_command(protocol.FirmwareFiles(value, "2.0"), "pitstop-fwupdate", line)
    with pytest.raises(ValueError, match="unsafe marker line"):
        protocol.apply_command(files, "pitstop-fwupdate", f'pid=$$ boot=b run=r task=t target=" ; {value}')
    # Every value in the marker line is made harmless before it is written.
    hostile_line = protocol.marker_line(value, value, value, value)
    built = protocol.apply_command(files, "/bin/true", hostile_line)
    _sh(built, tmp_path)
    assert not (tmp_path / MARK).exists()
    assert (tmp_path / "firmware-2.0.staged").read_text().startswith("pid=")


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_module_arguments_refuse_a_hostile_updater_and_state_dir(value: str) -> None:
    with pytest.raises(ValidationError, match="must be a command name or path"):
        FactsArgs.model_validate({"updater": value})
    with pytest.raises(ValidationError, match="must be a command name or path"):
        FirmwareUpdateArgs.model_validate({"target": "2.0", "image": "fw.bin", "updater": value})
    with pytest.raises(ValidationError, match="must be an absolute directory"):
        FirmwareUpdateArgs.model_validate({"target": "2.0", "image": "fw.bin", "state_dir": f"/var/{value}"})
    assert (
        FactsArgs.model_validate({"updater": "/opt/nvidia/bin/nvfwupd"}).updater == "/opt/nvidia/bin/nvfwupd"
    )


def test_validate_refuses_a_literal_hostile_updater_at_its_place(tmp_path: Path) -> None:
    runbook = tmp_path / "facts.yaml"
    runbook.write_text(
        textwrap.dedent(
            f"""\
            name: facts
            hosts: localhost
            tasks:
              - name: facts
                ssh.facts:
                  updater: "x; touch {tmp_path / MARK}"
            """
        )
    )
    result = CliRunner().invoke(app, ["validate", str(runbook)])
    assert result.exit_code == 1
    assert f"{runbook}:6:" in result.output and "must be a command name or path" in result.output
    assert not (tmp_path / MARK).exists()


# --- over a real sshd (the node is this machine, on loopback) --------------------------------


def test_ssh_facts_refuses_a_hostile_updater_before_connecting_in_check_mode_too(
    lab: SshLab, tmp_path: Path
) -> None:
    marker = tmp_path / MARK
    for check_mode in (True, False):
        for template in ("x; touch {m}", "$(touch {m})", "`touch {m}`", "x\ntouch {m}"):
            hostile = template.format(m=marker)
            with pytest.raises(ApplicationError) as err:
                lab.run(ssh_facts, lab.call("ssh.facts", {"updater": hostile}, check_mode=check_mode))
            assert err.value.type == "InvalidArgs" and "must be a command name or path" in err.value.message
            with pytest.raises(ApplicationError) as fw:
                lab.run(
                    ssh_firmware_update,
                    lab.call(
                        "ssh.firmware_update",
                        {"target": "2.0", "image": str(tmp_path / "img"), "updater": hostile},
                        check_mode=check_mode,
                    ),
                )
            assert fw.value.type == "InvalidArgs"
    assert not marker.exists()


def test_the_quoted_updater_probe_runs_nothing_but_a_missing_program_over_ssh(
    lab: SshLab, tmp_path: Path
) -> None:
    """Defence in depth: even a hostile updater that got past the argument check would be one
    word on the node (rc 127, command not found) and leave no file."""
    marker = tmp_path / MARK
    target = target_for(lab.call("ssh.facts", {}))
    with default_pool().connection(target) as conn:
        for template in ("x; touch {m}", "$(touch {m})", "`touch {m}`", "x\ntouch {m}", "x' ; touch {m} ; '"):
            hostile = template.format(m=marker)
            for command in (protocol.fw_current(hostile), protocol.fw_pending(hostile)):
                result = run_command(conn, command)
                assert result.rc == protocol.RC_NOT_FOUND, (command, result.stderr)
            become = run_command(conn, with_become(protocol.fw_current(hostile), True))
            assert become.rc == protocol.RC_NOT_FOUND, become.stderr
    assert not marker.exists()


async def test_an_updater_from_extra_vars_is_refused_by_the_run_in_check_mode(
    lab: SshLab, run: RunFn, tmp_path: Path
) -> None:
    """The attack as a Temporal client would send it: a templated `updater`, its value from the
    run's extra vars, in a check-mode run (a plan). The task fails with the reason; the node
    ran nothing."""
    marker = tmp_path / MARK
    # The inventory names cluster `lab`; the worker's policy holds its nodes' known_hosts.
    inventory = f"""
    cluster:
      name: lab
      ssh: {{user: root, key: {{secret: {KEY_SECRET}}}}}
    all:
      children:
        nodes:
          hosts:
            node-a: {{ansible_host: 127.0.0.1, ansible_port: {lab.node.port}}}
    """
    report = await run(
        """
        name: facts
        hosts: nodes
        tasks:
          - name: facts
            ssh.facts: {updater: "{{ fw_tool }}"}
        """,
        inventory,
        vars={"fw_tool": f"pitstop-fwupdate; touch {marker}"},
        check_mode=True,
    )
    host = report.stages[0].hosts[0]
    assert host.status == "failed"
    assert "must be a command name or path" in host.msg
    assert not marker.exists()


# --- the shipped runbooks: values that reach the nodes' root commands are checked first -----

REPO = Path(__file__).resolve().parents[2]


def _assert_task(tasks: list[Task], name: str) -> Task:
    found = [t for top in tasks for t in top.walk() if t.name == name]
    assert len(found) == 1, name
    return found[0]


def _holds(task: Task, variables: dict[str, object]) -> bool:
    return all(evaluate_bool(condition, variables) for condition in task.args["that"])


def test_the_upgrade_refuses_extra_vars_that_are_not_versions_or_packages() -> None:
    runbook = load_runbook(REPO / "runbooks" / "platform-upgrade.yaml")
    check = _assert_task(
        runbook.stages[0].tasks,
        "What the nodes' root commands will be given is a version or a package, nothing else",
    )
    assert runbook.stages[0].tasks[0].block is not None and runbook.stages[0].tasks[0].block[0] == check
    assert _holds(check, dict(runbook.vars)), "the shipped defaults pass"
    for name in ("kubernetes_target", "kube_package_version", "driver_package"):
        for value in HOSTILE:
            assert not _holds(check, {**runbook.vars, name: str(runbook.vars[name]) + value}), (name, value)
            assert not _holds(check, {**runbook.vars, name: value}), (name, value)
    # Optional ones: accepted when they are what they claim, refused with anything else.
    optional = {"kernel_target": "5.15.0-119-generic", "fabricmanager_package_version": "570.86.15-1"}
    assert _holds(check, {**runbook.vars, **optional})
    for name, good in optional.items():
        for value in HOSTILE:
            assert not _holds(check, {**runbook.vars, name: good + value}), (name, value)


def test_a_node_cannot_inject_into_its_own_rollback_command() -> None:
    _, tasks = load_task_file(REPO / "runbooks" / "tasks" / "upgrade-gpu-node.yaml")
    version = _assert_task(tasks, "The driver the node reports is a version")
    package = _assert_task(tasks, "The package to roll back to is a package and a version")
    assert _holds(version, {"before": {"gpu_driver": "550.54.15"}})
    assert _holds(package, {"driver_package_before": "nvidia-driver-550=550.54.15-0ubuntu1"})
    for value in HOSTILE:
        assert not _holds(version, {"before": {"gpu_driver": f"550.54.15{value}"}}), value
        assert not _holds(package, {"driver_package_before": f"nvidia-driver-550=550.54{value}"}), value


def test_a_kernel_target_or_a_nodes_kernel_and_fabric_manager_cannot_inject() -> None:
    _, tasks = load_task_file(REPO / "runbooks" / "tasks" / "upgrade-gpu-node.yaml")
    target = _assert_task(tasks, "The kernel target is a kernel release")
    before = _assert_task(tasks, "The Fabric Manager and kernel to roll back to are packages and versions")
    assert _holds(target, {"kernel_target": "5.15.0-119-generic"})
    recorded = {
        "fm_package_before": "nvidia-fabricmanager-550=550.90.07-1",
        "kernel_before": "5.15.0-105-generic",
        "kernel_packages_before": "linux-image-5.15.0-105-generic=5.15.0-105.115 "
        "linux-headers-5.15.0-105-generic=5.15.0-105.115",
    }
    assert _holds(before, recorded)
    for value in HOSTILE:
        assert not _holds(target, {"kernel_target": f"5.15.0-119-generic{value}"}), value
        for name in recorded:
            assert not _holds(before, {**recorded, name: recorded[name] + value}), (name, value)
