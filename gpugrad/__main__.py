"""``python -m gpugrad ...``: the same as the ``gpugrad`` command."""
import sys

from gpugrad.cli import main

if __name__ == "__main__":
    sys.exit(main())
