# SPDX-License-Identifier: MIT
"""``python -m ddprun ARGS`` runs ``ddprun ARGS``."""

import sys

from ddprun import main

sys.exit(main())
