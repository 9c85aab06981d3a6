import sys

from relaykit.cli import main

sys.exit(main())
