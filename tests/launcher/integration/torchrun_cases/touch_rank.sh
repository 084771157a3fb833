#!/bin/sh
# SPDX-License-Identifier: MIT
# Worker of the replayed launcher cases (--no-python): creates $1/$RANK and says so.
echo "creating $1/$RANK"
touch "$1/$RANK"
