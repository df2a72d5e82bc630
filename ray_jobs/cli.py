"""The `ratchet` command: one subcommand per ray_jobs entrypoint (and the ARC verifier's CLI).

    ratchet serve model=PATH port=8000             # OpenAI-compatible endpoint
    ratchet serve experiment=demo version=v2 api_key_env=RATCHET_API_KEY
    ratchet soar --config configs/soar-demo.yaml   # SOAR search on ARC
    ratchet tpo --config configs/tpo-demo.yaml     # thought preference optimization
    ratchet runs                                   # experiments in the store: status, headline
    ratchet runs compare tpo-a tpo-b               # two runs' numbers side by side
    ratchet verify check --task TASK.json --program PROG.py   # an ARC program in the sandbox
    ratchet <command> --help                       # every config field, its default and comment
    ratchet <command> --config FILE --dry-run      # check a config; starts nothing
    # soar, scaling, tpo and serve take --config FILE and field=value overrides; SIGTERM or
    # Ctrl-C stops them cleanly. On a cluster, the same modules:
    ray job submit --working-dir . -- python -m ray_jobs.serve experiment=demo
"""

from __future__ import annotations

import difflib
import importlib
import sys

# name -> module with main(argv); imported only when chosen (each pulls in Ray, torch...).
COMMANDS: dict[str, str] = {
    "soar": "ray_jobs.soar",
    "scaling": "ray_jobs.scaling",
    "tpo": "ray_jobs.tpo",
    "serve": "ray_jobs.serve",
    "runs": "jobs.runs",
    "verify": "verifiers.arc.__main__",
    "sft-demo": "ray_jobs.sft_demo",
}
# one line each for `ratchet --help`
SUMMARIES: dict[str, str] = {
    "soar": "SOAR search and hindsight learning on ARC tasks",
    "scaling": "scaling curves of sampling-based search with self-verification",
    "tpo": "thought preference optimization against a direct-answer baseline",
    "serve": "an OpenAI-compatible endpoint for a checkpoint or a registry version",
    "runs": "the experiments in the store: status, headline, two runs compared",
    "verify": "run ARC programs in the sandbox (check one, batch many)",
    "sft-demo": "the foundation demo: one SFT round as a Ray task, published and sampled",
}


def main(argv: list[str] | None = None) -> None:
    """Dispatch `ratchet <command> ARGS` to the command module's main(ARGS)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: ratchet <command> [--config FILE] [field=value ...] [--help] [--dry-run]\n")
        print("commands:")
        for command in COMMANDS:
            print(f"  {command:<9} {SUMMARIES[command]}")
        print("\nexamples:\n" + __doc__.split("\n\n", 1)[1].rstrip("\n"))
        return
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, list(COMMANDS), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        print(f"ratchet: error: unknown command {name!r}; {hint}choose one of {sorted(COMMANDS)}", file=sys.stderr)
        raise SystemExit(2)
    from jobs import runner  # here: `ratchet --help` should not wait for Ray's import

    before, runner.COMMAND_PREFIX = runner.COMMAND_PREFIX, "ratchet"  # errors say `ratchet soar`, as typed
    module = importlib.import_module(COMMANDS[name])
    own_prog = getattr(module, "PROG", None)  # a command with its own parser (serve, verify)
    if own_prog is not None:
        module.PROG = f"ratchet {name}"
    try:
        code = module.main(rest)
    finally:  # a caller in the same process (a test) calling a job's main directly sees its own name
        runner.COMMAND_PREFIX = before
        if own_prog is not None:
            module.PROG = own_prog
    if isinstance(code, int):  # verify returns its exit code
        raise SystemExit(code)


if __name__ == "__main__":
    main()
