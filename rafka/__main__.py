import sys

from rafka.cli import main

sys.exit(main())
