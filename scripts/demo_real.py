"""The real-model demo (`make demo-real`, `make demo-verifier`): drills/demo_real.py.

    python scripts/demo_real.py --help
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drills.demo_real import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
