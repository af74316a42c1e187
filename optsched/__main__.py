"""``python -m optsched ...``: the same command line as ``optsched ...``."""

from optsched.cli import main

if __name__ == "__main__":
    main()
