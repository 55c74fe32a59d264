"""The ``jmsgateway`` console command: ``check-config``, ``plugins`` and friends.

Each subcommand prints plain sentences and exits non-zero on a problem;
none of them starts the gateway (``twistd jmsgateway`` does).  Every
subcommand that reads the configuration takes ``--config FILE`` (looked up as
:mod:`gateway.locations` says when absent; ``check-config FILE`` keeps the
positional form) and writes nothing unless that is its job.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from gateway.config import GatewayConfig, load_config
from gateway.errors import ConfigError
from gateway.identity import ID_FILE
from gateway.locations import choose_config

UNSTORED_ID = "(generated at the first start)"
"""The gateway id check-config shows for a data directory without one (it does not create it)."""


def config_path(option: str | None) -> str:
    """The configuration file a subcommand reads: ``--config`` or the documented look-up."""
    return choose_config(option).path


def check_config(path: str | None, overrides: list[str]) -> int:
    """Validate a configuration file and explain the first problem (writes nothing)."""
    try:
        path = config_path(path)
        config = load_config(path, overrides)
        from twisted.internet import reactor

        from gateway.app import build_gateway
        from gateway.tap import check_listeners

        if not config.id:  # not generated here: that would write <data_dir>/gateway.id
            stored = os.path.join(config.data_dir, ID_FILE)
            config.gateway.id = _read_id(stored) or UNSTORED_ID
        gateway = build_gateway(config, reactor)
        check_listeners(gateway, reactor)
    except ConfigError as error:
        print(f"{error}", file=sys.stderr)
        return 1
    listeners = ", ".join(config.listen)
    print(f"{path}: OK (gateway {config.id!r}, listening on {listeners}, "
          f"{len(config.connectors)} connector(s), {len(config.destinations)} destination rule(s))")
    return 0


def _read_id(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def list_plugins(path: str | None, overrides: list[str]) -> int:
    """Print discovered plugins and transformers with their source and load errors."""
    from gateway.transform import describe_plugins, parse_transform_config, plugin_manager_for

    try:
        config = load_config(config_path(path), overrides)
        transform = parse_transform_config(config.transform, config.path)
    except ConfigError as error:
        print(f"{error}", file=sys.stderr)
        return 1
    print(describe_plugins(plugin_manager_for(transform), transform))
    return 0


def hash_password_command(rounds: int) -> int:
    """Read a password (prompted twice on a terminal, else one line of stdin) and print its bcrypt hash."""
    import getpass

    from gateway.security.passwords import hash_password

    if sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            print("the passwords differ", file=sys.stderr)
            return 1
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        print("an empty password cannot be hashed", file=sys.stderr)
        return 1
    try:
        print(hash_password(password, rounds))
    except ValueError as error:
        print(f"{error}", file=sys.stderr)
        return 1
    return 0


def bridge_watcher(interval: float, level: str, log_format: str) -> Callable[[Any], None]:
    """What ``jmsgateway bridge`` does before it runs: log to stdout (``--log-level``,
    ``--log-format``), report the bridges' progress (:mod:`gateway.bridge_progress`) and serve
    ``[admin] listen`` (:mod:`gateway.admin.bridge_site`)."""
    from twisted.logger import globalLogBeginner

    from gateway.admin.bridge_site import BridgeAdmin
    from gateway.bridge_progress import BridgeProgress
    from gateway.log_observer import GatewayLogObserver, json_line_observer, parse_level, text_line_observer

    def watch(run: Any) -> None:
        sink = json_line_observer(sys.stdout) if log_format == "json" else text_line_observer(sys.stdout)
        globalLogBeginner.beginLoggingTo([GatewayLogObserver(sink, parse_level(level))],
                                         redirectStandardIO=False)
        BridgeAdmin(run).listen()
        BridgeProgress(run.bridges, run.reactor, interval).start()

    return watch


def backup_command(path: str | None, overrides: list[str], data_dir: str | None, destination: str) -> int:
    """``jmsgateway backup DEST``: an online copy of the installation's files."""
    from gateway.backup import BackupError, backup

    try:
        config = _configured(path, overrides, data_dir)
        names = backup(config, destination)
    except (ConfigError, BackupError, OSError) as error:
        print(f"jmsgateway backup: {error}", file=sys.stderr)
        return 1
    print(f"backed up {', '.join(names) or 'nothing (no data files yet)'} from {config.data_dir} to {destination}")
    return 0


def restore_command(path: str | None, overrides: list[str], data_dir: str | None, source: str, force: bool) -> int:
    """``jmsgateway restore SRC``: a backup back into the (stopped) gateway's data directory."""
    from gateway.backup import BackupError, restore

    try:
        config = _configured(path, overrides, data_dir)
        names, aside = restore(config, source, force=force)
    except (ConfigError, BackupError, OSError) as error:
        print(f"jmsgateway restore: {error}", file=sys.stderr)
        return 1
    moved = f"; what was there is in {aside}" if aside else ""
    print(f"restored {', '.join(names)} from {source} into {config.data_dir}{moved}")
    return 0


