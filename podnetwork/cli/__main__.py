"""`python -m podnetwork.cli`, as `python -m podnetwork`: the way scripts that name the layer run it."""

import sys

from podnetwork.cli.program import main

sys.exit(main())
