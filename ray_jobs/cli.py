"""The `ratchet` command: one subcommand per ray_jobs entrypoint.

    ratchet serve model=PATH port=8000             # OpenAI-compatible endpoint
    ratchet serve experiment=demo version=v2 api_key_env=RATCHET_API_KEY
    ratchet soar --config configs/soar-demo.yaml   # SOAR search on ARC
    ratchet tpo --config configs/tpo-demo.yaml     # thought preference optimization
    ratchet runs                                   # experiments in the store: status, headline
    ratchet runs compare tpo-a tpo-b               # two runs' numbers side by side
    ratchet <command> --help                       # every config field, its default and comment
    ratchet <command> --config FILE --dry-run      # check a config; starts nothing
    # every command takes --config FILE and field=value overrides; on a cluster:
    ray job submit --working-dir . -- python -m ray_jobs.serve experiment=demo
"""

from __future__ import annotations

import difflib
import importlib
import sys

# name -> module with main(argv); imported only when chosen (each pulls in Ray, torch...).
COMMANDS: dict[str, str] = {
    "serve": "ray_jobs.serve",
    "soar": "ray_jobs.soar",
    "scaling": "ray_jobs.scaling",
    "tpo": "ray_jobs.tpo",
    "sft-demo": "ray_jobs.sft_demo",
    "runs": "ray_jobs.runs",
}


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        print("\ncommands: " + ", ".join(sorted(COMMANDS)))
        return
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, list(COMMANDS), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        print(f"ratchet: error: unknown command {name!r}; {hint}choose one of {sorted(COMMANDS)}", file=sys.stderr)
        raise SystemExit(2)
    importlib.import_module(COMMANDS[name]).main(rest)


if __name__ == "__main__":
    main()
