"""The ``tome`` command line and the typed REST client it is built on (:mod:`tome_cli.client`)."""
