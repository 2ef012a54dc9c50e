import sys

from podnetwork.cli import main

sys.exit(main())
