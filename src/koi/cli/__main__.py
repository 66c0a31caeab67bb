import sys

from koi.cli import main

sys.exit(main())
