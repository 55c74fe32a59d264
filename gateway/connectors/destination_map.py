"""Moved to :mod:`gateway.routing.destination_map` (routing owns which connector serves a
destination, DESIGN.md); this name stays for code that imports it from here."""

from gateway.routing.destination_map import DestinationMap, Resolved, destination_matches

__all__ = ["DestinationMap", "Resolved", "destination_matches"]
