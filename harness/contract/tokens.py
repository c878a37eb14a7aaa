"""Token counts of a tool catalog with o200k_base, offline.

tiktoken downloads its BPE file at first use, which a machine that reaches only
package registries cannot do. The wheel of ``bpe-openai`` ships the same file
(gzipped; its sha256 is what tiktoken checks), so it is unpacked once into a
cache directory of this project's and tiktoken is pointed at it.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ENCODING = "o200k_base"
CACHE_NAME = "fb374d419588a4632f3f557e76b4b70aebbca790"
"""The sha1 of the encoding's download URL: the file name tiktoken looks for in its cache."""


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mcp-chaos" / "tiktoken"


def _bpe_openai_dir() -> Path:
    """Where bpe-openai is installed, found without importing it: importing the package runs its
    registry, whose tiktoken call uses the deprecated ``importlib.resources.open_binary`` (a
    DeprecationWarning that an error-on-warning test run turns into a failure)."""
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("bpe_openai is not installed: pip install bpe-openai")
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def encoding() -> Any:
    """The o200k_base encoding, prepared from bpe-openai's copy of its file on first use."""
    import tiktoken

    cache = Path(os.environ.get("TIKTOKEN_CACHE_DIR") or _cache_dir())
    target = cache / CACHE_NAME
    if not target.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        packed = _bpe_openai_dir() / "data" / f"{ENCODING}.tiktoken.gz"
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(gzip.decompress(packed.read_bytes()))
        tmp.replace(target)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    return tiktoken.get_encoding(ENCODING)


def count(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))


def catalog_tokens(tools: Sequence[Mapping[str, Any]]) -> tuple[dict[str, int], int]:
    """Tokens per tool and for the whole ``tools`` list, each as compact JSON: what an agent's context
    holds of the catalog."""
    per_tool = {str(t.get("name")): count(json.dumps(t, separators=(",", ":"))) for t in tools}
    return per_tool, count(json.dumps(list(tools), separators=(",", ":")))
