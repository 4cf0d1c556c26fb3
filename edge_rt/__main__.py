import sys

from edge_rt.cli import main

sys.exit(main())
