"""A bounded fuzz of the harness's disk inputs, run by .ci/run: the shipped scenarios and the dataset
fixtures, mutated (bytes flipped, dropped and repeated, numbers swapped for hostile ones, lines
duplicated and nested), each fed to what reads it — `harness validate` in this process for a
scenario, `load_dataset` for a dataset. Every outcome must be accepted (0) or refused as bad
input (2, `DatasetError`): an internal error (exit 3, any other exception) or a case that runs
past its alarm fails the fuzz, printing the input that did it.

    python .ci/fuzz.py [--seconds 60] [--seed 0]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.cli import main as harness  # noqa: E402
from harness.workloads import datasets as D  # noqa: E402

SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
DATASETS = {
    "mooncake": ROOT / "tests/fixtures/datasets/mooncake_mini.jsonl",
    "sharegpt": ROOT / "tests/fixtures/datasets/sharegpt_mini.json",
    "doc_qa": ROOT / "tests/fixtures/datasets/loogle_mini.jsonl",
}
HOSTILE_NUMBERS = [
    "0", "-1", "1e-300", "1e300", ".inf", "-.inf", ".nan", "0x7fffffffffffffff", "99999999999999999999",
    "1_000", "0o777", "-0", "3.5", "true", "null", '""', "[]", "{}", "NaN", "Infinity", "-Infinity", "9" * 400,
]  # fmt: skip
# Nesting through aliases: 24 anchors, each 60 levels inside the next (1,440 levels, ~3 KB)
ALIAS_NEST = (
    "\n"
    + "\n".join(["a0: &a0 x"] + [f"a{i}: &a{i} " + "[" * 60 + f"*a{i - 1}" + "]" * 60 for i in range(1, 25)])
    + "\n"
)
CASE_ALARM_S = 20  # one case; a hang is a failure, not a slow case


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang


def mutate(text: str, rng: random.Random) -> str:
    ops = rng.randint(1, 4)
    for _ in range(ops):
        op = rng.randrange(6)
        if not text:
            return text
        i = rng.randrange(len(text))
        if op == 0:  # a byte flipped
            text = text[:i] + chr(rng.randrange(1, 0x250)) + text[i + 1 :]
        elif op == 1:  # a run dropped
            text = text[:i] + text[i + rng.randint(1, 40) :]
        elif op == 2:  # a run repeated
            j = i + rng.randint(1, 80)
            text = text[:j] + text[i:j] * rng.randint(2, 30) + text[j:]
        elif op == 3:  # a number swapped for a hostile one
            digits = [k for k, c in enumerate(text) if c.isdigit()]
            if digits:
                k = rng.choice(digits)
                a = b = k
                while a > 0 and (text[a - 1].isdigit() or text[a - 1] in ".e-"):
                    a -= 1
                while b < len(text) and (text[b].isdigit() or text[b] in ".e"):
                    b += 1
                text = text[:a] + rng.choice(HOSTILE_NUMBERS) + text[b:]
        elif op == 4:  # a line duplicated
            lines = text.split("\n")
            k = rng.randrange(len(lines))
            lines.insert(k, lines[k])
            text = "\n".join(lines)
        else:  # nesting or an alias bomb spliced in
            splice = ["[" * 2000, "{a: " * 300, "&x [*x]", "*nope", "\0", "'", ALIAS_NEST, '"\\ud800"', "\ufeff"]
            text = text[:i] + rng.choice(splice) + text[i:]
    return text


def one_scenario(text: str, where: Path) -> int:
    path = where / "fuzz.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = harness(["validate", str(path)])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    if code not in (0, 2):
        raise AssertionError(f"validate exited {code}:\n{out.getvalue()[-2000:]}")
    return code


def one_dataset(fmt: str, text: str, where: Path) -> int:
    path = where / f"fuzz{DATASETS[fmt].suffix}"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        requests = D.load_dataset(fmt, path)
    except D.DatasetError:
        return 2
    if fmt == "mooncake":  # what the replay does with them next: its clock, each prompt's ids
        D.trace_offsets_ns(requests)
        for r in requests[:50]:
            D.trace_input_ids(r, 16, 32000, 0)
    for r in requests:
        "".join(r.parts).encode("utf-8")  # a lone surrogate crashed the run here (exit 3)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    sources = [("scenario", s.name, s.read_text()) for s in SCENARIOS]
    sources += [(fmt, f.name, f.read_text()) for fmt, f in DATASETS.items()]
    signal.signal(signal.SIGALRM, _alarm)
    counts = {0: 0, 2: 0}
    end = time.monotonic() + args.seconds
    n = 0
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        (where / "models").symlink_to(ROOT / "scenarios" / "models")  # relative model paths resolve
        os.chdir(where)
        while time.monotonic() < end:
            kind, name, original = rng.choice(sources)
            text = mutate(original, rng)
            signal.alarm(CASE_ALARM_S)
            try:
                code = one_scenario(text, where) if kind == "scenario" else one_dataset(kind, text, where)
            except Hang:
                print(f"fuzz: case {n} ({kind} {name}) ran past {CASE_ALARM_S} s:\n{text[:3000]}", file=sys.stderr)
                return 1
            except Exception as exc:  # noqa: BLE001 - any other outcome is the finding
                print(f"fuzz: case {n} ({kind} {name}): {type(exc).__name__}: {exc}\n{text[:3000]}", file=sys.stderr)
                return 1
            finally:
                signal.alarm(0)
            counts[code] += 1
            n += 1
    print(
        f"fuzz: {n} mutated inputs in {args.seconds:g} s (seed {args.seed}): {counts[0]} accepted, {counts[2]} refused, 0 broke"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
