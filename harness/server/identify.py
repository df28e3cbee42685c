"""Is this endpoint sglang? `identify_sglang` asks ``/get_server_info`` (then ``/server_info``),
falling back to ``/v1/models``, and raises `NotSglangError` naming what it saw at each path
(nothing listening, a 404 everywhere, an answer that is not JSON or lacks sglang's arguments,
another server's model list). The answers are read as `harness.server.info` reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.core import bounds
from harness.core.errors import Broken
from harness.server.info import (
    INFO_PATHS,
    MAX_INFO_BYTES,
    NoAnswer,
    ServerAnswerError,
    ServerInfo,
    control_request,
    json_type,
    loads_strict,
    request_headers,
    show,
)

# Keys of sglang's ServerArgs that every version's /get_server_info has; an answer with none of
# them is some other server's JSON.
SGLANG_ARG_KEYS = ("model_path", "tp_size", "page_size", "max_total_num_tokens", "enable_hierarchical_cache")
MODELS_PATH = "/v1/models"


class NotSglangError(Broken):
    """The endpoint answered (or did not), but not as an sglang server: ``reason`` says what was
    seen at each path asked, in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Identified:
    """An endpoint recognised as sglang: by ``path``; ``info`` is None when only ``/v1/models``
    said so (its arguments, HiCache included, are then unknown)."""

    path: str
    info: ServerInfo | None


def _get(url: str, timeout_s: float) -> tuple[int, str, bytes]:
    answer = control_request("GET", url, deadline_s=timeout_s, limit=MAX_INFO_BYTES)
    return answer.status, answer.content_type, answer.body if answer.status == 200 else b""


def identify_sglang(base_url: str, timeout_s: float = bounds.CONTROL_ANSWER_S) -> Identified:
    """Ask ``/get_server_info`` (then ``/server_info``), falling back to ``/v1/models``, whether
    ``base_url`` is an sglang server. Raises NotSglangError naming what was seen: nothing
    listening, a 404 everywhere, an answer that is not JSON, JSON without sglang's arguments, or
    an OpenAI-style model list owned by another server (vLLM answers ``/v1/models`` but has no
    ``/get_server_info``). A server-info answer with sglang's keys but impossible values raises
    it too, with ServerInfo.parse's reason."""
    base = base_url.rstrip("/")
    seen: list[str] = []
    headers = request_headers(base)
    for path in (*INFO_PATHS, MODELS_PATH):
        try:
            status, ctype, body = _get(base + path, timeout_s)
        except NoAnswer as exc:
            if not seen:  # nothing answers at all: no point asking the other paths
                raise NotSglangError(f"nothing answers ({exc.reason})") from None
            seen.append(f"{path}: {exc.reason}")
            continue
        except ServerAnswerError as exc:
            seen.append(f"{path}: {exc.reason}")
            continue
        if status != 200:
            auth = ""
            if status in (401, 403):
                auth = (
                    " (it refused the API key sent: is it the server's --api-key?)"
                    if "authorization" in headers
                    else " (it wants credentials: server.api_key_env names the variable holding its --api-key)"
                )
            seen.append(f"{path} answered {status}{auth}")
            continue
        try:
            obj = loads_strict(body)
        except ValueError:
            seen.append(f"{path} answered 200 with {ctype or 'a body'} that is not JSON")
            continue
        if path == MODELS_PATH:
            owners = sorted({str(m.get("owned_by")) for m in _model_list(obj)})
            if "sglang" in owners:
                return Identified(path, None)
            seen.append(
                f"{path} lists models owned by {', '.join(show(o, 30) for o in owners)}"
                if owners
                else f"{path} answered JSON that is not an OpenAI model list"
            )
            continue
        if not isinstance(obj, dict) or not any(k in obj for k in SGLANG_ARG_KEYS):
            keys = ", ".join(sorted(obj)[:6]) if isinstance(obj, dict) else json_type(obj)
            seen.append(f"{path} answered JSON without sglang's server arguments ({show(keys, 80)})")
            continue
        try:
            return Identified(path, ServerInfo.parse(obj))
        except ServerAnswerError as exc:
            raise NotSglangError(f"{path}: {exc.reason}") from None
    raise NotSglangError("; ".join(seen))


def _model_list(obj: Any) -> list[dict]:
    data = obj.get("data") if isinstance(obj, dict) else None
    return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []
