"""``python -m teff_client`` is the ``teff-client`` command."""

import sys

from teff_client.cli import main

sys.exit(main())
