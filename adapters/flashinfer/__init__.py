"""Placeholder: filled by its owner (see docs/TEAM.md)."""
