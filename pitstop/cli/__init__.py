"""The `pitstop` command line: `app` holds the root command, each other module one area
(`dev`, `run`, `sim`, `slack`...), imported only when the root app registers it, so that one
area runs alone (`python -m pitstop.cli.dev up`) even when another fails to import."""
