"""The `search` command line (entry point: search.cli.app:main)."""
