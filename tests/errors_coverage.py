#!/usr/bin/env python3
"""Lists the user_check sites whose message docs/errors.md does not quote yet.

Run from anywhere:  python3 tests/errors_coverage.py [--all] [--exempt FILE] [--strict]

A site is `user_check(cond, at) << ... ;` in dsl/, jit/ or runtime/. Its message is taken to be
the string literals of its `<<` chain up to the `;` (adjacent literals joined, escapes read,
and a `kName` constant of the same file that is a plain literal put in). The site counts as
quoted when one of its literals of 20 characters or more appears in docs/errors.md; when it has
none that long, when its literals of 3 characters or more appear in order in one quoted
message, or, when it has only one, when that one (of 8 or more) appears. It is a heuristic: a
message built from variables or from a helper's parameters has no literal to look for and is
listed with "<no literal>"; read those by hand.

Prints "file:line: literal" for each site not quoted (its longest literal), then a total.
--all prints every site with "covered" or "UNCOVERED". --exempt FILE reads lines
"file:substring  # why": a site of that file whose chain text holds the substring is not
listed (tests/errors_coverage_exempt.txt, when it exists, is read by default). --strict exits
1 when a site is listed, or when an exemption matches no site.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRS = ("dsl", "jit", "runtime")
LONG = 20  # a literal this long is distinctive enough to find in the doc
SHORT = 8  # shorter than this, a literal (": ", "\"") says nothing


def strip_comments(text):
    """The source with comments blanked (kept as spaces and newlines, so offsets stay)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("R\"", i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            if end < 0:
                out.append(c)
                i += 1
            else:
                end += len(m.group(1)) + 2
                out.append(text[i:end])
                i = end
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def unescape(body):
    return re.sub(r"\\(.)", lambda m: ESCAPES.get(m.group(1), m.group(1)), body)


def chain_end(text, start):
    """The offset of the `;` that ends the statement beginning at `start` (outside strings and
    brackets)."""
    depth, i, n = 0, start, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                return i
        elif c == ";" and depth == 0:
            return i
        i += 1
    return n


def literals(chain, constants):
    """The string literals of `chain`, adjacent ones joined, `kName` constants put in."""
    tokens = re.finditer(r'"((?:[^"\\\n]|\\.)*)"|\b(k[A-Z]\w*)\b|(\S)', chain)
    result, current = [], None
    for t in tokens:
        if t.group(1) is not None:
            current = (current or "") + unescape(t.group(1))
            continue
        if t.group(2) is not None and t.group(2) in constants:
            if current is not None:
                result.append(current)
            result.append(constants[t.group(2)])
            current = None
            continue
        if current is not None:
            result.append(current)
            current = None
    if current is not None:
        result.append(current)
    return result


def constants_of(text):
    """`kName` constants of a file defined as one literal (or adjacent literals)."""
    found = {}
    for m in re.finditer(r'\b(k[A-Z]\w*)(?:\[\])?\s*(?:=|\{)\s*((?:"(?:[^"\\\n]|\\.)*"\s*)+)[;}]', text):
        found[m.group(1)] = "".join(unescape(b) for b in re.findall(r'"((?:[^"\\\n]|\\.)*)"', m.group(2)))
    return found


def sites():
    for d in DIRS:
        for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
            for f in sorted(files):
                if not f.endswith((".cpp", ".h", ".cc", ".cu")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, ROOT)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = strip_comments(fh.read())
                constants = constants_of(text)
                for m in re.finditer(r"\buser_check\(", text):
                    if rel == os.path.join("dsl", "error.h"):
                        continue  # the macro's definition
                    line = text.count("\n", 0, m.start()) + 1
                    end = chain_end(text, m.start())
                    chain = text[m.start():end]
                    yield rel, line, chain, literals(chain, constants)


def squash(s):
    return " ".join(s.split())


def covered(lits, doc, doc_lines=()):
    lits = [squash(l) for l in lits]
    long_ones = [l for l in lits if len(l) >= LONG]
    if long_ones:
        # A literal of the doc may be cut where the message interpolates a value; look for
        # each long literal, and for its first and last 20 characters (the part beside a value).
        return any(l in doc or (len(l) > 2 * LONG and (l[:LONG] in doc and l[-LONG:] in doc)) for l in long_ones)
    # Only short literals (`"\"" << path << "\" line " << n << " lacks \""`): with two or more
    # of 3 characters or more, they count when all appear, in order, within one quoted message
    # (one alone, like "must be in [0, 1]", could be another message's words).
    parts = [l for l in lits if len(l) >= 3]
    if len(parts) >= 2:
        pattern = re.compile(".{0,300}?".join(re.escape(p) for p in parts))
        return any(pattern.search(line) for line in doc_lines)
    best = max(lits, key=len, default="")
    return len(best) >= SHORT and best in doc


def read_exemptions(path):
    exemptions = []
    if not path or not os.path.exists(path):
        return exemptions
    with open(path, encoding="utf-8") as fh:
        for number, raw in enumerate(fh, 1):
            line = raw.split("  #", 1)[0].strip() if "  #" in raw else raw.strip()
            if not line or line.startswith("#"):
                continue
            file, _, substring = line.partition(":")
            if not substring or "#" not in raw:
                sys.exit(f"{path}:{number}: want \"file:substring  # why\", got: {raw.rstrip()}")
            exemptions.append([file.strip(), substring.strip(), number, 0])
    return exemptions


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="print every site")
    parser.add_argument("--doc", default=os.path.join(ROOT, "docs", "errors.md"))
    parser.add_argument("--exempt", default=os.path.join(ROOT, "tests", "errors_coverage_exempt.txt"))
    parser.add_argument("--strict", action="store_true", help="exit 1 when a site is not quoted")
    args = parser.parse_args()
    with open(args.doc, encoding="utf-8") as fh:
        text = fh.read().replace("\\`", "`")
    doc = squash(text)
    doc_lines = [squash(line) for line in text.splitlines() if line.startswith("towerjit")]
    exemptions = read_exemptions(args.exempt)
    total = uncovered = exempt = 0
    for rel, line, chain, lits in sites():
        total += 1
        ok = covered(lits, doc, doc_lines)
        shown = squash(max(lits, key=len)) if lits else "<no literal>"
        if not ok:
            hit = next((e for e in exemptions if e[0] == rel and e[1] in chain), None)
            if hit:
                hit[3] += 1
                exempt += 1
                if args.all:
                    print(f"{rel}:{line}: exempt: {shown}")
                continue
            uncovered += 1
        if args.all:
            print(f"{rel}:{line}: {'covered' if ok else 'UNCOVERED'}: {shown}")
        elif not ok:
            print(f"{rel}:{line}: {shown}")
    stale = [e for e in exemptions if e[3] == 0]
    for file, substring, number, _ in stale:
        print(f"{os.path.relpath(args.exempt, ROOT)}:{number}: exemption {file}:{substring} matches no uncovered site")
    print(f"{uncovered} of {total} user_check sites are not quoted in {os.path.relpath(args.doc, ROOT)}"
          + (f" ({exempt} more exempt)" if exemptions else ""))
    return 1 if args.strict and (uncovered or stale) else 0


if __name__ == "__main__":
    sys.exit(main())
