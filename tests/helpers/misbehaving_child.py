"""A child process that misbehaves on purpose, to test the launcher's staged stop.

    python tests/helpers/misbehaving_child.py [--ignore-term] [--listen PORT]

It starts a grandchild (same process group), prints `child PID` and
`grandchild PID` lines, and then sleeps. With --ignore-term both ignore SIGTERM,
so only SIGKILL ends them; without it they exit on SIGTERM like a polite server.
With --listen it also holds a TCP port on 127.0.0.1 (a stand-in for "someone
else's server" in the busy-port test).
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--listen", type=int)
    parser.add_argument("--grandchild", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.grandchild:
        print(f"grandchild {__import__('os').getpid()}", flush=True)
        while True:
            time.sleep(1)
    listener = None
    if args.listen:
        listener = socket.socket()
        listener.bind(("127.0.0.1", args.listen))
        listener.listen()
    print(f"child {__import__('os').getpid()}", flush=True)
    grandchild_argv = [sys.executable, __file__, "--grandchild"]
    if args.ignore_term:
        grandchild_argv.append("--ignore-term")
    subprocess.Popen(grandchild_argv)  # inherits our stdout and process group
    while True:
        time.sleep(1)


if __name__ == "__main__":
    raise SystemExit(main())
