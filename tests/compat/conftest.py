"""The compat suite is a package (tests/compat/__init__.py); its files import the harness as ``harness``."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
