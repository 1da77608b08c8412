"""tools/dev.py, the README's first two commands: `serve` installs the runtime only and gives a first look
(one stable CA path, a curl command that works as printed, nothing left behind); `test` installs the
dev extras the suite needs."""

from __future__ import annotations

import importlib.util
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "tools" / "dev.py"


@pytest.fixture
def dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev_tool", DEV)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()  # an environment already created: only the install step is left
    monkeypatch.setattr(module, "VENV", venv)
    monkeypatch.setattr(module, "BIN", venv / "bin")
    monkeypatch.setattr(module, "STAMP", venv / ".installed-from")
    monkeypatch.setattr(module, "_constraints", lambda: tmp_path / "constraints.txt")
    return module


def _installs(dev: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The install targets pip is asked for, as the calls happen."""
    asked: list[str] = []

    def fake_run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        asked.append(argv[argv.index("-e") + 1])
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(dev.subprocess, "run", fake_run)
    return asked


def test_serve_installs_the_runtime_only_and_test_adds_the_dev_extras(
    dev: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _installs(dev, monkeypatch)
    dev.ensure_venv(dev=False)
    dev.ensure_venv(dev=False)
    assert asked == [str(ROOT)], "the runtime alone, once"
    dev.ensure_venv(dev=True)
    dev.ensure_venv(dev=True)
    dev.ensure_venv(dev=False)
    assert asked == [str(ROOT), f"{ROOT}[dev]"], "the dev set once; it covers a later serve"


def test_a_changed_lock_reinstalls(dev: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _installs(dev, monkeypatch)
    dev.ensure_venv(dev=True)
    dev.STAMP.write_text("an older fingerprint")
    dev.ensure_venv(dev=False)
    assert asked == [f"{ROOT}[dev]", str(ROOT)]


@pytest.mark.parametrize(("command", "dev_extras"), [("serve", False), ("test", True), ("setup", True),
                                                     ("bench", True)])
def test_each_command_asks_for_its_set(dev: ModuleType, monkeypatch: pytest.MonkeyPatch, command: str,
                                       dev_extras: bool) -> None:
    wanted: list[bool] = []
    monkeypatch.setattr(dev, "ensure_venv", lambda *, dev=True: wanted.append(dev))
    for name in ("serve", "test", "ensure_system_tools", "ensure_control_plane", "ensure_image", "ensure_node",
                 "ensure_release_tools", "run"):
        monkeypatch.setattr(dev, name, lambda *_: 0)
    assert dev.main([command]) == 0
    assert wanted == [dev_extras]


@pytest.mark.parametrize(("selection", "tiers"), [
    (["tests/test_names.py"], []),
    (["tests/test_names.py::test_x", "tests/pki/test_keys.py"], []),
    (["tests/cluster/test_mission.py::test_y"], ["control plane"]),
    (["tests/image/test_image.py"], ["image"]),
    (["tests/shipping/test_release_registry.py::test_z"], ["image", "release tools"]),
    (["tests/node/test_node.py", "tests/test_names.py"], ["control plane", "image", "node"]),
])
def test_a_selection_sets_up_only_the_tiers_its_tests_use(dev: ModuleType, selection: list[str],
                                                          tiers: list[str]) -> None:
    assert dev.tiers_for(selection) == tiers


def test_setup_asks_pytest_what_a_selection_runs_and_builds_nothing_a_unit_test_does_not_use(
    dev: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real collection of this checkout's suite (nothing runs); every build and install recorded."""
    monkeypatch.setattr(dev, "BIN", Path(sys.executable).parent)
    built: list[str] = []
    monkeypatch.setattr(dev, "ensure_tier", built.append)
    monkeypatch.setattr(dev, "ensure_system_tools", lambda *_: None)
    assert dev.setup(["tests/test_names.py"]) == built == []
    assert dev.setup(["tests/test_names.py", "-k", "no_test_is_called_this"]) == []
    assert dev.setup(["tests/node/test_node.py"]) == ["control plane", "image", "node"]
    built.clear()
    assert dev.setup([]) == built == ["control plane", "image", "node", "release tools"]
    built.clear()
    assert dev.setup(["tests/no_such_file.py"]) == built == ["control plane", "image", "node", "release tools"], (
        "a selection pytest cannot collect builds everything: the run itself then says what is wrong")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.timeout(120)
def test_serve_prints_a_curl_that_works_as_printed_and_leaves_no_key_behind(tmp_path: Path) -> None:
    ca_dir = tmp_path / "dev-ca"
    port = _free_port()
    env = {**os.environ, "TLS_INJECTOR_DEV_CA": str(ca_dir)}
    env.pop("KUBECONFIG", None)
    with subprocess.Popen([sys.executable, str(DEV), "serve", "--port", str(port), "--no-reconciler",
                           "--drain-seconds", "1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True, env=env, start_new_session=True) as proc:
        try:
            curl = _curl_line(proc)
            assert curl == f"curl --cacert {ca_dir / 'ca.crt'} https://localhost:{port}/readyz"
            assert (ca_dir / "tls.key").stat().st_mode & 0o077 == 0
            answer = subprocess.run([*shlex.split(curl), "--silent", "--max-time", "10"], capture_output=True,
                                    text=True, check=False)
            assert answer.returncode == 0, answer.stderr
            assert '"ready":true' in answer.stdout
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert not ca_dir.exists(), "the CA directory and the serving key in it are removed"


def _curl_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, "serve stopped before printing the curl command"
        if line.strip().startswith("curl "):
            return line.strip()
    raise AssertionError("no curl command printed within 90 s")


def test_the_whole_suite_runs_the_rotation_beside_the_rest_and_a_selection_runs_as_given(dev: ModuleType) -> None:
    main, beside = dev.suite("py", [])
    assert beside is not None
    assert main == ["py", "-m", "pytest", *(f"--ignore={path}" for path in dev.BESIDE)]
    assert beside[-len(dev.BESIDE):] == list(dev.BESIDE)
    for path in dev.BESIDE:  # a renamed file would leave the beside run with nothing to run
        assert (ROOT / path).is_file(), path
    assert dev.suite("py", ["tests/node"]) == (["py", "-m", "pytest", "tests/node"], None)


# Touches its own mark, waits (30 s at most) for the other's, prints its message and whether it saw the
# other's mark, and exits with the code given: two of them finish having seen each other only if they ran
# at the same time. (The beside run is also handed its --basetemp, after these four.)
_MEETS = """import pathlib, sys, time
mine, theirs, message, code = sys.argv[1:5]
pathlib.Path(mine).touch()
end = time.monotonic() + 30
while not pathlib.Path(theirs).exists() and time.monotonic() < end:
    time.sleep(0.05)
print(message, pathlib.Path(theirs).exists(), flush=True)
sys.exit(int(code))
"""


@pytest.mark.parametrize("exits", [(0, 0, 0), (0, 3, 3), (1, 0, 1), (2, 3, 2)])
def test_the_command_beside_runs_at_the_same_time_and_either_failing_fails_the_run(
    dev: ModuleType, tmp_path: Path, capfd: pytest.CaptureFixture[str], exits: tuple[int, int, int],
) -> None:
    main_exit, beside_exit, expected = exits
    main_mark, beside_mark = str(tmp_path / "main"), str(tmp_path / "beside")
    beside = [sys.executable, "-c", _MEETS, beside_mark, main_mark, "beside says", str(beside_exit)]
    main = [sys.executable, "-c", _MEETS, main_mark, beside_mark, "main ran", str(main_exit)]
    assert dev.run_beside(main, beside) == expected
    out = capfd.readouterr().out
    assert "beside says True" in out, out
    assert out.index("main ran") < out.index("beside says"), "the beside run's output follows main's"
    assert f"exit {beside_exit}" in out, out
