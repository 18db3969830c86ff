"""A hostile plugin in Python (tests/tests/polyglot.rs). Its ADD does what
its config's `do` says, to show that an interpreter inside the sandbox has
no more reach than a Rust plugin:

- `loop`: spins forever;
- `alloc`: allocates without bound (and keeps spinning if Python reports
  MemoryError instead of trapping);
- `sleep`: sleeps an hour, then would answer;
- `exit`: calls `sys.exit`;
- `reach`: tries the node's files, the environment, the working directory
  and a socket, and fails with code 100 listing what each attempt gave.
"""

import json
import os
import sys
import time

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import types


def attempt(what, f):
    try:
        return f"{what}: got {f()!r}"
    except BaseException as e:  # noqa: B036 -- every outcome is the answer
        return f"{what}: {type(e).__name__}"


def connect():
    import socket

    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.connect(("127.0.0.1", 22))
    return "connected"


class Plugin(exports.Plugin):
    def add(self, req):
        do = json.loads(req.config).get("do")
        if do == "loop":
            while True:
                pass
        if do == "alloc":
            hoard = []
            try:
                while True:
                    hoard.append(bytearray(1 << 20))
            except MemoryError:
                while True:
                    pass
        if do == "sleep":
            time.sleep(3600)
            raise Err(types.Error(100, "woke up after an hour", ""))
        if do == "exit":
            sys.exit(0)
        if do == "reach":
            found = [
                attempt("file", lambda: open("/etc/hostname").read()),
                attempt("listdir", lambda: os.listdir("/")),
                attempt("env", lambda: dict(os.environ)),
                attempt("cwd", os.getcwd),
                attempt("socket", connect),
            ]
            raise Err(types.Error(100, json.dumps(found), ""))
        raise Err(types.Error(7, f"unknown do: {do!r}", ""))

    def del_(self, req):
        pass

    def check(self, req):
        pass

    def status(self, config):
        pass

    def gc(self, config, valid_attachments):
        pass
