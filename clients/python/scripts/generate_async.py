#!/usr/bin/env python3
"""Write teff_client/_async_client.py from teff_client/_sync_client.py (the unasync approach of
httpcore): the two clients stay one definition, so no operation exists in only one of them.

    python clients/python/scripts/generate_async.py [--check]
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "teff_client"
SOURCE = PACKAGE / "_sync_client.py"
TARGET = PACKAGE / "_async_client.py"

REPLACEMENTS: list[tuple[str, str]] = [
    (r'^"""The synchronous client:', '"""The asyncio client (generated: do not edit):'),
    (r"^import time$", "import asyncio"),
    (r"\bIterator\b", "AsyncIterator"),
    (r"\bhttpx\.Client\b", "httpx.AsyncClient"),
    (r"\bhttpx\.BaseTransport\b", "httpx.AsyncBaseTransport"),
    (r"\bclass Client\b", "class AsyncClient"),
    (r"-> Client:", "-> AsyncClient:"),
    (r"A client of the", "An asyncio client of the"),
    (r"(\n    )def (?!__init__|_json\b)", r"\1async def "),
    (r"def __enter__", "def __aenter__"),
    (r"def __exit__", "def __aexit__"),
    (r"\btime\.sleep\(", "await asyncio.sleep("),
    (r"self\._http\.request\(", "await self._http.request("),
    (r"self\._http\.close\(\)", "await self._http.aclose()"),
    (
        r"self\.request\(method, path, \*\*kwargs\)\.json\(\)",
        "(await self.request(method, path, **kwargs)).json()",
    ),
    (r"return self\.request\(", "return await self.request("),
    (r"\n(\s+)self\.request\(", r"\n\1await self.request("),
    (r"return await self\.request\(([^\n]*)\)\.(content|text)\n", r"return (await self.request(\1)).\2\n"),
    (r"self\._json\(", "await self._json("),
    (r"^        self\.close\(\)$", "        await self.close()"),
    (r"(\n    )def _json", r"\1async def _json"),
    (r"return self\.update_run\(", "return await self.update_run("),
    (r"page = self\.list_(runs|measurements)\(", r"page = await self.list_\1("),
    (r"yield from page\[\"items\"\]", 'for item in page["items"]:\n                yield item'),
]


def render() -> str:
    text = SOURCE.read_text()
    for pattern, replacement in REPLACEMENTS:
        text = re.sub(pattern, replacement, text, flags=re.MULTILINE)
    # Formatted as the repository formats (ruff), so that --check compares like with like.
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--line-length", "110", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    )
    return formatted.stdout


def main() -> int:
    rendered = render()
    if "--check" in sys.argv:
        if TARGET.read_text() != rendered:
            print(f"{TARGET} is stale: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(rendered)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
