import sys

from tooldecode.cli import main

sys.exit(main())
