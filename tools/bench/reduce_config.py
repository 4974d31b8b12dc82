#!/usr/bin/env python3
"""reduce_config.py SRC DST [--calib N] [--eval N] [--lambada N] [--variants A,B,...]
                    [--cpu-jitter X --jitter-seed N]

Writes a copy of the lmpress config SRC to DST with fewer calibration windows (calibration.samples),
evaluation windows (eval.max_windows) and LAMBADA passages (eval.lambada_max; 0 drops LAMBADA),
and optionally only the named variants, everything else as it is.  --cpu-jitter puts the config on
the cpu backend with its `jitter` diagnostic (and `jitter_seed`), keeping a `threads` setting
(tools/bench/switch_backends.sh's noise tables).  Relative paths are rewritten
to stay relative to SRC's folder.  Used by tools/bench/*.sh to run the shipped SmolLM2 configs on
slow backends in bounded time; the reduced config is the shipped one with smaller counts, so each
variant keeps its pipeline and parameters.  Only the Python standard library.
"""
import argparse
import os
import re
import sys


def split_variants(text):
    """Return (head, [variant text], tail) of the `variants = ( ... );` list."""
    m = re.search(r"variants\s*=\s*\(", text)
    if not m:
        sys.exit("reduce_config.py: no variants list")
    i, depth, start, items = m.end(), 0, None, []
    while i < len(text):
        c = text[i]
        if c == "#":  # a comment runs to the end of the line
            i = text.index("\n", i)
            continue
        if c == '"':
            i = text.index('"', i + 1)
        elif c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                items.append(text[start:i + 1])
        elif c == ")" and depth == 0:
            return text[:m.end()], items, text[i:]
        i += 1
    sys.exit("reduce_config.py: unterminated variants list")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--calib", type=int)
    ap.add_argument("--eval", type=int)
    ap.add_argument("--lambada", type=int)
    ap.add_argument("--variants")
    ap.add_argument("--cpu-jitter", type=float)
    ap.add_argument("--jitter-seed", type=int, default=1)
    a = ap.parse_args()
    s = open(a.src).read()
    base = os.path.relpath(os.path.dirname(os.path.abspath(a.src)), os.path.dirname(os.path.abspath(a.dst)))
    s = re.sub(r'"(\.\./[^"]*)"', lambda m: '"%s"' % os.path.normpath(os.path.join(base, m.group(1))), s)
    if a.calib is not None:
        s, n = re.subn(r"\bsamples\s*=\s*\d+;", "samples = %d;" % a.calib, s)
        if n != 1:
            sys.exit("reduce_config.py: %s has %d calibration.samples" % (a.src, n))
    if a.eval is not None:
        s, n = re.subn(r"\bmax_windows\s*=\s*\d+;", "max_windows = %d;" % a.eval, s)
        if n == 0:  # not set: eval.max_windows goes after eval's seq_len
            s, n = re.subn(r"(eval\s*=\s*\{[^}]*?seq_len\s*=\s*\d+;)", r"\1\n  max_windows = %d;" % a.eval, s)
        if n != 1:
            sys.exit("reduce_config.py: cannot set eval.max_windows in %s" % a.src)
    if a.lambada == 0:
        s = re.sub(r"\n\s*lambada(_max)?\s*=[^;]*;", "", s)
    elif a.lambada is not None:
        s = re.sub(r"\blambada_max\s*=\s*\d+;", "lambada_max = %d;" % a.lambada, s)
    if a.cpu_jitter is not None:
        m = re.search(r"(?m)^backend\s*=\s*\{.*\};\s*$", s)
        if not m:
            sys.exit("reduce_config.py: %s has no one-line backend setting" % a.src)
        threads = re.search(r"threads\s*=\s*(\d+);", m.group(0))
        params = ("threads = %s; " % threads.group(1) if threads else "") + \
            "jitter = %g; jitter_seed = %d;" % (a.cpu_jitter, a.jitter_seed)
        s = s[:m.start()] + 'backend = { name = "cpu"; params = { %s }; };' % params + s[m.end():]
    if a.variants:
        want = a.variants.split(",")
        head, items, tail = split_variants(s)
        names = [re.search(r'name\s*=\s*"([^"]*)"', v).group(1) for v in items]
        missing = [w for w in want if w not in names]
        if missing:
            sys.exit("reduce_config.py: %s has no variant %s" % (a.src, ", ".join(missing)))
        s = head + "\n" + ",\n".join(v for v, n in zip(items, names) if n in want) + "\n" + tail
    open(a.dst, "w").write(s)


main()
