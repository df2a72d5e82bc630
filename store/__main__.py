"""`python -m store up|down|url`: manage the machine's local redis-server.

`url` prints the URL with its password blanked unless `--show-password` is given (a
terminal's scrollback and a job's log are no place for it).
"""

import argparse

from store.connection import redact
from store.server import ensure_local_server, stop_local_server

parser = argparse.ArgumentParser(prog="python -m store", description=__doc__.split("\n\n")[0])
parser.add_argument("action", choices=["up", "down", "url"], help="start, stop, or print the URL")
parser.add_argument("--show-password", action="store_true", help="url: print the password too")
args = parser.parse_args()
if args.action == "up":
    s = ensure_local_server()
    print(f"redis-server running on unix socket {s.socket} (pid {s.pid}, data {s.data_dir})")
elif args.action == "down":
    print("stopped" if stop_local_server() else "no local redis-server running")
else:
    url = ensure_local_server().url
    print(url if args.show_password else redact(url))
