#!/bin/sh
# Runs a Python test script with Debian's /usr/bin/python3 (standard library
# only; the tests start our real binaries, prometheus and chromium).
exec /usr/bin/python3 "$@"
