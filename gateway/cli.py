"""The ``jmsgateway`` console command: ``check-config``, ``plugins`` and friends.

Each subcommand prints plain sentences and exits non-zero on a problem;
none of them starts the gateway (``twistd jmsgateway`` does).
"""

from __future__ import annotations

import argparse
import sys

from gateway.config import DEFAULT_CONFIG, load_config
from gateway.errors import ConfigError


def check_config(path: str, overrides: list[str]) -> int:
    """Validate a configuration file and explain the first problem."""
    try:
        config = load_config(path, overrides)
        from twisted.internet import reactor

        from gateway.app import build_gateway

        build_gateway(config, reactor)
    except ConfigError as error:
        print(f"{error}", file=sys.stderr)
        return 1
    listeners = ", ".join(config.listen)
    print(f"{path}: OK (gateway {config.id!r}, listening on {listeners}, "
          f"{len(config.connectors)} connector(s), {len(config.destinations)} destination rule(s))")
    return 0


def list_plugins(path: str, overrides: list[str]) -> int:
    """Print discovered plugins and transformers with their source and load errors."""
    from gateway.transform import describe_plugins, parse_transform_config, plugin_manager_for

    try:
        config = load_config(path, overrides)
        transform = parse_transform_config(config.transform, config.path)
    except ConfigError as error:
        print(f"{error}", file=sys.stderr)
        return 1
    print(describe_plugins(plugin_manager_for(transform), transform))
    return 0


def hash_password_command(rounds: int) -> int:
    """Read a password (prompted twice on a terminal, else one line of stdin) and print its bcrypt hash."""
    import getpass

    from gateway.passwords import hash_password

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


def print_reference(what: str) -> int:
    """Print the JSON Schema of the configuration, or its key tables in Markdown."""
    from gateway.config_reference import json_schema_text, key_tables

    print(json_schema_text() if what == "schema" else key_tables(), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["pipeline"]:
        # The Spark job has its own argument parser (run / replay).
        from gateway.pipeline.cli import main as pipeline_main

        return pipeline_main(argv[1:])
    parser = argparse.ArgumentParser(prog="jmsgateway", description="jmsgateway administration")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check-config", help="validate a configuration file")
    check.add_argument("file", nargs="?", default=DEFAULT_CONFIG)
    check.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    reference = commands.add_parser("config", help="print the configuration's JSON Schema or its key tables")
    reference.add_argument("what", choices=["schema", "keys"],
                           help="schema: JSON Schema of jmsgateway.toml (for editors); keys: Markdown tables")
    plugins = commands.add_parser("plugins", help="list transformer plugins and why any failed to load")
    plugins.add_argument("--config", default=DEFAULT_CONFIG)
    plugins.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    commands.add_parser("pipeline", add_help=False,
                        help="run the routes and transformers as a PySpark Structured Streaming job (run / replay)")
    bridge = commands.add_parser("bridge", help="run the configured bridges without STOMP listeners")
    bridge.add_argument("--config", default=DEFAULT_CONFIG)
    bridge.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    bridge.add_argument("--only", action="append", default=None, metavar="NAME", help="run only this bridge")
    hashing = commands.add_parser(
        "hash-password", help="print a bcrypt hash of a password (read from the terminal or stdin) for [auth] users")
    hashing.add_argument("--rounds", type=int, default=12, choices=range(4, 32), metavar="4..31",
                         help="bcrypt cost factor (default 12)")
    args = parser.parse_args(argv)
    if args.command == "hash-password":
        return hash_password_command(args.rounds)
    if args.command == "bridge":
        from gateway.bridges.service import run_standalone

        return run_standalone(args.config, args.set, only=args.only)
    if args.command == "check-config":
        return check_config(args.file, args.set)
    if args.command == "config":
        return print_reference(args.what)
    if args.command == "plugins":
        return list_plugins(args.config, args.set)
    return 2  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
