"""`python -m store up|down|url`: manage the machine's local redis-server.

`url` prints the URL the jobs would use ($RATCHET_REDIS_URL, the file named by
$RATCHET_REDIS_URL_FILE, or the running local server) and starts nothing; its password is
blanked unless `--show-password` is given (a terminal's scrollback and a job's log are no
place for it).
"""

import argparse
import sys

from store.connection import ENV_URL, StoreUnavailable, configured_url, redact
from store.server import ensure_local_server, running_local_server, stop_local_server

parser = argparse.ArgumentParser(prog="python -m store", description=__doc__.split("\n\n")[0])
parser.add_argument("action", choices=["up", "down", "url"], help="start, stop, or print the URL (starts nothing)")
parser.add_argument("--show-password", action="store_true", help="url: print the password too")
args = parser.parse_args()
if args.action == "up":
    s = ensure_local_server()
    print(f"redis-server running on unix socket {s.socket} (pid {s.pid}, data {s.data_dir})")
elif args.action == "down":
    print("stopped" if stop_local_server() else "no local redis-server running")
else:
    try:
        url = configured_url()
    except StoreUnavailable as e:
        sys.exit(f"python -m store url: {e}")
    if url is None:
        server = running_local_server()
        if server is None:
            sys.exit(f"python -m store url: no local redis-server is running and {ENV_URL} is not set; "
                     "`python -m store up` starts one (a job starts it by itself)")
        url = server.url
    print(url if args.show_password else redact(url))
