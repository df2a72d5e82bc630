"""The chaos run (`make chaos`): drills/chaos.py.

    python scripts/chaos.py --help
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drills.chaos import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
