"""`python -m store up|down|url`: manage the machine's local redis-server."""

import argparse

from store.server import ensure_local_server, stop_local_server

parser = argparse.ArgumentParser(prog="python -m store", description=__doc__)
parser.add_argument("action", choices=["up", "down", "url"], help="start, stop, or print the URL")
args = parser.parse_args()
if args.action == "up":
    s = ensure_local_server()
    print(f"redis-server running on 127.0.0.1:{s.port} (pid {s.pid}, data {s.data_dir})")
elif args.action == "down":
    print("stopped" if stop_local_server() else "no local redis-server running")
else:
    print(ensure_local_server().url)
