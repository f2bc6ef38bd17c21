#!/usr/bin/env python3
"""Reports the production code's long functions and long files.

A function over 80 lines or a file over 500 lines is a place to look: often
two components that share one body, sometimes a table or a contract that is
long for good reason. Run from .ci/run (it takes a second); it prints every
one it finds and exits 1 if there is any, so growth is seen when it
happens. The answer to a report is a split that follows who owns what, not
a cut at the line count.

Production code: the .cc, .h and .py files git tracks, except tests/,
bench/, third_party/, any testing/ or fuzz/ folder and test files
(*_test.*, *_test_util.h, *_test_fakes.h, *_test_harness.h,
*_test_config.h). A C++ function runs from the first line of its signature
to its closing brace (lambdas and local classes count toward the function
that holds them); a Python function from its `def` to its last indented
line.

  tests/structure/size_check.py            the repository this file is in
  tests/structure/size_check.py --root D   another tree (every file below D)
"""
import argparse
import os
import re
import subprocess
import sys

FUNCTION_LIMIT = 80
FILE_LIMIT = 500
_CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else|try)\b")
_TEST_FILE = re.compile(
    r"(_test|_test_util|_test_fakes|_test_harness|_test_config)\.(cc|h|py)$")


def blank_comments_and_literals(text):
    """C++ text with comments and string/char literals turned to spaces
    (newlines kept, so offsets and line numbers are unchanged)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif re.match(r'R"[^(\s]*\(', text[i:i + 20]):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            j = text.find(")" + m.group(1) + '"', i)
            j = n if j < 0 else j + len(m.group(1)) + 2
        elif text[i] in "\"'" and not (text[i] == "'" and i > 0 and text[i - 1].isalnum()):
            q, j = text[i], i + 1
            while j < n and text[j] != q and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            out.append(text[i])
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        i = j
    return "".join(out)


def cc_functions(text):
    """(name, first line, last line) of every function body in C++ text."""
    text = blank_comments_and_literals(text)
    starts = [0]
    for k, c in enumerate(text):
        if c == "\n":
            starts.append(k + 1)

    def line_of(offset):
        lo, hi = 0, len(starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    stack, found, head_start = [], [], 0
    for k, c in enumerate(text):
        if c == "{":
            head = text[head_start:k]
            stripped = head.strip()
            is_function = (not any(kind == "function" for kind, _, _ in stack)
                           and ")" in head and not _CONTROL.match(head)
                           and not stripped.endswith("=") and not stripped.startswith("#"))
            if is_function:
                # The signature's first line: past blanks and access labels.
                label = re.match(r"(\s*(?:(?:public|private|protected)\s*:(?!:))?)*\s*", head)
                first = head_start + label.end()
                m = re.search(r"([~\w:]+)\s*\(", head)
                stack.append(("function", line_of(first), m.group(1) if m else "?"))
            else:
                stack.append(("block", 0, ""))
            head_start = k + 1
        elif c == "}":
            if stack:
                kind, first, name = stack.pop()
                if kind == "function":
                    found.append((name, first, line_of(k)))
            head_start = k + 1
        elif c == ";":
            head_start = k + 1
    return found


def py_functions(text):
    """(name, first line, last line) of every `def` in Python text."""
    lines = text.split("\n")
    found = []
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)(?:async\s+)?def (\w+)", line)
        if not m:
            continue
        indent, last = len(m.group(1)), i
        for j in range(i + 1, len(lines)):
            s = lines[j]
            if s.strip() and not s.lstrip().startswith("#"):
                if len(s) - len(s.lstrip()) <= indent:
                    break
                last = j
        found.append((m.group(2), i + 1, last + 1))
    return found


def is_production(path):
    parts = path.split("/")
    if parts[0] in ("tests", "bench", "third_party") or "testing" in parts or "fuzz" in parts:
        return False
    name = parts[-1]
    if _TEST_FILE.search(name) or name.startswith("test_"):
        return False
    return name.endswith((".cc", ".h", ".py"))


def check(root, paths):
    """Lines reporting every long file and function among `paths`."""
    long_files, long_functions = [], []
    for path in paths:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.count("\n")
        if lines > FILE_LIMIT:
            long_files.append((lines, path))
        functions = py_functions(text) if path.endswith(".py") else cc_functions(text)
        for name, first, last in functions:
            if last - first + 1 > FUNCTION_LIMIT:
                long_functions.append((last - first + 1, path, first, name))
    report = [f"file over {FILE_LIMIT} lines: {p} ({n})" for n, p in sorted(long_files, reverse=True)]
    report += [f"function over {FUNCTION_LIMIT} lines: {p}:{first} {name} ({n})"
               for n, p, first, name in sorted(long_functions, reverse=True)]
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", help="check every file below this folder instead")
    args = parser.parse_args()
    if args.root:
        root = args.root
        paths = [os.path.relpath(os.path.join(d, f), root)
                 for d, _, files in os.walk(root) for f in files]
    else:
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        paths = subprocess.check_output(["git", "ls-files"], cwd=root, text=True).split("\n")
    paths = sorted(p for p in paths if p and is_production(p))
    report = check(root, paths)
    for line in report:
        print(line)
    print(f"size_check: {len(paths)} production files, {len(report)} over the limits "
          f"(functions {FUNCTION_LIMIT} lines, files {FILE_LIMIT})")
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main())
