"""Run folders: layout, atomic JSON writes, append-only JSONL, the run lock.

One run is one folder, never rewritten in place: ``results/<scenario>/<run_id>/`` with
``manifest.json``, one sub-folder per variant and a ``COMPLETE`` (or ``INTERRUPTED``) marker
written last. Every JSON file is written through :func:`write_json_atomic` (temp file in the same
folder, fsync, ``os.replace``) so a kill at any moment leaves either the old or the new file.
JSONL files are append-only; a torn last line (the harness was killed mid-write) is skipped with a
warning when read. While a harness process writes a run it holds the run's lock
(:func:`hold_run_lock`), so a second process (``--resume`` of a live run) is refused. Readers
load a run through `harness.store.run_folder.load_run`, which upgrades each file to today's version
(`harness.store.versions`) and checks its shape (`harness.store.manifest`, `harness.store.summary`):
a damaged or hand-edited file is a :class:`ResultsError` naming it, never a crash further on.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import fcntl
import json
import logging
import os
import secrets
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from harness.core import bounds
from harness.core.errors import BadInput
from harness.store import sequence
from harness.store.names import safe_name  # re-exported: the run store's folder names

SCHEMA_VERSION = 1  # manifest, status, expectations, verdict (summary.json: harness.store.versions)
COMPLETE_MARKER = "COMPLETE"
INTERRUPTED_MARKER = "INTERRUPTED"
MANIFEST = "manifest.json"
STATUS = "status.json"
SUMMARY = "summary.json"
REQUESTS = "requests.jsonl"
SAMPLES = "samples.jsonl"
QUALITY = "quality.jsonl"
SERVER_LOG = "server.log"
SERVER_INFO = "server_info.json"
LOCK_FILE = ".lock"  # flock held while a harness process writes the run
ATTEMPTS_DIR = ".attempts"  # earlier attempts of variants that --resume reran (never loaded)

log = logging.getLogger(__name__)


class ResultsError(BadInput):
    """A run folder or file that cannot be read as a run (the message names the file)."""


def new_run_id(now: _dt.datetime | None = None) -> str:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def utc_now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()  # what open() gives a new file (mkstemp's are 0600): readable per umask


def _replace_atomic(path: Path, mode: int, write: Callable[[BinaryIO], None]) -> None:
    """The one atomic writer: ``write`` fills a temp file in ``path``'s folder (of ``mode``), which is
    fsynced and renamed over ``path``, then the folder is fsynced; readers see the old or the new
    file, never a mix, and a failure leaves no temp file behind."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new content, never a mix.
    The file gets the mode ``open()`` would give it (0666 less the umask at import), not 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _replace_atomic(path, FILE_MODE, lambda f: f.write(text.encode("utf-8")))


