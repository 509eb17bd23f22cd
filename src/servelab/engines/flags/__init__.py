"""Recorded flag lists: every option string an engine's server accepts, for one version.

`<engine>-<version>.txt`, one flag a line after a `#` header naming the version and the
source it was read from; `extract.py` makes them (see docs/ENGINES.md).
"""
