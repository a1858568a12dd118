#!/bin/bash
cat > textkit/slug.py <<'PY'
"""URL slugs."""

import re


def slugify(title):
    """`title` as a URL slug: lower case, runs of anything but letters and digits become one
    `-`, none at either end (`"Hello, World!"` is `"hello-world"`)."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
PY
