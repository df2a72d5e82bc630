"""The served search's accuracy through the openai client: drills/serve_search.py.

    .venv-vllm/bin/python scripts/serve_search.py --help
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drills.serve_search import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
