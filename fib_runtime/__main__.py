"""``python -m fib_runtime ...`` runs the ``fib`` command line."""

import sys

from .cli.main import main

sys.exit(main())
