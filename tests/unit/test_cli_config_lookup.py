"""The configuration look-up order, the shipped files, and the CLI's --config / check-config."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gateway import cli, locations
from gateway.errors import ConfigError
from gateway.transform.manager import build_plugin_manager, plugin_records
from tests.support.wheel import build_wheel

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def empty_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(locations.CONFIG_VARIABLE, raising=False)
    return tmp_path


def test_the_option_comes_first_even_over_the_variable(empty_dir: Path) -> None:
    choice = locations.choose_config("given.toml", {locations.CONFIG_VARIABLE: "env.toml"})
    assert choice == locations.ConfigChoice("given.toml", "--config")


def test_then_the_variable(empty_dir: Path) -> None:
    (empty_dir / "etc").mkdir()
    (empty_dir / "etc" / "jmsgateway.toml").write_text("")
    choice = locations.choose_config(None, {locations.CONFIG_VARIABLE: "env.toml"})
    assert choice.path == "env.toml" and "JMSGATEWAY_CONFIG" in choice.reason


def test_then_the_working_directory_then_the_system_file(empty_dir: Path) -> None:
    system = empty_dir / "system.toml"
    system.write_text("")
    assert locations.choose_config(None, {}, str(system)).path == str(system)
    (empty_dir / "etc").mkdir()
    (empty_dir / "etc" / "jmsgateway.toml").write_text("")
    assert locations.choose_config(None, {}, str(system)).path == "etc/jmsgateway.toml"


def test_last_the_packaged_default(empty_dir: Path) -> None:
    choice = locations.choose_config(None, {}, str(empty_dir / "missing.toml"))
    assert Path(choice.path).read_text() == (REPO / "etc" / "jmsgateway.toml").read_text()
    assert choice.reason == "the default shipped with the package"


def test_no_configuration_anywhere_is_one_clear_error(empty_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locations, "packaged_config", lambda: None)
    with pytest.raises(ConfigError, match="give --config FILE or set \\$JMSGATEWAY_CONFIG"):
        locations.choose_config(None, {}, str(empty_dir / "missing.toml"))


def test_the_shipped_plugins_load_from_any_directory(empty_dir: Path) -> None:
    manager = build_plugin_manager(plugin_dirs=["plugins"], load_entry_points=False)
    loaded = {r.name: r for r in plugin_records(manager) if r.status == "loaded"}
    assert "header_map" in loaded
    assert Path(loaded["header_map"].origin).parent == locations.shipped_folder("plugins")


def test_a_plugins_folder_in_the_working_directory_is_used_instead(empty_dir: Path) -> None:
    (empty_dir / "plugins").mkdir()
    manager = build_plugin_manager(plugin_dirs=["plugins"], load_entry_points=False)
    assert [r.name for r in plugin_records(manager) if r.status == "loaded"] == ["builtin"]


def test_check_config_writes_nothing(empty_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check-config"]) == 0
    assert "OK" in capsys.readouterr().out
    assert list(empty_dir.iterdir()) == []  # no var/gateway.id


def test_check_config_refuses_a_listener_start_up_would_refuse(empty_dir: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    bad = empty_dir / "bad.toml"
    bad.write_text('[gateway]\nlisten = ["localhost:61613"]\n')
    assert cli.main(["check-config", str(bad)]) == 1
    error = capsys.readouterr().err
    assert str(bad) in error and "gateway.listen[0]" in error and "'localhost:61613'" in error
    admin = empty_dir / "admin.toml"
    admin.write_text('[admin]\nlisten = ["http:8161"]\n')
    assert cli.main(["check-config", "--config", str(admin)]) == 1
    assert "admin.listen[0]" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["check-config", "--config"], ["check-config"], ["plugins", "--config"],
                                     ["check-config", "-c"]])
def test_every_subcommand_takes_the_config_the_same_way(empty_dir: Path, command: list[str],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    bad = empty_dir / "bad.toml"
    bad.write_text("[stomp]\nmax_frame_size = -3\n")
    assert cli.main([*command, str(bad)]) == 1
    assert "stomp.max_frame_size" in capsys.readouterr().err


def test_check_config_refuses_two_different_files(empty_dir: Path) -> None:
    with pytest.raises(SystemExit):
        cli.main(["check-config", "a.toml", "--config", "b.toml"])


def test_the_variable_is_used_by_the_subcommands(empty_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bad = empty_dir / "env.toml"
    bad.write_text("[stomp]\nmax_headers = 0\n")
    monkeypatch.setenv(locations.CONFIG_VARIABLE, str(bad))
    assert cli.main(["plugins"]) == 1
    assert str(bad) in capsys.readouterr().err


def test_make_run_installs_the_runtime_only_and_make_test_everything() -> None:
    def dry_run(target: str) -> str:
        return subprocess.run(["make", "-n", "-B", target, "VENV=/nonexistent/venv"], cwd=REPO, check=True,
                              capture_output=True, text=True).stdout

    run = dry_run("run")
    (install,) = [line for line in run.splitlines() if "pip install" in line]
    assert install.endswith(" .") and "[" not in install  # the checkout, no extras
    assert "'.[kafka,jms,spark,test]'" in dry_run("test")


def test_the_wheel_carries_the_default_config_the_examples_and_the_plugins(tmp_path: Path) -> None:
    import zipfile

    wheel = build_wheel(tmp_path, {"JMSGATEWAY_MYPYC": "0"})  # (what is compiled does not matter here)
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("gateway/shipped/etc/jmsgateway.toml", "gateway/shipped/etc/examples/bridges.toml",
                 "gateway/shipped/plugins/header_map.py", "gateway/admin/static/index.html",
                 "twisted/plugins/jmsgateway.py"):
        assert name in names, name
