"""Probes for a scaling config: pass1, curves, compare, seeds: scaling/probe.py.

    python scripts/scaling_probe.py --help
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaling.probe import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
