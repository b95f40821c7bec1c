"""Write the OpenAPI document the app publishes to openapi/openapi.json.

Run after changing routes or schemas: ``python scripts/export_openapi.py``. A test fails when
the committed file differs from what the running app serves at /openapi.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.main import create_app
from app.settings import Settings

OPENAPI_PATH = ROOT / "openapi" / "openapi.json"


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def main() -> None:
    doc = create_app(Settings(storage="memory")).openapi()
    OPENAPI_PATH.parent.mkdir(exist_ok=True)
    OPENAPI_PATH.write_text(render(doc), encoding="utf-8")
    print(f"wrote {OPENAPI_PATH.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