def rewrite_lines_atomic(path: Path, transform: Callable[[str], str], chunk_bytes: int = 1 << 20) -> None:
    """Replace ``path`` by ``transform`` applied to its text, a run of whole lines (at most about
    ``chunk_bytes``) at a time, atomically (readers see the old or the new file). Bytes that are
    not UTF-8 pass through unchanged; memory stays bounded whatever the file's size; the file keeps
    its mode."""
    path = Path(path)

    def write(dst: BinaryIO) -> None:
        with open(path, "rb") as src:
            while True:
                block = src.read(chunk_bytes)
                if not block:
                    break
                if not block.endswith(b"\n"):
                    block += src.readline()  # complete the last line
                text = block.decode("utf-8", errors="surrogateescape")
                dst.write(transform(text).encode("utf-8", errors="surrogateescape"))

    _replace_atomic(path, os.stat(path).st_mode & 0o7777, write)  # the file keeps its mode


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "to_json"):
        return obj.to_json()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def read_json(path: Path) -> Any:
    """A result file's JSON; ResultsError naming the file when it is missing, not a regular file,
    over `bounds.RESULT_JSON_BYTES`, nested too deep for the parser or not JSON."""
    path = Path(path)
    try:
        return json.loads(bounds.read_bytes_bounded(path, bounds.RESULT_JSON_BYTES, "result file").decode("utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing") from None
    except bounds.TooLarge as exc:
        raise ResultsError(str(exc)) from None
    except RecursionError:
        raise ResultsError(f"{path}: not valid JSON (nested deeper than a result file is)") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, and a number over Python's digit limit
        raise ResultsError(f"{path}: not valid JSON ({exc})") from None


class JsonlWriter:
    """Append-only JSONL: one JSON object per line.

    In the caller's thread (the default) each line is written, flushed and fsynced before
    `append` returns. With ``background=True`` (the request records of a serving window: their
    appends run on the client's event loop, where a blocking fsync of several ms would delay the
    stamping of every other stream's reads) `append` encodes the line and hands it to a writer
    thread, which writes what has queued up, flushes it at once and fsyncs at most every
    ``sync_interval_s`` and at `close` (which waits for every line). A write error in the thread
    (a full disk) is raised by the next `append` or by `close`.

    A crash keeps every line written before it (in the background: every line the thread had
    written; a kill loses at most the lines of its last few ms); at most the last line is torn,
    and :func:`read_jsonl` skips a torn last line with a warning.
    """

    def __init__(self, path: Path, fsync: bool = True, *, background: bool = False, sync_interval_s: float = 0.2):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", encoding="utf-8")
        self._fsync = fsync
        self.count = 0
        self._thread: threading.Thread | None = None
        if background:
            self._pending: list[str] = []
            self._cond = threading.Condition()
            self._closing = False
            self._error: BaseException | None = None
            self._sync_interval_s = sync_interval_s
            self._thread = threading.Thread(target=self._drain, name=f"jsonl:{self.path.name}", daemon=True)
            self._thread.start()

    def append(self, obj: Any) -> None:
        line = json.dumps(obj, separators=(",", ":"), default=_json_default) + "\n"
        if self._thread is None:
            self._f.write(line)
            self._f.flush()
            if self._fsync:
                os.fsync(self._f.fileno())
        else:
            with self._cond:
                if self._error is not None:
                    raise self._error
                if self._closing:
                    raise ValueError(f"{self.path}: append after close")
                self._pending.append(line)
                self._cond.notify()
        self.count += 1

    def _drain(self) -> None:
        synced = time.monotonic()
        dirty = False
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait(self._sync_interval_s if dirty else None)
                    if dirty and not self._pending:
                        break  # the interval passed: fsync what was written
                lines, self._pending = self._pending, []
                closing = self._closing and not lines
            try:
                if lines:
                    self._f.write("".join(lines))
                    self._f.flush()
                    dirty = True
                if dirty and self._fsync and (closing or time.monotonic() - synced >= self._sync_interval_s):
                    os.fsync(self._f.fileno())
                    synced, dirty = time.monotonic(), False
                elif dirty and not self._fsync:
                    dirty = False
            except OSError as exc:
                with self._cond:
                    self._error = exc
                return
            if closing:
                return

    def close(self) -> None:
        if self._thread is not None and not self._f.closed:
            with self._cond:
                self._closing = True
                self._cond.notify()
            self._thread.join()
        if not self._f.closed:
            self._f.close()
        if self._thread is not None and self._error is not None:
            error, self._error = self._error, None
            raise error

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


try:  # optional: 3-5x faster parsing of large result files
    import orjson as _orjson

    def _loads(raw: bytes):
        try:
            return _orjson.loads(raw)
        except ValueError:  # NaN/Infinity (Python's json writes them; orjson refuses them)
            return json.loads(raw)
except ImportError:  # stdlib fallback
    _loads = json.loads


def read_jsonl(path: Path) -> Iterator[dict]:
    """Yield the objects of a JSONL file, one line at a time (a million rows never sit in memory
    as text). A torn *last* line is skipped with a warning; a bad line anywhere else is real
    corruption and raises :class:`ResultsError` naming the file and line."""
    path = Path(path)
    if not path.exists():
        return
    with _open_regular(path) as f:
        pending: tuple[int, bytes] | None = None
        for i, raw in enumerate(iter(lambda: f.readline(bounds.RESULT_LINE_BYTES + 1), b""), 1):
            if len(raw) > bounds.RESULT_LINE_BYTES:
                raise ResultsError(f"{path}:{i}: a line longer than {bounds.RESULT_LINE_BYTES:,} bytes")
            if pending is not None:
                yield _parse_line(path, *pending)
                pending = None
            if raw.strip():
                pending = (i, raw)
        if pending is not None:
            try:
                yield _loads(pending[1])
            except (ValueError, UnicodeDecodeError, RecursionError):
                log.warning("%s: skipping a torn last line (line %d)", path, pending[0])


def _open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (opened without blocking: a FIFO would
    hold the reader, /dev/zero feed it forever); ResultsError naming it otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not _is_regular(fd):
        os.close(fd)
        raise ResultsError(f"{path}: not a regular file (a result file must be one)")
    return os.fdopen(fd, "rb")


def _is_regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def _parse_line(path: Path, lineno: int, raw: bytes) -> dict:
    try:
        return _loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ResultsError(f"{path}:{lineno}: not valid JSON") from None


@dataclass(frozen=True)
class RunPaths:
    """Paths of one run folder."""

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def complete(self) -> Path:
        return self.root / COMPLETE_MARKER

    @property
    def interrupted(self) -> Path:
        return self.root / INTERRUPTED_MARKER

    @property
    def summary_csv(self) -> Path:
        return self.root / "summary.csv"

    @property
    def lock(self) -> Path:
        return self.root / LOCK_FILE

    @property
    def attempts(self) -> Path:
        return self.root / ATTEMPTS_DIR

    def variant(self, name: str) -> VariantPaths:
        return VariantPaths(self.root / safe_name(name))


@dataclass(frozen=True)
class VariantPaths:
    root: Path

    @property
    def status(self) -> Path:
        return self.root / STATUS

    @property
    def summary(self) -> Path:
        return self.root / SUMMARY

    @property
    def requests(self) -> Path:
        return self.root / REQUESTS

    @property
    def samples(self) -> Path:
        return self.root / SAMPLES

    @property
    def quality(self) -> Path:
        return self.root / QUALITY

    @property
    def server_info(self) -> Path:
        return self.root / SERVER_INFO

    def server_log(self, attempt: int = 1) -> Path:
        return self.root / (SERVER_LOG if attempt <= 1 else f"server.attempt{attempt}.log")

    def server_logs(self) -> list[Path]:
        """Every attempt's server log that exists."""
        return sorted(p for p in self.root.glob("server*.log") if p.is_file())


class RunLocked(BadInput, ValueError):
    """Another harness process is writing the run folder (the message says which)."""


# Run folders this process holds locked: resolved root -> [fd, holders]. A process may take its
# own lock again (a resume holds it from reopening the folder to the end of the run, and the
# runner takes it for the run itself); the flock is released when the last holder lets go.
_HELD: dict[Path, list[int]] = {}


class RunLock:
    """One hold of the exclusive ``flock`` on ``<run>/.lock`` (docs/sharding.md, "The run lock")."""

    def __init__(self, root: Path):
        self.root = root
        self._held = True

    def close(self) -> None:
        if not self._held:
            return
        self._held = False
        entry = _HELD.get(self.root)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del _HELD[self.root]
            os.close(entry[0])  # releases the flock

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a hold nobody closed ends with its owner
        self.close()


def hold_run_lock(root: Path) -> RunLock:
    """Lock the run folder or raise :class:`RunLocked` (naming the holder) when another process
    holds it; never waits. This process may hold it several times (each hold is closed once)."""
    key = Path(root).resolve()
    if key in _HELD:
        _HELD[key][1] += 1
        return RunLock(key)
    fd = os.open(RunPaths(key).lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = ""
        try:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
        except OSError:
            pass
        os.close(fd)
        raise RunLocked(
            f"{root}: another harness process is writing this run ({holder or 'lock held'}); "
            f"wait for it to end or stop it first"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {utc_now_iso()}\n".encode(), 0)
    _HELD[key] = [fd, 1]
    return RunLock(key)


def run_lock_holder(root: Path) -> str | None:
    """Who holds ``<run>/.lock`` now (its holder line, or "lock held"), None when nobody does.
    Takes nothing and creates nothing: a shared try-lock on its own descriptor, let go at once
    (a hold of this very process counts as held too: flock is per open file)."""
    try:
        fd = os.open(RunPaths(Path(root)).lock, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None  # no lock file: nothing ever held it
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            try:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
            except OSError:
                holder = ""
            return holder.splitlines()[0] if holder else "lock held"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def create_run_dir(results_dir: Path, scenario_name: str, run_id: str | None = None) -> RunPaths:
    """A new run folder ``results_dir/<scenario>/<run_id>``, numbered (`harness.store.sequence`)."""
    base = Path(results_dir) / safe_name(scenario_name)
    base.mkdir(parents=True, exist_ok=True)
    root = base / (run_id or new_run_id())
    with sequence.numbering(base) as number:
        root.mkdir(exist_ok=False)
        write_text_atomic(root / sequence.SEQUENCE_FILE, f"{number}\n")
    return RunPaths(root)


def _kind(value: Any) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
        int: "a number",
        float: "a number",
    }.get(type(value), type(value).__name__)


def read_json_object(path: Path) -> dict:
    """A JSON file that must hold an object; ResultsError naming the file when missing, not JSON,
    or of another shape."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: expected a JSON object, found {_kind(data)}")
    return data


def check_variant_files(run: RunPaths, name: str, torn_status_ok: bool = False) -> None:
    """The variant's status.json and summary.json, where present, are JSON objects; else
    ResultsError naming the file. ``torn_status_ok``: a status.json that is not JSON at all is
    let through (``--resume`` reruns such a variant)."""
    vpaths = run.variant(name)
    if vpaths.status.exists():
        try:
            read_json_object(vpaths.status)
        except ResultsError:
            if not (torn_status_ok and _not_json(vpaths.status)):
                raise
    if vpaths.summary.exists():
        read_json_object(vpaths.summary)


def _not_json(path: Path) -> bool:
    try:
        read_json(path)
    except (ResultsError, OSError):
        return True
    return False


def list_runs(results_dir: Path, scenario_name: str) -> list[Path]:
    """Run folders of a scenario, oldest first: by the number each got when it was made
    (`harness.store.sequence`), not by run id, a stamp of a clock that may be set back."""
    base = Path(results_dir) / safe_name(scenario_name)
    if not base.is_dir():
        return []
    return sorted((p for p in base.iterdir() if p.is_dir() and (p / MANIFEST).exists()), key=sequence.run_order)
