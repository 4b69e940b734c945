"""The model zoo: transformers architectures with random weights, compiled and compared with eager.

`zoo.py` builds the models, `check.py` runs and compares them, `test_zoo.py` is the CPU part of
`make test`, and `python -m tests.models` prints the table (see `__main__.py`).
"""
