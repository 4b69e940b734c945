"""Runs one OpInfo sweep for tests/conftest.py, apart from the pytest process that started it.

    python tests/sweep_runner.py OWNER_PID DIRECTORY COMMAND...

The command's output goes to DIRECTORY/out and DIRECTORY/err and its exit status, once it ends, to
DIRECTORY/rc (written whole: a reader sees it or not). Under pytest-xdist the process that starts a
sweep may end before another process's test reads it, so the sweep is not tied to its starter: it
stops when OWNER_PID (the pytest process that owns the whole run) is gone, or when killed with its
process group (the caller starts this script in a session of its own). Standard library only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now holds the number: ours is gone
        return False
    return True


def main(argv: list[str]) -> int:
    owner, directory, command = int(argv[0]), argv[1], argv[2:]
    with open(os.path.join(directory, "out"), "w") as out, open(os.path.join(directory, "err"), "w") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err)
        while process.poll() is None:
            if not _alive(owner):
                process.kill()
                process.wait()
                return 1
            time.sleep(0.5)
    partial = os.path.join(directory, "rc.partial")
    with open(partial, "w") as f:
        f.write(str(process.returncode))
    os.replace(partial, os.path.join(directory, "rc"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
