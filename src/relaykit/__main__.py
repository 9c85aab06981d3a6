"""``python -m relaykit …`` is the ``relaykit`` command (for when the console script is not on PATH)."""

import sys

from relaykit.cli import main

sys.exit(main())
