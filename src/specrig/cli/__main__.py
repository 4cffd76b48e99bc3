import sys

from specrig.cli import main

sys.exit(main())
