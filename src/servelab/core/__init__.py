"""Errors, the clock and units shared by every other package."""
