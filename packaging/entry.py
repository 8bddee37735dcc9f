"""Entry script of the standalone build (PyInstaller): point the app at what the bundle carries.

The bundle holds the GGUF in ``<bundle>/model`` and the resources in ``<bundle>/resources``. The
install folder is read-only and may be shared by every user, so nothing is written there: the
dequantized model goes to the user's cache folder and the settings to the user's config folder
(``llm_lens.core.loading.cache_root`` and ``llm_lens.desktop.window.contents.settings``
already choose those).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _point_at_bundle() -> None:
    """Set the bundle's paths in the environment before ``llm_lens`` is imported."""
    if not getattr(sys, "frozen", False):
        return  # run from a checkout: the installed packages are found as usual
    bundle = Path(getattr(sys, "_MEIPASS", Path(sys.executable).parent))
    os.environ.setdefault("LLM_LENS_BUNDLED_DIR", str(bundle / "model"))
    os.environ.setdefault("LLM_LENS_RESOURCES", str(bundle / "resources"))


def main() -> int:
    _point_at_bundle()
    from llm_lens.desktop.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    # torch may start helper processes through multiprocessing; a frozen app must re-enter here.
    import multiprocessing

    multiprocessing.freeze_support()
    sys.exit(main())
