import os

# The memory checking mode (freed storages poisoned with NaN, overlap assertions) is on for the zoo.
# Set before compiler_core is first imported by this directory; the suite's other tests may import it
# earlier, so compiler_core must read the variable when it compiles, not only at import.
os.environ.setdefault("FCOMPILE_DEBUG", "memory")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_dynamo():
    # Each model starts with empty Dynamo caches: no guard, recompile limit or cached frame carries
    # over from the previous model, so a session holds only its own model's graphs.
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
