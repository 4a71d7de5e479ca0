"""`python -m nas` (and `torchrun -m nas`) runs the CLI."""
from nas.cli import entry_point

entry_point()
