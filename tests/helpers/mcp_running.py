"""Start the test MCP servers (tests/helpers/mcp_servers.py): the stdio command, and the HTTP one on a free port."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from workbench.server import free_port

SERVER_SCRIPT = Path(__file__).with_name("mcp_servers.py")
STDIO_COMMAND = shlex.join([sys.executable, str(SERVER_SCRIPT), "stdio"])


class HttpMcpServer(str):
    """The server's URL, with its process (`.process`) for tests that kill it."""

    process: subprocess.Popen[bytes]


@contextmanager
def http_mcp_server() -> Iterator[HttpMcpServer]:
    """The test server on Streamable HTTP at 127.0.0.1:<free port>/mcp; yields its URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER_SCRIPT), "http", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = HttpMcpServer(f"http://127.0.0.1:{port}/mcp")
    url.process = proc
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url, timeout=1)
            except urllib.error.HTTPError:
                break  # it answers (a GET without a session is refused): it is up
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the HTTP MCP server did not start (exit code {proc.poll()})") from None
                time.sleep(0.2)
            else:
                break
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
