#!/bin/sh
# Runs a Python test script with Debian's interpreter, whose dist-packages hold
# python3-kubernetes and python3-yaml. A py_test would take the first python3
# on PATH, which on a developer machine may be a pyenv or venv without them.
exec /usr/bin/python3 "$@"
