import sys

from strom.examples.tradestats.cli import main

sys.exit(main())
