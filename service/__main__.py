import sys

from service.cli import main

# Guarded: a spawned helper process (the calibration fit) may import the main module.
if __name__ == "__main__":
    sys.exit(main())
