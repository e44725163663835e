"""Where the tests find the repository's files and the shared data sets."""

from __future__ import annotations

from pathlib import Path

#: The repository's root folder.
ROOT = Path(__file__).resolve().parents[2]
#: The public data sets (LETOR, Cranfield) beside the repository; the tests that read one are
#: skipped without it.
SHARED_DATA = ROOT.parent / "shared" / "data"
