import sys

from podnetwork.cli.program import main

sys.exit(main())
