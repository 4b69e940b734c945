"""Every test runs with the memory checking mode on (README: FCOMPILE_DEBUG=memory): freed storages
are poisoned with NaN and each new tensor is checked against the live ones, so a memory-planning
bug fails the test that meets it instead of passing by luck."""

import os

os.environ.setdefault("FCOMPILE_DEBUG", "memory")
