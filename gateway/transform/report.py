"""Text for ``jmsgateway plugins``: what was loaded, from where, and why not.

Owns :func:`describe_plugins`; the CLI subcommand prints its result.  It
builds nothing itself: give it the plugin manager the gateway would use.
"""

from __future__ import annotations

from pluggy import PluginManager

from gateway.transform.catalog import collect_transformers
from gateway.transform.config import TransformConfig
from gateway.transform.manager import plugin_records


def describe_plugins(plugin_manager: PluginManager, config: TransformConfig | None = None) -> str:
    """A human-readable listing: each plugin with its source, origin and status,
    the transformers it registered, and the reason for every failure.

    :param config: passed to the plugins' hooks (the defaults if None).
    """
    catalog = collect_transformers(plugin_manager, config)
    by_plugin = catalog.by_plugin()
    shadowed: dict[str, list[str]] = {}
    for loser, winner in catalog.shadowed:
        shadowed.setdefault(loser.plugin, []).append(f"{loser.name} (shadowed by plugin {winner.plugin})")
    problems: dict[str, list[str]] = {}
    for problem in catalog.problems:
        problems.setdefault(problem.plugin, []).append(problem.problem)

    lines = ["Plugins:"]
    records = plugin_records(plugin_manager)
    if not records:
        lines.append("  (none)")
    for record in records:
        if record.status == "missing":
            lines.append(f"  - folder {record.name}: not found ({record.origin})")
            continue
        lines.append(f"  - {record.name} [{record.source}] {record.origin}")
        if record.status == "blocked":
            lines.append("      blocked by configuration")
        elif record.status == "failed":
            lines.append(f"      FAILED: {record.error}")
        else:
            names = sorted(entry.name for entry in by_plugin.get(record.name, []))
            names += shadowed.get(record.name, [])
            lines.append(f"      transformers: {', '.join(names) if names else '(none)'}")
            lines.extend(f"      PROBLEM: {text}" for text in problems.get(record.name, []))

    lines.append("")
    lines.append("Transformers:")
    if not catalog.entries:
        lines.append("  (none)")
    width = max((len(name) for name in catalog.entries), default=0)
    plugin_width = max((len(entry.plugin) for entry in catalog.entries.values()), default=0)
    for name in catalog.names():
        entry = catalog.entries[name]
        doc = (type(entry.transformer).__doc__ or "").strip().splitlines()
        summary = doc[0].strip() if doc else ""
        lines.append(f"  {name:<{width}}  {entry.plugin:<{plugin_width}}  {summary}".rstrip())
    failed = sum(1 for record in records if record.status == "failed")
    lines.append("")
    lines.append(
        f"{len(catalog.entries)} transformer(s) from "
        f"{sum(1 for record in records if record.status == 'loaded')} plugin(s); {failed} failed to load"
    )
    return "\n".join(lines) + "\n"
