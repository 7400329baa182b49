"""`python -m pitstop.cli`: the same command line as `pitstop`."""

from pitstop.cli.app import main

main()
