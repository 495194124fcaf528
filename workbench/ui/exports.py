"""The files the pages offer for download: one private folder per app, removed at exit.

Each export has a stable name (one per chat session, one per throughput format), so
a Send does not leave one more file behind: the file is rewritten in place, and
Gradio serves its own copy of it. Gradio's copies are removed by `delete_cache`.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import threading
import uuid
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["GRADIO_CACHE_CLEANUP", "ExportFolder", "EXPORTS"]

# Blocks(delete_cache=...): every hour, Gradio drops its copies older than an hour (and all at shutdown).
GRADIO_CACHE_CLEANUP = (3600, 3600)


class ExportFolder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._folder: Path | None = None
        self._names: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    @property
    def folder(self) -> Path:
        with self._lock:
            if self._folder is None or not self._folder.is_dir():
                self._folder = Path(tempfile.mkdtemp(prefix="workbench-exports-"))  # 0700
                atexit.register(shutil.rmtree, self._folder, True)
            return self._folder

    def name_for(self, owner: object) -> str:
        """A name of its own for `owner` (a chat session), as long as it lives."""
        with self._lock:
            name = self._names.get(owner)
            if name is None:
                name = self._names[owner] = uuid.uuid4().hex[:12]
            return name

    def write(self, file_name: str, write: Callable[[Path], object]) -> str:
        """`write(tmp_path)` fills a new file that then replaces `file_name` at once; returns its path."""
        target = self.folder / file_name
        tmp = target.with_name(f".{uuid.uuid4().hex}.tmp")
        try:
            write(tmp)
            os.chmod(tmp, 0o600)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return str(target)

    def write_json(self, file_name: str, document: object) -> str:
        return self.write(file_name, lambda path: path.write_text(json.dumps(document, indent=2)))

    def files(self) -> list[Path]:
        return sorted(self.folder.iterdir())


EXPORTS = ExportFolder()
