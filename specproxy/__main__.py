"""`python -m specproxy` is the same as the `specproxy` command."""

from specproxy.cli import main

main()
