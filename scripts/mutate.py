"""Mutation testing (`make mutate`, `make mutate-changed`): drills/mutation.py.

    python scripts/mutate.py --list
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drills.mutation import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
