#!/usr/bin/env python3
"""Keep the translation catalogs in step with the code (docs/i18n.md).

    scripts/i18n.py update [LANG]   add newly marked strings to each face's .po, drop unmarked ones,
                                    rebuild JupyterLab's jupyter_gpu.json from lab.po
    scripts/i18n.py check [LANG]    list what is untranslated or broken (exit 1 if anything is)

LANG defaults to every language with a catalog (jupyter_gpu/locale/*).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jupyter_gpu.core import i18n, i18n_catalogs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/i18n.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("update", "check"))
    parser.add_argument("language", nargs="?", help="a catalog's language, e.g. zh_CN (default: all)")
    args = parser.parse_args(argv)
    languages = [args.language] if args.language else list(i18n.available_languages()[1:])
    failed = False
    for language in languages:
        if args.command == "update":
            for path in i18n_catalogs.update(language):
                print(f"updated {path.relative_to(i18n_catalogs.ROOT)}")
        found = i18n_catalogs.problems(language)
        for line in found:
            print(f"{language}: {line}")
        failed = failed or bool(found)
        print(f"{language}: {'complete' if not found else f'{len(found)} to do'}", file=sys.stderr)
    if args.command == "update":
        for path in i18n.write_lab_catalogs():
            print(f"wrote {path.relative_to(i18n_catalogs.ROOT)}")
    return 1 if failed and args.command == "check" else 0


if __name__ == "__main__":
    sys.exit(main())
