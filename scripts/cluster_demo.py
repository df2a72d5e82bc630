"""The cluster recipe on three local nodes with one lost (`make cluster-demo`): drills/cluster_demo.py.

    python scripts/cluster_demo.py --help
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drills.cluster_demo import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
