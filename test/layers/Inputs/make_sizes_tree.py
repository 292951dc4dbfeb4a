#!/usr/bin/env python3
"""Writes a source tree with known sizes for check_sizes.py's test: a file
over the limit, the excepted op file over it, and functions just over and
under 200 lines, with braces hidden in comments and literals."""
import os
import sys

root = sys.argv[1]


def write(rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def function(name, lines, indent=""):
    """A function of exactly `lines` lines, header to closing brace."""
    body = [f"{indent}int {name}(int x) {{"]
    tricky = [f'{indent}  const char *s = "}} {{ }}";',
              f"{indent}  // }} a brace in a comment",
              f"{indent}  char c = '}}';",
              f'{indent}  const char *r = R"cu(}} }})cu";',
              f"{indent}  auto f = [&](int y) {{ return y + 1; }};",
              f"{indent}  /* {{ */"]
    body += tricky
    body += [f"{indent}  x += {i};" for i in range(lines - 2 - len(tricky))]
    body.append(f"{indent}}}")
    assert len(body) == lines
    return "\n".join(body) + "\n"


big = "".join(f"int f{i}() {{ return {i}; }}\n" for i in range(1300))
write("runtime/Exec/Big.cpp", big)
write("ir/LlmcOps.cpp", big)
write("tools/Long.cpp",
      "namespace a {\n" + function("longOne", 201) + function("fits", 200) +
      "struct S {\n" + function("inlineLong", 230, "  ") + "};\n}\n")
