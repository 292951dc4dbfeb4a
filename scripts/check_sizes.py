#!/usr/bin/env python3
"""Checks the house's size limits: no source file over 1,200 lines and no
function over 200 lines (issue 38; ../shared/STYLE.md: a function that does
not fit on a screen or two does several things).

Scanned: the C++ sources (.h, .cpp) of ir, passes, codegen, runtime,
frontend, training and tools. ir/LlmcOps.cpp, the dialect's op
implementations, may stay one file as upstream dialects' do. A function is
a brace block whose header has a parameter list, at namespace or class
scope (lambdas and local blocks count toward the function around them);
its length runs from the first line of its header to its closing brace.
Comments, string and character literals (raw strings too) are skipped when
braces are matched.

usage: check_sizes.py [ROOT] [--top N]
Prints one line per violation and exits 1 if there is any; --top N also
lists the N longest functions.
"""
import os
import re
import sys

FOLDERS = ["ir", "passes", "codegen", "runtime", "frontend", "training",
           "tools"]
MAX_FILE_LINES = 1200
MAX_FUNCTION_LINES = 200
# Files allowed over the file limit, with the reason.
FILE_EXCEPTIONS = {
    "ir/LlmcOps.cpp": "the dialect's op implementations, one file as "
                      "upstream dialects keep theirs",
}
# Functions allowed over the function limit ("file:name"), with the reason.
FUNCTION_EXCEPTIONS = {}

SCOPE_WORDS = re.compile(r"\b(namespace|class|struct|union|enum)\b")
CONTROL_WORDS = re.compile(r"^\s*(if|for|while|switch|catch|do|else|return)\b")


def strip_code(text):
    """`text` with comments, string and char literals and preprocessor lines
    blanked (newlines kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            # A preprocessor line, with its continuations.
            while i < n and not (text[i] == "\n" and text[i - 1] != "\\"):
                i += 1
            continue
        if c == "\n":
            out.append(c)
            line_start = True
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append("\n" * text.count("\n", i, end))
            i = end
            continue
        m = re.match(r'R"([^(\s]*)\(', text[i:i + 20])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            close = ")" + m.group(1) + '"'
            end = text.find(close, i + len(m.group(0)))
            end = n if end < 0 else end + len(close)
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(text):
    """(name, first line, line count) of each function in C++ `text`."""
    code = strip_code(text)
    result = []
    # Each open block: (kind, header start line, name); kind is "scope"
    # (namespace, class), "function" or "block".
    stack = []
    header_start = None
    header = []
    line = 1
    for c in code:
        if c == "\n":
            line += 1
            if header:
                header.append(" ")
            continue
        if c in ";{}":
            text_before = "".join(header).strip()
            if c == "{":
                in_function = any(k == "function" for k, _, _ in stack)
                kind, name = "block", ""
                if not in_function:
                    if SCOPE_WORDS.search(text_before) and "(" not in text_before:
                        kind = "scope"
                    elif text_before.startswith("extern"):
                        kind = "scope"
                    elif ")" in text_before and not CONTROL_WORDS.match(
                            text_before) and "=" not in text_before.split("(")[0]:
                        kind = "function"
                        m = re.search(r"([~\w:]+(?:operator\s*\S+?)?)\s*\(",
                                      text_before)
                        name = m.group(1) if m else "?"
                stack.append((kind, header_start or line, name))
            elif c == "}" and stack:
                kind, start, name = stack.pop()
                if kind == "function":
                    result.append((name, start, line - start + 1))
            header, header_start = [], None
            continue
        if not c.isspace() and header_start is None:
            header_start = line
        header.append(c)
    return result


def sources(root):
    for folder in FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if name.endswith((".h", ".cpp")):
                    full = os.path.join(dirpath, name)
                    yield os.path.relpath(full, root), full


def main():
    args = sys.argv[1:]
    top = 0
    if "--top" in args:
        k = args.index("--top")
        top = int(args[k + 1])
        del args[k:k + 2]
    root = args[0] if args else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    violations, longest = [], []
    for rel, full in sources(root):
        with open(full, encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.count("\n")
        if lines > MAX_FILE_LINES and rel not in FILE_EXCEPTIONS:
            violations.append(f"{rel}: {lines} lines (limit {MAX_FILE_LINES})")
        for name, start, count in functions(text):
            longest.append((count, f"{rel}:{start}: {name}"))
            key = f"{rel}:{name}"
            if count > MAX_FUNCTION_LINES and key not in FUNCTION_EXCEPTIONS:
                violations.append(f"{rel}:{start}: function {name} is {count} "
                                  f"lines (limit {MAX_FUNCTION_LINES})")
    for count, where in sorted(longest, reverse=True)[:top]:
        print(f"{count:5d}  {where}")
    for v in violations:
        print(v)
    if violations:
        print(f"{len(violations)} over the size limits")
        return 1
    print(f"sizes: no file over {MAX_FILE_LINES} lines, no function over "
          f"{MAX_FUNCTION_LINES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
