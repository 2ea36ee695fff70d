"""`python -m rlsvc.chaos --address HOST:PORT [--every 20] [--duration 180]`: the fault injector
(rlsvc/cluster/chaos.py, where the Ray code lives)."""

import sys

from rlsvc.cluster.chaos import main

if __name__ == "__main__":
    sys.exit(main())