def _configured(path: str | None, overrides: list[str], data_dir: str | None) -> GatewayConfig:
    config = load_config(config_path(path), overrides)
    if data_dir:
        config.gateway.data_dir = data_dir
    return config


def print_reference(what: str) -> int:
    """Print the JSON Schema of the configuration, or its key tables in Markdown."""
    from gateway.config_reference import json_schema_text, key_tables

    print(json_schema_text() if what == "schema" else key_tables(), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["pipeline"]:
        # The Spark job has its own argument parser (run / replay).
        from gateway.commands.pipeline import main as pipeline_main

        return pipeline_main(argv[1:])
    parser = argparse.ArgumentParser(prog="jmsgateway", description="jmsgateway administration")
    commands = parser.add_subparsers(dest="command", required=True)
    configured = argparse.ArgumentParser(add_help=False)  # what every configured subcommand takes
    configured.add_argument("--config", "-c", default=None, metavar="FILE",
                            help="the TOML configuration (default: $JMSGATEWAY_CONFIG, ./etc/jmsgateway.toml, "
                                 "/etc/jmsgateway/jmsgateway.toml, the packaged default)")
    configured.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                            help="override a config value, typed as TOML (repeatable)")
    check = commands.add_parser("check-config", parents=[configured], help="validate a configuration file")
    check.add_argument("file", nargs="?", default=None, help="the same as --config FILE")
    reference = commands.add_parser("config", help="print the configuration's JSON Schema or its key tables")
    reference.add_argument("what", choices=["schema", "keys"],
                           help="schema: JSON Schema of jmsgateway.toml (for editors); keys: Markdown tables")
    commands.add_parser("plugins", parents=[configured], help="list transformer plugins and why any failed to load")
    commands.add_parser("pipeline", add_help=False,
                        help="run the routes and transformers as a PySpark Structured Streaming job "
                             "(jmsgateway pipeline --config FILE; pipeline replay ...)")
    bridge = commands.add_parser("bridge", parents=[configured],
                                 help="run the configured bridges without STOMP listeners (and [admin] listen's "
                                      "/livez, /readyz, /health, /bridges and /metrics)")
    bridge.add_argument("--only", action="append", default=None, metavar="NAME", help="run only this bridge")
    bridge.add_argument("--progress-interval", type=float, default=10.0, metavar="SECONDS",
                        help="log each bridge's state, count and rate this often (default 10; 0: states only)")
    bridge.add_argument("--log-level", default="info", choices=["debug", "info", "warn", "error", "critical"])
    bridge.add_argument("--log-format", default="text", choices=["text", "json"])
    backing = commands.add_parser("backup", parents=[configured],
                                  help="copy the store, bridges.sqlite and gateway.id while the gateway runs")
    backing.add_argument("destination", metavar="DEST", help="a new (or empty) directory")
    backing.add_argument("--data-dir", default=None, help="the data directory (overrides gateway.data_dir)")
    restoring = commands.add_parser("restore", parents=[configured],
                                    help="put a backup back into a stopped gateway's data directory")
    restoring.add_argument("source", metavar="SRC", help="a directory written by jmsgateway backup")
    restoring.add_argument("--data-dir", default=None, help="the data directory (overrides gateway.data_dir)")
    restoring.add_argument("--force", action="store_true",
                           help="move the files already there aside (to before-restore-<time>/) first")
    hashing = commands.add_parser(
        "hash-password", help="print a bcrypt hash of a password (read from the terminal or stdin) for [auth] users")
    hashing.add_argument("--rounds", type=int, default=12, choices=range(4, 32), metavar="4..31",
                         help="bcrypt cost factor (default 12)")
    args = parser.parse_args(argv)
    if args.command == "hash-password":
        return hash_password_command(args.rounds)
    if args.command == "bridge":
        from gateway.commands.bridge import run_standalone

        try:
            path = config_path(args.config)
        except ConfigError as error:
            print(f"jmsgateway bridge: {error}", file=sys.stderr)
            return 1
        return run_standalone(path, args.set, only=args.only,
                              watch=bridge_watcher(args.progress_interval, args.log_level, args.log_format))
    if args.command == "check-config":
        if args.file and args.config and args.file != args.config:
            parser.error(f"check-config: two files given ({args.file} and --config {args.config})")
        return check_config(args.config or args.file, args.set)
    if args.command == "backup":
        return backup_command(args.config, args.set, args.data_dir, args.destination)
    if args.command == "restore":
        return restore_command(args.config, args.set, args.data_dir, args.source, args.force)
    if args.command == "config":
        return print_reference(args.what)
    if args.command == "plugins":
        return list_plugins(args.config, args.set)
    return 2  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
