"""`python -m servelab` is the `servelab` command."""

from servelab.cli import main

main()
