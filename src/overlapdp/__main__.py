"""``python -m overlapdp``: the ``overlapdp`` command, for environments without the console script."""

from overlapdp.cli.main import main

if __name__ == "__main__":
    main()
