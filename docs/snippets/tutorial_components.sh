#!/usr/bin/env bash
# Replace the template's example components and tests with the tutorials' two modules.
#   DATAFLEX  the DataFlex checkout (default: the current directory)
#   DEST      the package new_plugin.sh made (default: ../dataflex-length-tutorial)
set -euo pipefail
DATAFLEX=${DATAFLEX:-.}
DEST=${DEST:-../dataflex-length-tutorial}
SNIPPETS="$DATAFLEX/docs/snippets"
PACKAGE="$DEST/src/dataflex_length_tutorial"

rm "$PACKAGE/scorers.py" "$PACKAGE/reweighters.py" "$DEST/tests/test_example.py"
cp "$SNIPPETS/length_zscore.py" "$SNIPPETS/zscore_tilt.py" "$PACKAGE/"
cp "$SNIPPETS/plugin_init.py" "$PACKAGE/__init__.py"
cp "$SNIPPETS/plugin_test_conformance.py" "$DEST/tests/test_conformance.py"
