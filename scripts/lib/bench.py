"""Helpers the Python parts of scripts/bench-* share (imported through
sys.path from scripts/lib)."""

import json
import socket
import urllib.request


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def status(port, timeout=30):
    """The "servers" object of the module's JSON status page on `port`."""
    url = f"http://127.0.0.1:{port}/status?format=json"
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)["servers"]
